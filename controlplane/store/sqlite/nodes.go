package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

const nodeCols = "id, grp, conn_details, connected, session, last_updated"

type scanner interface{ Scan(dest ...any) error }

func scanNode(sc scanner) (store.Node, error) {
	var (
		n         store.Node
		details   string
		connected int
		session   int64
		updated   int64
	)
	if err := sc.Scan(&n.ID, &n.Group, &details, &connected, &session, &updated); err != nil {
		return n, err
	}
	if err := json.Unmarshal([]byte(details), &n.ConnDetails); err != nil {
		return n, fmt.Errorf("node %s: connection details: %w", n.ID, err)
	}
	if len(n.ConnDetails) == 0 {
		n.ConnDetails = nil
	}
	n.Connected, n.Session, n.LastUpdated = connected != 0, uint64(session), time.Unix(0, updated)
	return n, nil
}

// SaveNode implements store.Store.
func (s *Store) SaveNode(ctx context.Context, n store.Node) error {
	details, err := json.Marshal(n.ConnDetails)
	if err != nil {
		return fmt.Errorf("node %s: connection details: %w", n.ID, err)
	}
	if n.ConnDetails == nil {
		details = []byte("[]")
	}
	return s.exec(ctx, nil, `INSERT INTO nodes (`+nodeCols+`) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT(id) DO UPDATE SET grp=excluded.grp, conn_details=excluded.conn_details,
		connected=excluded.connected, session=excluded.session, last_updated=excluded.last_updated`,
		n.ID, n.Group, string(details), boolInt(n.Connected), int64(n.Session), s.now().UnixNano())
}

// GetNode implements store.Store.
func (s *Store) GetNode(ctx context.Context, id string) (store.Node, error) {
	if err := s.check(ctx); err != nil {
		return store.Node{}, err
	}
	n, err := scanNode(s.q(ctx).QueryRowContext(ctx, "SELECT "+nodeCols+" FROM nodes WHERE id = ?", id))
	if isNoRows(err) {
		return store.Node{}, store.NotFound("node", id)
	}
	return n, wrap(err)
}

// ListNodes implements store.Store.
func (s *Store) ListNodes(ctx context.Context, f store.NodeFilter) ([]store.Node, error) {
	q, args := "SELECT "+nodeCols+" FROM nodes WHERE 1=1", []any{}
	if f.Group != "" {
		q, args = q+" AND grp = ?", append(args, f.Group)
	}
	if f.ConnectedOnly {
		q += " AND connected = 1"
	}
	return queryAll(ctx, s, q+" ORDER BY id", args, scanNode)
}

// ListGroups implements store.Store.
func (s *Store) ListGroups(ctx context.Context) ([]string, error) {
	return queryAll(ctx, s, "SELECT DISTINCT grp FROM nodes WHERE grp != '' ORDER BY grp", nil,
		func(sc scanner) (string, error) {
			var g string
			err := sc.Scan(&g)
			return g, err
		})
}

// SetNodeConnected implements store.Store.
func (s *Store) SetNodeConnected(ctx context.Context, id string, connected bool) error {
	return s.exec(ctx, store.NotFound("node", id), "UPDATE nodes SET connected = ?, last_updated = ? WHERE id = ?",
		boolInt(connected), s.now().UnixNano(), id)
}

// DeleteNode implements store.Store.
func (s *Store) DeleteNode(ctx context.Context, id string) error {
	return s.exec(ctx, store.NotFound("node", id), "DELETE FROM nodes WHERE id = ?", id)
}

// queryAll runs a query and scans every row with scan.
func queryAll[T any](ctx context.Context, s *Store, q string, args []any, scan func(scanner) (T, error)) ([]T, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	rows, err := s.q(ctx).QueryContext(ctx, q, args...)
	if err != nil {
		return nil, wrap(err)
	}
	defer func() { _ = rows.Close() }() // rows.Err reports what matters
	out := make([]T, 0)
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, wrap(err)
		}
		out = append(out, v)
	}
	return out, wrap(rows.Err())
}

func wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("sqlite store: %w", err)
}
