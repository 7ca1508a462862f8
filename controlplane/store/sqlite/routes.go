package sqlite

import (
	"context"
	"database/sql"
	"strconv"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

const routeCols = `id, source_node, dest_node, link_id, c0, c1, c2, has_cid, cid, status, status_msg,
	deleted, last_updated, version`

func scanRoute(sc scanner) (store.Route, error) {
	var (
		r       store.Route
		hasID   int
		cid     int64
		status  string
		deleted int
		updated int64
	)
	err := sc.Scan(&r.ID, &r.SourceNodeID, &r.DestNodeID, &r.LinkID, &r.Name.Components[0],
		&r.Name.Components[1], &r.Name.Components[2], &hasID, &cid, &status, &r.StatusMessage, &deleted, &updated,
		&r.Version)
	if err != nil {
		return r, err
	}
	// The id is stored as the int64 with the same bits: SQLite integers are signed.
	r.Name.HasID, r.Name.ID = hasID != 0, uint64(cid)
	r.Status, err = store.ParseRouteStatus(status)
	r.Deleted, r.LastUpdated = deleted != 0, time.Unix(0, updated)
	return r, err
}

// CreateRoute implements store.Store.
func (s *Store) CreateRoute(ctx context.Context, r store.Route) (store.Route, error) {
	if err := store.CheckNewRoute(r); err != nil {
		return store.Route{}, err
	}
	if err := s.check(ctx); err != nil {
		return store.Route{}, err
	}
	r.LastUpdated, r.Version = time.Unix(0, s.now().UnixNano()), 1
	w, err := s.w(ctx)
	if err != nil {
		return store.Route{}, err
	}
	res, err := w.ExecContext(ctx, `INSERT INTO routes (route_key, source_node, dest_node, link_id, c0, c1, c2,
		has_cid, cid, status, status_msg, deleted, last_updated, version) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		r.Key(), r.SourceNodeID, r.DestNodeID, r.LinkID, r.Name.Components[0], r.Name.Components[1],
		r.Name.Components[2], boolInt(r.Name.HasID), int64(r.Name.ID), r.Status.String(), r.StatusMessage,
		boolInt(r.Deleted), r.LastUpdated.UnixNano(), r.Version)
	if isUniqueViolation(err) {
		return store.Route{}, store.Exists("route", r.Name.String()+" on "+r.SourceNodeID)
	}
	if err != nil {
		return store.Route{}, wrap(err)
	}
	r.ID, err = res.LastInsertId()
	return r, wrap(err)
}

func getRoute(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, id int64) (store.Route, error) {
	r, err := scanRoute(q.QueryRowContext(ctx, "SELECT "+routeCols+" FROM routes WHERE id = ?", id))
	if isNoRows(err) {
		return store.Route{}, store.NotFound("route", strconv.FormatInt(id, 10))
	}
	return r, wrap(err)
}

// GetRoute implements store.Store.
func (s *Store) GetRoute(ctx context.Context, id int64) (store.Route, error) {
	if err := s.check(ctx); err != nil {
		return store.Route{}, err
	}
	return getRoute(ctx, s.q(ctx), id)
}

// ListRoutes implements store.Store.
func (s *Store) ListRoutes(ctx context.Context, f store.RouteFilter) ([]store.Route, error) {
	q, args := "SELECT "+routeCols+" FROM routes WHERE "+deletedClause(f.Deleted), []any{}
	for _, c := range []struct{ col, v string }{
		{"source_node", f.SourceNodeID}, {"dest_node", f.DestNodeID}, {"link_id", f.LinkID},
	} {
		if c.v != "" {
			q, args = q+" AND "+c.col+" = ?", append(args, c.v)
		}
	}
	if f.ExpansionsOnly {
		q, args = q+" AND source_node != ?", append(args, store.AllNodes)
	}
	if n := f.Name; n != nil {
		q += " AND c0 = ? AND c1 = ? AND c2 = ? AND has_cid = ? AND cid = ?"
		args = append(args, n.Components[0], n.Components[1], n.Components[2], boolInt(n.HasID), int64(n.ID))
	}
	return queryAll(ctx, s, q+" ORDER BY id", args, scanRoute)
}

// UpdateRoute implements store.Store.
func (s *Store) UpdateRoute(ctx context.Context, id int64, u store.RouteUpdate) (store.Route, error) {
	var out store.Route
	err := s.inTx(ctx, func(tx querier) error {
		r, err := getRoute(ctx, tx, id)
		if err != nil {
			return err
		}
		old := r
		if r, err = u.Apply(r); err != nil {
			return err
		}
		r.LastUpdated = time.Unix(0, s.now().UnixNano())
		if r.SourceNodeID == old.SourceNodeID && r.DestNodeID == old.DestNodeID {
			// A status change, the reconcilers' everyday write: naming no indexed
			// column leaves SQLite no index to rewrite.
			_, err = tx.ExecContext(ctx, `UPDATE routes SET status=?, status_msg=?, deleted=?, last_updated=?,
				version=? WHERE id=?`,
				r.Status.String(), r.StatusMessage, boolInt(r.Deleted), r.LastUpdated.UnixNano(), r.Version, id)
			out = r
			return wrap(err)
		}
		_, err = tx.ExecContext(ctx, `UPDATE routes SET route_key=?, source_node=?, dest_node=?, status=?,
			status_msg=?, deleted=?, last_updated=?, version=? WHERE id=?`,
			r.Key(), r.SourceNodeID, r.DestNodeID, r.Status.String(), r.StatusMessage, boolInt(r.Deleted),
			r.LastUpdated.UnixNano(), r.Version, id)
		if isUniqueViolation(err) {
			return store.Exists("route", r.Name.String()+" on "+r.SourceNodeID)
		}
		out = r
		return wrap(err)
	})
	return out, err
}

// DeleteRoute implements store.Store.
func (s *Store) DeleteRoute(ctx context.Context, id int64) error {
	return s.exec(ctx, store.NotFound("route", strconv.FormatInt(id, 10)), "DELETE FROM routes WHERE id = ?", id)
}

// DeleteRouteIf implements store.Store, checking and deleting in one transaction.
func (s *Store) DeleteRouteIf(ctx context.Context, id int64, version int64) error {
	return s.inTx(ctx, func(tx querier) error {
		r, err := getRoute(ctx, tx, id)
		if err != nil {
			return err
		}
		if err := store.CheckVersion("route "+strconv.FormatInt(id, 10), r.Version, &version); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "DELETE FROM routes WHERE id = ?", id)
		return wrap(err)
	})
}
