package sqlite

import (
	"context"
	"errors"
	"fmt"
)

// ErrSchemaTooNew is returned by Open for a database migrated by a newer release.
var ErrSchemaTooNew = errors.New("database schema is newer than this binary")

// migrations are applied in order, each once; version N is migrations[N-1]. Append only:
// never edit a released step.
var migrations = []string{
	`CREATE TABLE nodes (
		id           TEXT PRIMARY KEY,
		grp          TEXT NOT NULL,
		conn_details TEXT NOT NULL,
		connected    INTEGER NOT NULL,
		session      INTEGER NOT NULL,
		last_updated INTEGER NOT NULL
	);
	CREATE INDEX nodes_grp ON nodes(grp);
	CREATE TABLE links (
		id           TEXT PRIMARY KEY,
		source_node  TEXT NOT NULL,
		source_group TEXT NOT NULL,
		dest_group   TEXT NOT NULL,
		dest_node    TEXT NOT NULL,
		target_node  TEXT NOT NULL,
		dest_endpoint TEXT NOT NULL,
		conn_config  TEXT NOT NULL,
		status       TEXT NOT NULL,
		status_msg   TEXT NOT NULL,
		deleted      INTEGER NOT NULL,
		last_updated INTEGER NOT NULL
	);
	CREATE INDEX links_source ON links(source_node);
	CREATE INDEX links_dest ON links(dest_node);
	CREATE INDEX links_target ON links(target_node);
	CREATE INDEX links_source_group ON links(source_group);
	CREATE INDEX links_dest_group ON links(dest_group);
	CREATE TABLE routes (
		id           INTEGER PRIMARY KEY AUTOINCREMENT,
		route_key    TEXT NOT NULL UNIQUE,
		source_node  TEXT NOT NULL,
		dest_node    TEXT NOT NULL,
		link_id      TEXT NOT NULL,
		c0           TEXT NOT NULL,
		c1           TEXT NOT NULL,
		c2           TEXT NOT NULL,
		has_cid      INTEGER NOT NULL,
		cid          INTEGER NOT NULL,
		status       TEXT NOT NULL,
		status_msg   TEXT NOT NULL,
		deleted      INTEGER NOT NULL,
		last_updated INTEGER NOT NULL
	);
	CREATE INDEX routes_source ON routes(source_node);
	CREATE INDEX routes_dest ON routes(dest_node);
	CREATE INDEX routes_link ON routes(link_id);
	CREATE TABLE segments (
		name TEXT PRIMARY KEY
	);
	CREATE TABLE segment_links (
		segment TEXT NOT NULL REFERENCES segments(name) ON DELETE CASCADE,
		group_a TEXT NOT NULL,
		group_b TEXT NOT NULL,
		PRIMARY KEY (segment, group_a, group_b)
	);`,
	// 2: record versions, the compare-and-set precondition of UpdateLink/UpdateRoute.
	`ALTER TABLE links ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
	ALTER TABLE routes ADD COLUMN version INTEGER NOT NULL DEFAULT 1;`,
	// 3: routes by name, for planning one name at a time.
	`CREATE INDEX IF NOT EXISTS routes_name ON routes(c0, c1, c2, has_cid, cid);`,
	// 4: registration secrets of groups managed through the API.
	`CREATE TABLE IF NOT EXISTS group_secrets (
		grp    TEXT PRIMARY KEY,
		secret TEXT NOT NULL
	);`,
}

// SchemaVersion is the version Open migrates to.
const SchemaVersion = 4

func (s *Store) migrate(ctx context.Context) error {
	return s.inTx(ctx, func(tx querier) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
			return fmt.Errorf("create schema_migrations: %w", err)
		}
		var current int
		if err := tx.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&current); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		if current > len(migrations) {
			return fmt.Errorf("%w: version %d, this binary knows %d", ErrSchemaTooNew, current, len(migrations))
		}
		for v := current + 1; v <= len(migrations); v++ {
			if _, err := tx.ExecContext(ctx, migrations[v-1]); err != nil {
				return fmt.Errorf("migration %d: %w", v, err)
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
				v, s.now().UnixNano()); err != nil {
				return fmt.Errorf("record migration %d: %w", v, err)
			}
		}
		return nil
	})
}
