package sqlite

import (
	"context"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// SetGroupSecret implements store.Store.
func (s *Store) SetGroupSecret(ctx context.Context, group, secret string) error {
	return s.exec(ctx, nil, "INSERT INTO group_secrets (grp, secret) VALUES (?, ?) ON CONFLICT (grp) DO UPDATE SET secret = excluded.secret",
		group, secret)
}

// DeleteGroupSecret implements store.Store.
func (s *Store) DeleteGroupSecret(ctx context.Context, group string) error {
	return s.exec(ctx, store.NotFound("group secret", group), "DELETE FROM group_secrets WHERE grp = ?", group)
}

// ListGroupSecrets implements store.Store.
func (s *Store) ListGroupSecrets(ctx context.Context) (map[string]string, error) {
	type row struct{ group, secret string }
	rows, err := queryAll(ctx, s, "SELECT grp, secret FROM group_secrets", nil, func(sc scanner) (row, error) {
		var r row
		err := sc.Scan(&r.group, &r.secret)
		return r, err
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[r.group] = r.secret
	}
	return out, nil
}
