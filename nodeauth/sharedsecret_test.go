package nodeauth

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	secretAlpha = "alpha-secret-0123456789abcdef-0123456789"
	secretBeta  = "beta-secret-0123456789abcdef-0123456789ab"
)

// clock is a settable time source shared by a verifier and its providers.
type clock struct{ t atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.t.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) now() time.Time          { return time.Unix(0, c.t.Load()) }
func (c *clock) advance(d time.Duration) { c.t.Add(int64(d)) }
func (c *clock) at(d time.Duration) func() time.Time {
	return func() time.Time { return c.now().Add(d) }
}

func newVerifier(t *testing.T, c *clock, opts SharedSecretOptions) *SharedSecret {
	t.Helper()
	opts.Now = c.now
	v, err := NewSharedSecret(map[string]string{"alpha": secretAlpha, "beta": secretBeta}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func issue(t *testing.T, secret string, now func() time.Time, group, node string) string {
	t.Helper()
	p, err := NewSharedSecretProvider(secret, SharedSecretOptions{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := p.Token(context.Background(), group, node)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestNewSharedSecretRejectsShortSecretNamingGroup(t *testing.T) {
	_, err := NewSharedSecret(map[string]string{"alpha": secretAlpha, "shorty": "only-31-bytes-long-secret-12345"}, SharedSecretOptions{})
	if err == nil || !strings.Contains(err.Error(), `"shorty"`) || !strings.Contains(err.Error(), "31 bytes") {
		t.Fatalf("want error naming group shorty and its length, got %v", err)
	}
	if v, err := NewSharedSecret(nil, SharedSecretOptions{}); err != nil {
		t.Fatalf("no secrets (all to come from the API): %v", err)
	} else if err := v.Verify(context.Background(), "sb1.x", "alpha", "n1"); !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("a verifier without secrets accepted or misjudged a node: %v", err)
	}
	if _, err := NewSharedSecret(map[string]string{"": secretAlpha}, SharedSecretOptions{}); err == nil {
		t.Fatal("empty group name must be rejected")
	}
	if _, err := NewSharedSecretProvider("short", SharedSecretOptions{}); err == nil {
		t.Fatal("provider with short secret must be rejected")
	}
	exact := strings.Repeat("x", MinSecretLen)
	if _, err := NewSharedSecret(map[string]string{"g": exact}, SharedSecretOptions{}); err != nil {
		t.Fatalf("a %d-byte secret is enough: %v", MinSecretLen, err)
	}
}

func TestSharedSecretVerify(t *testing.T) {
	c := newClock()
	cases := []struct {
		name        string
		token       func() string
		group, node string
		want        error
	}{
		{"valid", func() string { return issue(t, secretAlpha, c.now, "alpha", "n1") }, "alpha", "n1", nil},
		{"wrong secret", func() string { return issue(t, secretBeta, c.now, "alpha", "n1") }, "alpha", "n1", ErrBadSignature},
		{"wrong group (token of alpha node claims beta)", func() string { return issue(t, secretAlpha, c.now, "alpha", "n1") }, "beta", "n1", ErrWrongIdentity},
		{"forged identity for other group", func() string { return issue(t, secretAlpha, c.now, "beta", "n1") }, "beta", "n1", ErrBadSignature},
		{"identity mismatch (other node's token)", func() string { return issue(t, secretAlpha, c.now, "alpha", "n2") }, "alpha", "n1", ErrWrongIdentity},
		{"unknown group", func() string { return issue(t, secretAlpha, c.now, "gamma", "n1") }, "gamma", "n1", ErrUnknownGroup},
		{"expired", func() string { return issue(t, secretAlpha, c.at(-61*time.Second), "alpha", "n1") }, "alpha", "n1", ErrExpired},
		{"old but inside window", func() string { return issue(t, secretAlpha, c.at(-59*time.Second), "alpha", "n1") }, "alpha", "n1", nil},
		{"future beyond skew", func() string { return issue(t, secretAlpha, c.at(30*time.Second), "alpha", "n1") }, "alpha", "n1", ErrNotYetValid},
		{"future inside skew", func() string { return issue(t, secretAlpha, c.at(5*time.Second), "alpha", "n1") }, "alpha", "n1", nil},
		{"empty credentials", func() string { return "" }, "alpha", "n1", ErrEmptyCredentials},
		{"no group", func() string { return issue(t, secretAlpha, c.now, "alpha", "n1") }, "", "n1", ErrNoGroup},
		{"malformed", func() string { return "not-a-token" }, "alpha", "n1", ErrInvalidToken},
		{"tampered issued-at", func() string {
			f := strings.Split(issue(t, secretAlpha, c.now, "alpha", "n1"), ".")
			n, _ := strconv.ParseInt(f[2], 10, 64)
			f[2] = strconv.FormatInt(n+1, 10)
			return strings.Join(f, ".")
		}, "alpha", "n1", ErrBadSignature},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := newVerifier(t, c, SharedSecretOptions{})
			err := v.Verify(context.Background(), tc.token(), tc.group, tc.node)
			if tc.want == nil && err != nil {
				t.Fatalf("want accepted, got %v", err)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("want %v, got %v", tc.want, err)
			}
		})
	}
}

func TestSharedSecretReplay(t *testing.T) {
	c := newClock()
	v := newVerifier(t, c, SharedSecretOptions{})
	ctx := context.Background()
	tok := issue(t, secretAlpha, c.now, "alpha", "n1")
	if err := v.Verify(ctx, tok, "alpha", "n1"); err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(ctx, tok, "alpha", "n1"); !errors.Is(err, ErrReplayed) {
		t.Fatalf("second use: want ErrReplayed, got %v", err)
	}
	// A fresh token from the same node has a new nonce.
	if err := v.Verify(ctx, issue(t, secretAlpha, c.now, "alpha", "n1"), "alpha", "n1"); err != nil {
		t.Fatalf("fresh token: %v", err)
	}
	// Once the window has passed the captured token is expired, and its nonce is gone.
	c.advance(DefaultWindow + 2*time.Second)
	if err := v.Verify(ctx, tok, "alpha", "n1"); !errors.Is(err, ErrExpired) {
		t.Fatalf("after window: want ErrExpired, got %v", err)
	}
	if err := v.Verify(ctx, issue(t, secretAlpha, c.now, "alpha", "n1"), "alpha", "n1"); err != nil {
		t.Fatal(err)
	}
	if n := v.replay.len(); n != 1 {
		t.Fatalf("replay cache holds %d nonces, want 1 (expired ones pruned)", n)
	}
}

func TestSharedSecretRejectedTokenDoesNotBurnNonce(t *testing.T) {
	c := newClock()
	v := newVerifier(t, c, SharedSecretOptions{})
	tok := issue(t, secretAlpha, c.now, "alpha", "n1")
	if err := v.Verify(context.Background(), tok, "alpha", "other"); !errors.Is(err, ErrWrongIdentity) {
		t.Fatal(err)
	}
	if err := v.Verify(context.Background(), tok, "alpha", "n1"); err != nil {
		t.Fatalf("rightful owner rejected after a failed attempt: %v", err)
	}
}

func TestSharedSecretReplayCacheBounded(t *testing.T) {
	c := newClock()
	v := newVerifier(t, c, SharedSecretOptions{ReplayCacheSize: 2, Window: 10 * time.Second})
	ctx := context.Background()
	for i := range 2 {
		if err := v.Verify(ctx, issue(t, secretAlpha, c.now, "alpha", "n1"), "alpha", "n1"); err != nil {
			t.Fatalf("token %d: %v", i, err)
		}
	}
	if err := v.Verify(ctx, issue(t, secretAlpha, c.now, "alpha", "n1"), "alpha", "n1"); !errors.Is(err, ErrReplayCacheFull) {
		t.Fatalf("want ErrReplayCacheFull, got %v", err)
	}
	c.advance(12 * time.Second)
	if err := v.Verify(ctx, issue(t, secretAlpha, c.now, "alpha", "n1"), "alpha", "n1"); err != nil {
		t.Fatalf("after expiry the cache has room again: %v", err)
	}
}

func TestSharedSecretConcurrentReplayAcceptsOnce(t *testing.T) {
	c := newClock()
	v := newVerifier(t, c, SharedSecretOptions{})
	tok := issue(t, secretAlpha, c.now, "alpha", "n1")
	var ok, replayed atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			switch err := v.Verify(context.Background(), tok, "alpha", "n1"); {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, ErrReplayed):
				replayed.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 1 || replayed.Load() != 7 {
		t.Fatalf("accepted %d, replayed %d; want 1 and 7", ok.Load(), replayed.Load())
	}
}

func TestProviderNeedsGroup(t *testing.T) {
	p, _ := NewSharedSecretProvider(secretAlpha, SharedSecretOptions{})
	if _, err := p.Token(context.Background(), "", "n1"); !errors.Is(err, ErrProvider) || !errors.Is(err, ErrNoGroup) {
		t.Fatalf("want ErrProvider+ErrNoGroup, got %v", err)
	}
	if _, err := p.Token(context.Background(), "g", strings.Repeat("n", MaxIdentityLen)); !errors.Is(err, ErrProvider) {
		t.Fatalf("over-long identity: want ErrProvider, got %v", err)
	}
}

func TestProviderNonceFailure(t *testing.T) {
	p, _ := NewSharedSecretProvider(secretAlpha, SharedSecretOptions{Rand: strings.NewReader("short")})
	if _, err := p.Token(context.Background(), "alpha", "n1"); !errors.Is(err, ErrProvider) {
		t.Fatalf("want ErrProvider when randomness fails, got %v", err)
	}
}

func TestNoop(t *testing.T) {
	var n Noop
	if err := n.Verify(context.Background(), "", "", "x"); err != nil {
		t.Fatal(err)
	}
	if tok, err := n.Token(context.Background(), "g", "x"); tok != "" || err != nil {
		t.Fatalf("noop token = %q, %v", tok, err)
	}
}

// TestSharedSecretRuntimeChanges: a secret set at runtime admits its group, a rotated
// one refuses tokens made with the old secret, a removed one refuses the group, and a
// short secret is refused naming the group.
func TestSharedSecretRuntimeChanges(t *testing.T) {
	c := newClock()
	v := newVerifier(t, c, SharedSecretOptions{})
	ctx := context.Background()
	gamma1 := "gamma-secret-1-0123456789abcdef-01234567"
	gamma2 := "gamma-secret-2-0123456789abcdef-01234567"
	if err := v.Verify(ctx, issue(t, gamma1, c.now, "gamma", "n1"), "gamma", "n1"); !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("before SetSecret: %v, want ErrUnknownGroup", err)
	}
	if err := v.SetSecret("gamma", gamma1); err != nil {
		t.Fatal(err)
	}
	if !v.HasSecret("gamma") {
		t.Fatal("HasSecret(gamma) false after SetSecret")
	}
	if err := v.Verify(ctx, issue(t, gamma1, c.now, "gamma", "n1"), "gamma", "n1"); err != nil {
		t.Fatalf("after SetSecret: %v", err)
	}
	if err := v.SetSecret("gamma", gamma2); err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(ctx, issue(t, gamma1, c.now, "gamma", "n1"), "gamma", "n1"); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("old secret after rotation: %v, want ErrBadSignature", err)
	}
	if err := v.Verify(ctx, issue(t, gamma2, c.now, "gamma", "n1"), "gamma", "n1"); err != nil {
		t.Fatalf("new secret after rotation: %v", err)
	}
	if !v.RemoveSecret("gamma") || v.RemoveSecret("gamma") {
		t.Fatal("RemoveSecret should report true once, then false")
	}
	if err := v.Verify(ctx, issue(t, gamma2, c.now, "gamma", "n1"), "gamma", "n1"); !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("after RemoveSecret: %v, want ErrUnknownGroup", err)
	}
	if err := v.SetSecret("gamma", "short"); err == nil || !strings.Contains(err.Error(), `"gamma"`) {
		t.Fatalf("short secret: %v, want an error naming the group", err)
	}
	if err := v.Verify(ctx, issue(t, secretAlpha, c.now, "alpha", "n1"), "alpha", "n1"); err != nil {
		t.Fatalf("other groups are untouched: %v", err)
	}
}
