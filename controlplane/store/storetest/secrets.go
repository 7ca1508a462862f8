package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// testGroupSecrets: set replaces, delete of an absent secret is ErrNotFound, a
// rolled-back transaction leaves the secrets as they were, ClearRuntime keeps them
// (an API mode restart must not lock nodes out) and ClearAll drops them.
func testGroupSecrets(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	must(t, s.SetGroupSecret(ctx, "a", "secret-a-1"))
	must(t, s.SetGroupSecret(ctx, "b", "secret-b-1"))
	must(t, s.SetGroupSecret(ctx, "a", "secret-a-2"))
	got, err := s.ListGroupSecrets(ctx)
	must(t, err)
	equal(t, "secrets", got, map[string]string{"a": "secret-a-2", "b": "secret-b-1"})

	wantErr(t, s.DeleteGroupSecret(ctx, "nope"), store.ErrNotFound)
	must(t, s.DeleteGroupSecret(ctx, "b"))

	boom := errors.New("boom")
	err = s.Atomically(ctx, func(ctx context.Context) error {
		must(t, s.SetGroupSecret(ctx, "a", "secret-a-3"))
		must(t, s.SetGroupSecret(ctx, "c", "secret-c-1"))
		must(t, s.DeleteGroupSecret(ctx, "a"))
		return boom
	})
	wantErr(t, err, boom)
	got, err = s.ListGroupSecrets(ctx)
	must(t, err)
	equal(t, "secrets after rollback", got, map[string]string{"a": "secret-a-2"})

	must(t, s.ClearRuntime(ctx))
	got, err = s.ListGroupSecrets(ctx)
	must(t, err)
	equal(t, "secrets after ClearRuntime", got, map[string]string{"a": "secret-a-2"})
	must(t, s.ClearAll(ctx))
	got, err = s.ListGroupSecrets(ctx)
	must(t, err)
	equal(t, "secrets after ClearAll", got, map[string]string{})
}
