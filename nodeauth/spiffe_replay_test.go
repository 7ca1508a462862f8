package nodeauth

import (
	"context"
	"crypto/elliptic"
	"encoding/base64"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/spiffe/go-spiffe/v2/bundle/jwtbundle"
)

// sign signs arbitrary claims as the authority.
func (a *authority) sign(t *testing.T, claims any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: a.key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", a.kid))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// malleate re-encodes an ES256 token's signature (r, s) as (r, N-s): another text
// that verifies just as well, which a replay check must still know.
func malleate(t *testing.T, token string) string {
	t.Helper()
	i := strings.LastIndex(token, ".")
	sig, err := base64.RawURLEncoding.DecodeString(token[i+1:])
	if err != nil || len(sig) != 64 {
		t.Fatalf("not an ES256 signature: %v", err)
	}
	s := new(big.Int).SetBytes(sig[32:])
	s.Sub(elliptic.P256().Params().N, s)
	out := append(append([]byte{}, sig[:32]...), s.FillBytes(make([]byte, 32))...)
	return token[:i+1] + base64.RawURLEncoding.EncodeToString(out)
}

// TestSPIFFERefusesReplay: a JWT-SVID registers once within its lifetime. A second
// presentation is refused, as is the same token with its signature re-encoded; a
// token with a jti is known by it (per trust domain); a denied token is not
// remembered.
func TestSPIFFERefusesReplay(t *testing.T) {
	cloud, edge := newAuthority(t, "cloud", "k1"), newAuthority(t, "edge", "k1")
	v, err := NewSPIFFE(jwtbundle.NewSet(cloud.bundle(), edge.bundle()), "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	aud, later := []string{DefaultAudience}, time.Now().Add(5*time.Minute)
	tok := cloud.svid(t, "node/n1", aud, later)
	if err := v.Verify(ctx, tok, "cloud", "n1"); err != nil {
		t.Fatalf("first presentation: %v", err)
	}
	if err := v.Verify(ctx, tok, "cloud", "n1"); !errors.Is(err, ErrReplayed) {
		t.Fatalf("second presentation of the same JWT-SVID: want ErrReplayed, got %v", err)
	}
	if err := v.Verify(ctx, malleate(t, tok), "cloud", "n1"); !errors.Is(err, ErrReplayed) {
		t.Fatalf("the same JWT-SVID with its signature re-encoded: want ErrReplayed, got %v", err)
	}

	withJTI := func(a *authority, issued time.Time) string {
		return a.sign(t, jwt.Claims{Subject: "spiffe://" + a.td.Name() + "/node/n2", Audience: aud, ID: "jti-1",
			Expiry: jwt.NewNumericDate(later), IssuedAt: jwt.NewNumericDate(issued)})
	}
	if err := v.Verify(ctx, withJTI(cloud, time.Now().Add(-time.Minute)), "cloud", "n2"); err != nil {
		t.Fatalf("token with a jti: %v", err)
	}
	if err := v.Verify(ctx, withJTI(cloud, time.Now().Add(-2*time.Minute)), "cloud", "n2"); !errors.Is(err, ErrReplayed) {
		t.Fatalf("another token with the same jti: want ErrReplayed, got %v", err)
	}
	if err := v.Verify(ctx, withJTI(edge, time.Now().Add(-time.Minute)), "edge", "n2"); err != nil {
		t.Fatalf("the same jti from another trust domain: %v", err)
	}

	denied := cloud.svid(t, "node/n3", aud, later)
	if err := v.Verify(ctx, denied, "cloud", "n9"); !errors.Is(err, ErrWrongIdentity) {
		t.Fatalf("SVID of n3 as n9: want ErrWrongIdentity, got %v", err)
	}
	if err := v.Verify(ctx, denied, "cloud", "n3"); err != nil {
		t.Fatalf("a token denied once was remembered: %v", err)
	}
}

// TestSPIFFEBindsNodeID: the SPIFFE ID's trust domain is the group and its last path
// segment the node id: spiffe://cloud/node/n1 registers as cloud/n1 and nothing else.
func TestSPIFFEBindsNodeID(t *testing.T) {
	cloud := newAuthority(t, "cloud", "k1")
	v, err := NewSPIFFE(jwtbundle.NewSet(cloud.bundle()), "")
	if err != nil {
		t.Fatal(err)
	}
	aud := []string{DefaultAudience}
	exp := time.Now().Add(5 * time.Minute)
	for i, c := range []struct {
		subject, node string
		want          error
	}{
		{"spiffe://cloud/node/n1", "n1", nil},
		{"spiffe://cloud/node/n1", "n9", ErrWrongIdentity},
		{"spiffe://cloud/node/n1", "node", ErrWrongIdentity},
		{"spiffe://cloud/n1", "n1", nil},
		{"spiffe://cloud/a/b/n1", "n1", nil},
		{"spiffe://cloud/n1/x", "n1", ErrWrongIdentity},
		{"spiffe://cloud", "cloud", ErrWrongIdentity},
		{"spiffe://cloud/node/n1", "", ErrWrongIdentity},
	} {
		// Each token distinct (iat), so that the replay check plays no part.
		tok := cloud.sign(t, jwt.Claims{Subject: c.subject, Audience: aud, Expiry: jwt.NewNumericDate(exp),
			IssuedAt: jwt.NewNumericDate(time.Now().Add(-time.Duration(i+1) * time.Second))})
		err := v.Verify(context.Background(), tok, "cloud", c.node)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s as node %q: got %v, want %v", c.subject, c.node, err, c.want)
		}
	}
	if id, err := VerifyIdentity(context.Background(), v, cloud.svid(t, "node/n4", aud, exp), "cloud", "n4"); err != nil || id != "spiffe://cloud/node/n4" {
		t.Fatalf("VerifyIdentity = %q, %v", id, err)
	}
}

// TestSPIREReconnectGetsAFreshSVID: a node registers again (a reconnect) with a new
// token from its provider, although the Workload API caches JWT-SVIDs by audience as
// a SPIRE agent does: a cached token would be refused as a replay.
func TestSPIREReconnectGetsAFreshSVID(t *testing.T) {
	sock := startWorkloadAPI(t, newAuthority(t, "alpha", "k1"), "node/n1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v, err := New(ctx, Config{Type: TypeSPIRE, SocketPath: sock})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	p, err := NewTokenProvider(ctx, ProviderConfig{Type: TypeSPIRE, SocketPath: sock})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for attempt := 1; attempt <= 3; attempt++ {
		tok, err := p.Token(ctx, "alpha", "n1")
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Verify(ctx, tok, "alpha", "n1"); err != nil {
			t.Fatalf("registration %d: %v", attempt, err)
		}
	}
}
