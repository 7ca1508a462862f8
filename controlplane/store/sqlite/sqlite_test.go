package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/controlplane/store/sqlite"
	"github.com/switchboard-mesh/switchboard/controlplane/store/storetest"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func open(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(ctxT(t), path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, filepath.Join(t.TempDir(), "cp.db"))
	})
}

func TestWALAndSchema(t *testing.T) {
	ctx := ctxT(t)
	s := open(t, filepath.Join(t.TempDir(), "cp.db"))
	defer s.Close()
	mode, err := s.JournalMode(ctx)
	if err != nil || mode != "wal" {
		t.Fatalf("journal mode = %q, %v; want wal", mode, err)
	}
	v, err := s.SchemaVersion(ctx)
	if err != nil || v != sqlite.SchemaVersion {
		t.Fatalf("schema version = %d, %v; want %d", v, err, sqlite.SchemaVersion)
	}
}

// TestReopen: state survives closing and reopening the file, and migrating again is a
// no-op.
func TestReopen(t *testing.T) {
	ctx := ctxT(t)
	path := filepath.Join(t.TempDir(), "cp.db")
	s := open(t, path)
	if err := s.CreateSegment(ctx, "seg"); err != nil {
		t.Fatal(err)
	}
	if err := s.AddSegmentLink(ctx, store.NewSegmentLink("seg", "b", "a")); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveNode(ctx, store.Node{ID: "a/1", Group: "a", Connected: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path)
	defer s.Close()
	segs, err := s.ListSegments(ctx)
	if err != nil || len(segs) != 1 || len(segs[0].Links) != 1 || segs[0].Links[0].GroupA != "a" {
		t.Fatalf("segments after reopen = %+v, %v", segs, err)
	}
	if _, err := s.GetNode(ctx, "a/1"); err != nil {
		t.Fatalf("node after reopen: %v", err)
	}
	if v, err := s.SchemaVersion(ctx); err != nil || v != sqlite.SchemaVersion {
		t.Fatalf("schema version after reopen = %d, %v", v, err)
	}
}

// TestSchemaTooNew: a file migrated by a newer release is refused, not written to.
func TestSchemaTooNew(t *testing.T) {
	ctx := ctxT(t)
	path := filepath.Join(t.TempDir(), "cp.db")
	s := open(t, path)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO schema_migrations (version, applied_at) VALUES (?, 0)",
		sqlite.SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	if _, err := sqlite.Open(ctx, path); !errors.Is(err, sqlite.ErrSchemaTooNew) {
		t.Fatalf("Open = %v, want ErrSchemaTooNew", err)
	}
}

func TestBadPath(t *testing.T) {
	for _, p := range []string{"", ":memory:", "/tmp/x.db?mode=ro"} {
		if _, err := sqlite.Open(ctxT(t), p); err == nil {
			t.Errorf("Open(%q) succeeded", p)
		}
	}
}

// TestMigrateVersions: a database of schema 1 (before record versions) is migrated on
// Open; its links and routes start at version 1 and count on from there.
func TestMigrateVersions(t *testing.T) {
	ctx := ctxT(t)
	path := filepath.Join(t.TempDir(), "cp.db")
	s := open(t, path)
	l := store.Link{ID: "l1", SourceNodeID: "a/1", DestEndpoint: "b:443", Status: store.LinkPending}
	if err := s.CreateLink(ctx, l); err != nil {
		t.Fatal(err)
	}
	r, err := s.CreateRoute(ctx, store.Route{SourceNodeID: "a/1", LinkID: "l1", Name: store.NewName("o", "n", "s"),
		Status: store.RoutePending})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"ALTER TABLE links DROP COLUMN version", "ALTER TABLE routes DROP COLUMN version",
		"DELETE FROM schema_migrations WHERE version > 1"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_ = db.Close()

	s = open(t, path)
	defer s.Close()
	if v, err := s.SchemaVersion(ctx); err != nil || v != sqlite.SchemaVersion {
		t.Fatalf("schema version after migration = %d, %v", v, err)
	}
	got, err := s.GetLink(ctx, "l1")
	if err != nil || got.Version != 1 {
		t.Fatalf("migrated link = %+v, %v; want version 1", got, err)
	}
	if _, err := store.SetLinkStatusIf(ctx, s, "l1", 1, store.LinkConnecting, ""); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetLink(ctx, "l1"); got.Version != 2 {
		t.Fatalf("updated migrated link at version %d", got.Version)
	}
	gr, err := s.GetRoute(ctx, r.ID)
	if err != nil || gr.Version != 1 {
		t.Fatalf("migrated route = %+v, %v; want version 1", gr, err)
	}
	if err := s.DeleteRouteIf(ctx, r.ID, 1); err != nil {
		t.Fatal(err)
	}
}
