package auth

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/spiffe/go-spiffe/v2/bundle/jwtbundle"
	"github.com/spiffe/go-spiffe/v2/svid/jwtsvid"
)

// DefaultAudience is the JWT-SVID audience nodes request and the control plane demands.
const DefaultAudience = "switchboard-controlplane"

// svidAlgorithms are the JWS algorithms JWT-SVIDs may use (the SPIFFE JWT-SVID spec).
var svidAlgorithms = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512, jose.PS256, jose.PS384, jose.PS512,
}

// SPIFFE verifies JWT-SVIDs (control-plane side): the signature against the trust
// bundle of the SVID's trust domain, the audience, the expiry, and that the trust
// domain's name equals the claimed group.
type SPIFFE struct {
	bundles  jwtbundle.Source
	audience string
	closer   func() error
}

// NewSPIFFE builds a verifier over bundles (a workloadapi.JWTSource in production, a
// jwtbundle.Set in tests). An empty audience means DefaultAudience.
func NewSPIFFE(bundles jwtbundle.Source, audience string) (*SPIFFE, error) {
	if bundles == nil {
		return nil, errors.New("spiffe auth: nil bundle source")
	}
	if audience == "" {
		audience = DefaultAudience
	}
	return &SPIFFE{bundles: bundles, audience: audience}, nil
}

// Verify validates the JWT-SVID in credentials. nodeID is not part of the check: the
// spec binds SPIFFE identity to the group (trust domain) only.
func (s *SPIFFE) Verify(_ context.Context, credentials, group, _ string) error {
	if err := checkClaim(credentials, group); err != nil {
		return err
	}
	svid, err := jwtsvid.ParseAndValidate(credentials, s.bundles, []string{s.audience})
	if err != nil {
		return classifySVIDError(credentials, s.audience, err)
	}
	if td := svid.ID.TrustDomain().Name(); td != group {
		return fmt.Errorf("%w: SPIFFE ID %q is in trust domain %q, node claims group %q",
			ErrWrongGroup, svid.ID.String(), td, group)
	}
	return nil
}

// classifySVIDError maps a validation failure to a sentinel. go-spiffe's errors are
// plain text, so the unverified claims are read again only to name the cause; the
// decision to deny was already made by ParseAndValidate.
func classifySVIDError(token, audience string, cause error) error {
	parsed, err := jwt.ParseSigned(token, svidAlgorithms)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidToken, cause)
	}
	var claims jwt.Claims
	if err := parsed.UnsafeClaimsWithoutVerification(&claims); err != nil || claims.Subject == "" || claims.Expiry == nil {
		return fmt.Errorf("%w: %w", ErrInvalidToken, cause)
	}
	switch {
	case claims.Expiry.Time().Before(time.Now().Add(-jwt.DefaultLeeway)):
		return fmt.Errorf("%w: %w", ErrExpired, cause)
	case !slices.Contains([]string(claims.Audience), audience):
		return fmt.Errorf("%w: %w", ErrWrongAudience, cause)
	default:
		return fmt.Errorf("%w: %w", ErrBadSignature, cause)
	}
}

// Close releases the bundle source when NewSPIFFE's caller handed over ownership
// (New does, for the Workload API source it opens).
func (s *SPIFFE) Close() error {
	if s.closer != nil {
		return s.closer()
	}
	return nil
}

// SPIFFEProvider fetches a JWT-SVID for the control plane's audience (data-plane side).
type SPIFFEProvider struct {
	source   jwtsvid.Source
	audience string
	closer   func() error
}

// NewSPIFFEProvider builds a provider over source (a workloadapi.JWTSource). An empty
// audience means DefaultAudience.
func NewSPIFFEProvider(source jwtsvid.Source, audience string) (*SPIFFEProvider, error) {
	if source == nil {
		return nil, errors.New("spiffe provider: nil JWT-SVID source")
	}
	if audience == "" {
		audience = DefaultAudience
	}
	return &SPIFFEProvider{source: source, audience: audience}, nil
}

// Token fetches a JWT-SVID. The SVID's own SPIFFE ID carries the identity; group and
// nodeID are only checked for presence.
func (p *SPIFFEProvider) Token(ctx context.Context, group, _ string) (string, error) {
	if group == "" {
		return "", fmt.Errorf("%w: %w", ErrProvider, ErrNoGroup)
	}
	svid, err := p.source.FetchJWTSVID(ctx, jwtsvid.Params{Audience: p.audience})
	if err != nil {
		return "", fmt.Errorf("%w: fetch JWT-SVID: %w", ErrProvider, err)
	}
	return svid.Marshal(), nil
}

// Close releases the source when New opened it.
func (p *SPIFFEProvider) Close() error {
	if p.closer != nil {
		return p.closer()
	}
	return nil
}
