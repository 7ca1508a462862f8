package nodeauth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/spiffe/go-spiffe/v2/bundle/jwtbundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/jwtsvid"
)

// DefaultAudience is the JWT-SVID audience nodes request and the control plane demands.
const DefaultAudience = "switchboard-controlplane"

// svidAlgorithms are the JWS algorithms JWT-SVIDs may use (the SPIFFE JWT-SVID spec).
var svidAlgorithms = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512, jose.PS256, jose.PS384, jose.PS512,
}

// SPIFFE verifies JWT-SVIDs (control-plane side): the signature against the trust
// bundle of the SVID's trust domain, the audience, the expiry, that the SPIFFE ID
// names the claimed node (SPIFFENode), and that the token was not presented before.
type SPIFFE struct {
	bundles  jwtbundle.Source
	audience string
	replay   *replayCache
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
	return &SPIFFE{bundles: bundles, audience: audience, replay: newReplayCache(DefaultReplayCacheSize)}, nil
}

// SPIFFENode maps a SPIFFE ID to the node it names: the trust domain is the group
// and the last path segment the node id (spiffe://cloud/node/n1 is node n1 of group
// cloud). An ID without a path names no node.
func SPIFFENode(id spiffeid.ID) (group, nodeID string) {
	p := id.Path()
	return id.TrustDomain().Name(), p[strings.LastIndex(p, "/")+1:]
}

// Verify validates the JWT-SVID in credentials (see VerifyIdentity).
func (s *SPIFFE) Verify(ctx context.Context, credentials, group, nodeID string) error {
	_, err := s.VerifyIdentity(ctx, credentials, group, nodeID)
	return err
}

// VerifyIdentity validates the JWT-SVID in credentials for node nodeID of group and
// returns its SPIFFE ID. The token is remembered only once everything else passed,
// so a denied token cannot use up the replay cache.
func (s *SPIFFE) VerifyIdentity(_ context.Context, credentials, group, nodeID string) (string, error) {
	if err := checkClaim(credentials, group); err != nil {
		return "", err
	}
	svid, err := jwtsvid.ParseAndValidate(credentials, s.bundles, []string{s.audience})
	if err != nil {
		return "", classifySVIDError(credentials, s.audience, err)
	}
	id := svid.ID.String()
	switch td, node := SPIFFENode(svid.ID); {
	case td != group:
		return "", fmt.Errorf("%w: SPIFFE ID %q is in trust domain %q, node claims group %q", ErrWrongGroup, id, td, group)
	case node == "" || node != nodeID:
		return "", fmt.Errorf("%w: SPIFFE ID %q names node %q (its last path segment), the node claims %q",
			ErrWrongIdentity, id, node, truncate(nodeID))
	}
	// Accepted until it expires, with the leeway validation grants past expiry.
	if err := s.replay.add(id, replayKey(svid), svid.Expiry.Add(jwt.DefaultLeeway), time.Now()); err != nil {
		return "", fmt.Errorf("%w (SPIFFE ID %q)", err, id)
	}
	return id, nil
}

// replayKey names a verified JWT-SVID for the replay cache: its jti when it has one
// (unique per issuer, so scoped by trust domain), else a hash of its claims. Never a
// hash of the token's text: an ECDSA signature can be re-encoded into another that
// verifies, which would make the same token look new.
func replayKey(svid *jwtsvid.SVID) string {
	if jti, ok := svid.Claims["jti"].(string); ok && jti != "" {
		return "jti\x00" + svid.ID.TrustDomain().Name() + "\x00" + jti
	}
	// A map marshals with sorted keys: the same claims always hash the same.
	claims, _ := json.Marshal(svid.Claims) // values decoded from JSON marshal back
	sum := sha256.Sum256(claims)
	return "claims\x00" + string(sum[:])
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

// Token fetches a new JWT-SVID. The SVID's own SPIFFE ID carries the identity;
// group and nodeID are only checked for presence. The control plane accepts a token
// once, but a SPIRE agent caches JWT-SVIDs by audience and would hand a reconnecting
// node the token it already used: a second, random audience makes every fetch a new
// token.
func (p *SPIFFEProvider) Token(ctx context.Context, group, _ string) (string, error) {
	if group == "" {
		return "", fmt.Errorf("%w: %w", ErrProvider, ErrNoGroup)
	}
	var nonce [NonceLen]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return "", fmt.Errorf("%w: nonce: %w", ErrProvider, err)
	}
	svid, err := p.source.FetchJWTSVID(ctx, jwtsvid.Params{Audience: p.audience,
		ExtraAudiences: []string{p.audience + "/registration/" + b64.EncodeToString(nonce[:])}})
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
