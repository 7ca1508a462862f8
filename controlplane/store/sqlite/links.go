package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

const linkCols = `id, source_node, source_group, dest_group, dest_node, target_node, dest_endpoint,
	conn_config, status, status_msg, deleted, last_updated, version`

func scanLink(sc scanner) (store.Link, error) {
	var (
		l       store.Link
		status  string
		deleted int
		updated int64
	)
	err := sc.Scan(&l.ID, &l.SourceNodeID, &l.SourceGroup, &l.DestGroup, &l.DestNodeID, &l.TargetNodeID,
		&l.DestEndpoint, &l.ConnConfig, &status, &l.StatusMessage, &deleted, &updated, &l.Version)
	if err != nil {
		return l, err
	}
	l.Status, err = store.ParseLinkStatus(status)
	l.Deleted, l.LastUpdated = deleted != 0, time.Unix(0, updated)
	return l, err
}

func linkArgs(l store.Link, now time.Time) []any {
	return []any{l.ID, l.SourceNodeID, l.SourceGroup, l.DestGroup, l.DestNodeID, l.TargetNodeID,
		l.DestEndpoint, l.ConnConfig, l.Status.String(), l.StatusMessage, boolInt(l.Deleted), now.UnixNano(), 1}
}

// CreateLink implements store.Store.
func (s *Store) CreateLink(ctx context.Context, l store.Link) error {
	if err := store.CheckNewLink(l); err != nil {
		return err
	}
	err := s.exec(ctx, nil, "INSERT INTO links ("+linkCols+") VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
		linkArgs(l, s.now())...)
	if isUniqueViolation(err) {
		return store.Exists("link", l.ID)
	}
	return err
}

func getLink(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, id string) (store.Link, error) {
	l, err := scanLink(q.QueryRowContext(ctx, "SELECT "+linkCols+" FROM links WHERE id = ?", id))
	if isNoRows(err) {
		return store.Link{}, store.NotFound("link", id)
	}
	return l, wrap(err)
}

// GetLink implements store.Store.
func (s *Store) GetLink(ctx context.Context, id string) (store.Link, error) {
	if err := s.check(ctx); err != nil {
		return store.Link{}, err
	}
	return getLink(ctx, s.q(ctx), id)
}

// ListLinks implements store.Store.
func (s *Store) ListLinks(ctx context.Context, f store.LinkFilter) ([]store.Link, error) {
	q, args := "SELECT "+linkCols+" FROM links WHERE "+deletedClause(f.Deleted), []any{}
	for _, c := range []struct{ col, v string }{
		{"source_node", f.SourceNodeID}, {"dest_node", f.DestNodeID}, {"target_node", f.TargetNodeID},
	} {
		if c.v != "" {
			q, args = q+" AND "+c.col+" = ?", append(args, c.v)
		}
	}
	if f.Group != "" {
		q, args = q+" AND (source_group = ? OR dest_group = ?)", append(args, f.Group, f.Group)
	}
	return queryAll(ctx, s, q+" ORDER BY id", args, scanLink)
}

func deletedClause(m store.DeletedMode) string {
	switch m {
	case store.IncludeDeleted:
		return "1=1"
	case store.OnlyDeleted:
		return "deleted = 1"
	}
	return "deleted = 0"
}

// UpdateLink implements store.Store.
func (s *Store) UpdateLink(ctx context.Context, id string, u store.LinkUpdate) (store.Link, error) {
	var out store.Link
	err := s.inTx(ctx, func(tx querier) error {
		l, err := getLink(ctx, tx, id)
		if err != nil {
			return err
		}
		old := l
		if l, err = u.Apply(l); err != nil {
			return err
		}
		l.LastUpdated = time.Unix(0, s.now().UnixNano())
		if l.SourceNodeID == old.SourceNodeID && l.DestNodeID == old.DestNodeID {
			// A status change: no indexed column named, no index rewritten.
			_, err = tx.ExecContext(ctx, `UPDATE links SET dest_endpoint=?, conn_config=?, status=?, status_msg=?,
				deleted=?, last_updated=?, version=? WHERE id=?`,
				l.DestEndpoint, l.ConnConfig, l.Status.String(), l.StatusMessage, boolInt(l.Deleted),
				l.LastUpdated.UnixNano(), l.Version, id)
			out = l
			return wrap(err)
		}
		_, err = tx.ExecContext(ctx, `UPDATE links SET source_node=?, dest_node=?, dest_endpoint=?, conn_config=?,
			status=?, status_msg=?, deleted=?, last_updated=?, version=? WHERE id=?`,
			l.SourceNodeID, l.DestNodeID, l.DestEndpoint, l.ConnConfig, l.Status.String(), l.StatusMessage,
			boolInt(l.Deleted), l.LastUpdated.UnixNano(), l.Version, id)
		out = l
		return wrap(err)
	})
	return out, err
}

// DeleteLink implements store.Store.
func (s *Store) DeleteLink(ctx context.Context, id string) error {
	return s.exec(ctx, store.NotFound("link", id), "DELETE FROM links WHERE id = ?", id)
}

// DeleteLinkIf implements store.Store. The check and the delete share one write
// transaction, so no update can slip in between.
func (s *Store) DeleteLinkIf(ctx context.Context, id string, version int64) error {
	return s.inTx(ctx, func(tx querier) error {
		l, err := getLink(ctx, tx, id)
		if err != nil {
			return err
		}
		if err := store.CheckVersion("link "+id, l.Version, &version); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "DELETE FROM links WHERE id = ?", id)
		return wrap(err)
	})
}
