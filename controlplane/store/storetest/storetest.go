package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// Factory returns a new, empty store. The suite closes it.
type Factory func(t *testing.T) store.Store

// Run runs every check against stores made by newStore.
func Run(t *testing.T, newStore Factory) {
	t.Helper()
	for _, c := range []struct {
		name string
		fn   func(*testing.T, store.Store)
	}{
		{"Nodes", testNodes},
		{"NodeUpsert", testNodeUpsert},
		{"Links", testLinks},
		{"LinkFilters", testLinkFilters},
		{"LinkUpdateFields", testLinkUpdateFields},
		{"LinkTransitions", testLinkTransitions},
		{"LinkDeletedIsFinal", testLinkDeletedIsFinal},
		{"Routes", testRoutes},
		{"RouteFilters", testRouteFilters},
		{"RouteRekey", testRouteRekey},
		{"RouteTransitions", testRouteTransitions},
		{"RouteDeletedIsFinal", testRouteDeletedIsFinal},
		{"LinkVersions", testLinkVersions},
		{"LinkPrecondition", testLinkPrecondition},
		{"RouteVersions", testRouteVersions},
		{"RoutePrecondition", testRoutePrecondition},
		{"Segments", testSegments},
		{"GroupSecrets", testGroupSecrets},
		{"Clear", testClear},
		{"Concurrent", testConcurrent},
		{"Closed", testClosed},
		{"TxRollback", testTxRollback},
		{"TxCommit", testTxCommit},
		{"TxNested", testTxNested},
		{"TxVersions", testTxVersions},
		{"TxLockAtFirstWrite", testTxLockAtFirstWrite},
		{"TxEnded", testTxEnded},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t)
			t.Cleanup(func() { _ = s.Close() })
			c.fn(t, s)
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("got error %v, want one matching %v", err, target)
	}
}

func equal[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got  %+v\n want %+v", what, got, want)
	}
}

// untimed zeroes LastUpdated and Version so records compare by content; the suite
// checks the timestamps and versions on their own.
func untimedNodes(ns []store.Node) []store.Node {
	for i := range ns {
		ns[i].LastUpdated = time.Time{}
	}
	return ns
}

func untimedLinks(ls []store.Link) []store.Link {
	for i := range ls {
		ls[i].LastUpdated, ls[i].Version = time.Time{}, 0
	}
	return ls
}

func untimedRoutes(rs []store.Route) []store.Route {
	for i := range rs {
		rs[i].LastUpdated, rs[i].Version = time.Time{}, 0
	}
	return rs
}
