package nodeauth

import (
	"context"
	"errors"
)

// Authenticator verifies that a node may join the group it claims. It is used by the
// control plane. A nil error admits the node; any error denies it.
type Authenticator interface {
	// Verify checks credentials presented by node nodeID claiming group.
	Verify(ctx context.Context, credentials, group, nodeID string) error
	// Close releases what the authenticator holds (a Workload API connection).
	Close() error
}

// IdentityVerifier is an Authenticator that also says who the credentials proved the
// caller to be, so that the control plane can tell whether a second registration of
// a node comes from the same holder.
type IdentityVerifier interface {
	// VerifyIdentity is Verify that returns the proven identity.
	VerifyIdentity(ctx context.Context, credentials, group, nodeID string) (string, error)
}

// VerifyIdentity verifies with a and returns the identity it proved: "" when a proves
// none (Noop), or does not say.
func VerifyIdentity(ctx context.Context, a Authenticator, credentials, group, nodeID string) (string, error) {
	if v, ok := a.(IdentityVerifier); ok {
		return v.VerifyIdentity(ctx, credentials, group, nodeID)
	}
	return "", a.Verify(ctx, credentials, group, nodeID)
}

// TokenProvider produces the credentials a data-plane node sends when it registers.
type TokenProvider interface {
	// Token returns fresh credentials for identity "{group}/{nodeID}". An error means
	// the node must not register on this attempt.
	Token(ctx context.Context, group, nodeID string) (string, error)
	// Close releases what the provider holds.
	Close() error
}

// Sentinel errors. Verify and Token wrap exactly one of them (plus detail).
var (
	// ErrEmptyCredentials: auth is configured and the node sent no credentials.
	ErrEmptyCredentials = errors.New("empty credentials")
	// ErrNoGroup: auth is configured and the node claimed no group.
	ErrNoGroup = errors.New("no group name")
	// ErrUnknownGroup: no secret is configured for the claimed group.
	ErrUnknownGroup = errors.New("no secret configured for group")
	// ErrInvalidToken: the credentials do not parse as a token of the configured kind.
	ErrInvalidToken = errors.New("invalid token")
	// ErrBadSignature: the token's MAC or signature does not verify.
	ErrBadSignature = errors.New("bad token signature")
	// ErrWrongIdentity: the token was issued to another "{group}/{node_id}".
	ErrWrongIdentity = errors.New("token identity does not match node")
	// ErrWrongGroup: the SPIFFE ID's trust domain is not the claimed group.
	ErrWrongGroup = errors.New("trust domain does not match group")
	// ErrWrongAudience: the JWT-SVID was not issued for the control plane.
	ErrWrongAudience = errors.New("token audience mismatch")
	// ErrExpired: the token is older than the accepted window.
	ErrExpired = errors.New("token expired")
	// ErrNotYetValid: the token is dated further in the future than the allowed skew.
	ErrNotYetValid = errors.New("token issued in the future")
	// ErrReplayed: this token's nonce was already accepted within the window.
	ErrReplayed = errors.New("token replayed")
	// ErrReplayCacheFull: too many live nonces; the node should retry later.
	ErrReplayCacheFull = errors.New("replay cache full")
	// ErrProvider: the node-side provider could not produce a token.
	ErrProvider = errors.New("token provider failed")
)

// Noop accepts every node; it is the default when no auth is configured.
type Noop struct{}

// Verify accepts everything, including empty credentials (backward compatible).
func (Noop) Verify(context.Context, string, string, string) error { return nil }

// Token returns empty credentials.
func (Noop) Token(context.Context, string, string) (string, error) { return "", nil }

// Close does nothing.
func (Noop) Close() error { return nil }

// checkClaim applies the rules shared by every real authenticator.
func checkClaim(credentials, group string) error {
	if credentials == "" {
		return ErrEmptyCredentials
	}
	if group == "" {
		return ErrNoGroup
	}
	return nil
}

// Identity is the token identity of a node: "{group}/{nodeID}". The node always uses
// it, whatever id its own config holds, so a typo cannot split the two sides.
func Identity(group, nodeID string) string { return group + "/" + nodeID }
