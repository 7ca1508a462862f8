package groupsecrets_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/groupsecrets"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/controlplane/store/memory"
	"github.com/switchboard-mesh/switchboard/controlplane/store/sqlite"
	"github.com/switchboard-mesh/switchboard/nodeauth"
)

const (
	fileSecret = "file-secret-0123456789abcdef-0123456789"
	secret1    = "api-secret-1-0123456789abcdef-012345678"
	secret2    = "api-secret-2-0123456789abcdef-012345678"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// open starts a manager on st as a control plane would: a verifier holding the
// file's secret for group "cloud".
func open(t *testing.T, st store.Store, mode config.Mode, disconnect func(string) int) (*groupsecrets.Manager, *nodeauth.SharedSecret) {
	t.Helper()
	v, err := nodeauth.NewSharedSecret(map[string]string{"cloud": fileSecret}, nodeauth.SharedSecretOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := groupsecrets.New(ctxT(t), groupsecrets.Options{Store: st, Verifier: v, FileGroups: []string{"cloud"}, Mode: mode, Disconnect: disconnect})
	if err != nil {
		t.Fatal(err)
	}
	return m, v
}

func verify(t *testing.T, v *nodeauth.SharedSecret, secret, group string) error {
	t.Helper()
	p, err := nodeauth.NewSharedSecretProvider(secret, nodeauth.SharedSecretOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := p.Token(context.Background(), group, "n1")
	if err != nil {
		t.Fatal(err)
	}
	return v.Verify(context.Background(), tok, group, "n1")
}

// TestLifecycle: add, rotate and remove change what the verifier accepts and what
// the store keeps; remove disconnects the group; the file's group is refused; a
// restart on the same SQLite file loads the secrets back.
func TestLifecycle(t *testing.T) {
	ctx := ctxT(t)
	path := filepath.Join(t.TempDir(), "cp.db")
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	var disconnected []string
	m, v := open(t, st, config.APIMode, func(g string) int { disconnected = append(disconnected, g); return 2 })

	if err := verify(t, v, secret1, "edge"); !errors.Is(err, nodeauth.ErrUnknownGroup) {
		t.Fatalf("before add: %v", err)
	}
	if err := m.Add(ctx, "edge", secret1); err != nil {
		t.Fatal(err)
	}
	if err := verify(t, v, secret1, "edge"); err != nil {
		t.Fatalf("after add: %v", err)
	}
	if err := m.Add(ctx, "edge", secret2); !errors.Is(err, store.ErrExists) {
		t.Fatalf("second add: %v, want ErrExists", err)
	}
	if err := m.Rotate(ctx, "other", secret2); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("rotate without a secret: %v, want ErrNotFound", err)
	}
	if err := m.Rotate(ctx, "edge", secret2); err != nil {
		t.Fatal(err)
	}
	if err := verify(t, v, secret1, "edge"); !errors.Is(err, nodeauth.ErrBadSignature) {
		t.Fatalf("old secret after rotate: %v", err)
	}
	for name, err := range map[string]error{
		"add short":       m.Add(ctx, "short", "tiny"),
		"add bad group":   m.Add(ctx, "bad/group", secret1),
		"rotate file":     m.Rotate(ctx, "cloud", secret1),
		"remove file":     func() error { _, err := m.Remove(ctx, "cloud"); return err }(),
		"remove no group": func() error { _, err := m.Remove(ctx, "nope"); return err }(),
	} {
		want := map[string]error{"add short": groupsecrets.ErrInvalid, "add bad group": groupsecrets.ErrInvalid,
			"rotate file": groupsecrets.ErrFromFile, "remove file": groupsecrets.ErrFromFile, "remove no group": store.ErrNotFound}[name]
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
	}
	if got := m.Source("cloud") + "," + m.Source("edge") + "," + m.Source("nope"); got != "config,api," {
		t.Fatalf("sources cloud,edge,nope = %q", got)
	}

	// A restart loads the stored secret back.
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m, v = open(t, st, config.APIMode, func(g string) int { disconnected = append(disconnected, g); return 2 })
	if err := verify(t, v, secret2, "edge"); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if groups, err := m.Groups(ctx); err != nil || len(groups) != 2 || groups[0] != "cloud" || groups[1] != "edge" {
		t.Fatalf("groups = %v, %v", groups, err)
	}

	n, err := m.Remove(ctx, "edge")
	if err != nil || n != 2 || len(disconnected) != 1 || disconnected[0] != "edge" {
		t.Fatalf("remove: %d, %v, disconnected %v", n, err, disconnected)
	}
	if err := verify(t, v, secret2, "edge"); !errors.Is(err, nodeauth.ErrUnknownGroup) {
		t.Fatalf("after remove: %v", err)
	}
	if stored, err := st.ListGroupSecrets(ctx); err != nil || len(stored) != 0 {
		t.Fatalf("stored after remove: %v, %v", stored, err)
	}
}

// TestUnavailable: config mode and a non-shared-secret authenticator refuse changes.
func TestUnavailable(t *testing.T) {
	ctx := ctxT(t)
	m, _ := open(t, memory.New(), config.ConfigMode, nil)
	if err := m.Add(ctx, "edge", secret1); !errors.Is(err, groupsecrets.ErrUnavailable) {
		t.Fatalf("config mode: %v", err)
	}
	m, err := groupsecrets.New(ctx, groupsecrets.Options{Store: memory.New(), Mode: config.APIMode})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Remove(ctx, "edge"); !errors.Is(err, groupsecrets.ErrUnavailable) {
		t.Fatalf("no shared-secret verifier: %v", err)
	}
	if m.Source("edge") != groupsecrets.SourceNone {
		t.Fatal("a group has a secret source without a verifier")
	}
}
