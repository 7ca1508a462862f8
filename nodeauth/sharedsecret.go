package nodeauth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"
)

// MinSecretLen is the shortest accepted shared secret, in bytes.
const MinSecretLen = 32

// Defaults for SharedSecretOptions.
const (
	DefaultWindow          = 60 * time.Second
	DefaultMaxSkew         = 10 * time.Second
	DefaultReplayCacheSize = 100_000
)

// SharedSecretOptions tune a shared-secret verifier or provider. Zero values take the
// defaults above.
type SharedSecretOptions struct {
	// Window is how old a token may be (issued-at up to Window in the past).
	Window time.Duration
	// MaxSkew is how far in the future a token may be dated, to tolerate node clocks
	// running ahead of the control plane's.
	MaxSkew time.Duration
	// ReplayCacheSize bounds the nonces remembered at once.
	ReplayCacheSize int
	// Now is the clock; time.Now when nil. Tests move it.
	Now func() time.Time
	// Rand is the nonce source; crypto/rand when nil.
	Rand io.Reader
}

func (o SharedSecretOptions) withDefaults() SharedSecretOptions {
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.MaxSkew <= 0 {
		o.MaxSkew = DefaultMaxSkew
	}
	if o.ReplayCacheSize <= 0 {
		o.ReplayCacheSize = DefaultReplayCacheSize
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.Reader
	}
	return o
}

// SharedSecret verifies HMAC tokens with one secret per group (control-plane side).
// Secrets can be set and removed while it verifies (runtime secret management).
type SharedSecret struct {
	mu      sync.RWMutex
	secrets map[string][]byte
	opts    SharedSecretOptions
	replay  *replayCache
}

// NewSharedSecret builds a verifier. Every group needs a secret of at least
// MinSecretLen bytes; the error names the first group (in sorted order) that has not.
// With no secrets at all every node is refused until SetSecret adds one: in API mode
// secrets can all come from the management API.
func NewSharedSecret(secrets map[string]string, opts SharedSecretOptions) (*SharedSecret, error) {
	groups := make([]string, 0, len(secrets))
	for g := range secrets {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	s := &SharedSecret{secrets: make(map[string][]byte, len(secrets)), opts: opts.withDefaults()}
	for _, g := range groups {
		if g == "" {
			return nil, fmt.Errorf("shared_secret auth: empty group name")
		}
		if err := checkSecret(secrets[g]); err != nil {
			return nil, fmt.Errorf("shared_secret auth: group %q: %w", g, err)
		}
		s.secrets[g] = []byte(secrets[g])
	}
	s.replay = newReplayCache(s.opts.ReplayCacheSize)
	return s, nil
}

// SetSecret gives group a new secret, replacing the one it had: tokens made with the
// old secret are refused from now on.
func (s *SharedSecret) SetSecret(group, secret string) error {
	if group == "" {
		return fmt.Errorf("shared_secret auth: empty group name")
	}
	if err := checkSecret(secret); err != nil {
		return fmt.Errorf("shared_secret auth: group %q: %w", group, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secrets[group] = []byte(secret)
	return nil
}

// RemoveSecret forgets group's secret, so none of its nodes can register; it
// reports whether the group had one.
func (s *SharedSecret) RemoveSecret(group string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.secrets[group]
	delete(s.secrets, group)
	return ok
}

// HasSecret reports whether group has a secret.
func (s *SharedSecret) HasSecret(group string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.secrets[group]
	return ok
}

func checkSecret(secret string) error {
	if len(secret) < MinSecretLen {
		return fmt.Errorf("secret is %d bytes, need at least %d", len(secret), MinSecretLen)
	}
	return nil
}

// Verify checks, in order: claim present, token well-formed, identity is
// "{group}/{nodeID}", MAC under the group's secret (hmac.Equal), issued-at inside
// [now-Window, now+MaxSkew], nonce not accepted before. The nonce is remembered only
// after everything else passed.
func (s *SharedSecret) Verify(ctx context.Context, credentials, group, nodeID string) error {
	_, err := s.VerifyIdentity(ctx, credentials, group, nodeID)
	return err
}

// VerifyIdentity is Verify that returns the identity proven: "shared_secret:" and
// the token's "{group}/{nodeID}". A group's secret is the group's, not a node's, so
// every holder of it proves the same identity for a node.
func (s *SharedSecret) VerifyIdentity(_ context.Context, credentials, group, nodeID string) (string, error) {
	if err := s.verify(credentials, group, nodeID); err != nil {
		return "", err
	}
	return TypeSharedSecret + ":" + Identity(group, nodeID), nil
}

func (s *SharedSecret) verify(credentials, group, nodeID string) error {
	if err := checkClaim(credentials, group); err != nil {
		return err
	}
	s.mu.RLock()
	secret, ok := s.secrets[group]
	s.mu.RUnlock()
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownGroup, group)
	}
	tok, err := parseToken(credentials)
	if err != nil {
		return err
	}
	if want := Identity(group, nodeID); tok.identity != want {
		return fmt.Errorf("%w: token is for %q, node is %q", ErrWrongIdentity, truncate(tok.identity), want)
	}
	if !hmac.Equal(tok.mac, computeMAC(secret, tok.signed)) {
		return fmt.Errorf("%w for group %q", ErrBadSignature, group)
	}
	now := s.opts.Now()
	if err := s.checkTime(tok.issuedAt, now); err != nil {
		return err
	}
	// A nonce stays live until the token would be expired anyway.
	key := group + "\x00" + string(tok.nonce[:])
	if err := s.replay.add(tok.identity, key, tok.issuedAt.Add(s.opts.Window+time.Second), now); err != nil {
		return fmt.Errorf("%w (identity %q)", err, tok.identity)
	}
	return nil
}

func (s *SharedSecret) checkTime(issuedAt, now time.Time) error {
	if age := now.Sub(issuedAt); age > s.opts.Window {
		return fmt.Errorf("%w: issued %s ago, window is %s", ErrExpired, age.Truncate(time.Second), s.opts.Window)
	}
	if ahead := issuedAt.Sub(now); ahead > s.opts.MaxSkew {
		return fmt.Errorf("%w: dated %s ahead, allowed skew is %s", ErrNotYetValid, ahead.Truncate(time.Second), s.opts.MaxSkew)
	}
	return nil
}

// Close does nothing.
func (s *SharedSecret) Close() error { return nil }

// SharedSecretProvider issues tokens for one group's secret (data-plane side).
type SharedSecretProvider struct {
	secret []byte
	opts   SharedSecretOptions
}

// NewSharedSecretProvider builds a provider; secret must be at least MinSecretLen bytes.
func NewSharedSecretProvider(secret string, opts SharedSecretOptions) (*SharedSecretProvider, error) {
	if err := checkSecret(secret); err != nil {
		return nil, fmt.Errorf("shared_secret provider: %w", err)
	}
	return &SharedSecretProvider{secret: []byte(secret), opts: opts.withDefaults()}, nil
}

// Token returns a fresh token for "{group}/{nodeID}" with a new nonce.
func (p *SharedSecretProvider) Token(_ context.Context, group, nodeID string) (string, error) {
	if group == "" {
		return "", fmt.Errorf("%w: %w", ErrProvider, ErrNoGroup)
	}
	id := Identity(group, nodeID)
	if len(id) > MaxIdentityLen {
		return "", fmt.Errorf("%w: identity longer than %d bytes", ErrProvider, MaxIdentityLen)
	}
	var nonce [NonceLen]byte
	if _, err := io.ReadFull(p.opts.Rand, nonce[:]); err != nil {
		return "", fmt.Errorf("%w: nonce: %w", ErrProvider, err)
	}
	return formatToken(p.secret, id, p.opts.Now(), nonce), nil
}

// Close does nothing.
func (p *SharedSecretProvider) Close() error { return nil }
