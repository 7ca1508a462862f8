package southbound

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/spiffe/go-spiffe/v2/bundle/jwtbundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/codes"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/nodeauth"
)

var (
	cloudSecret = strings.Repeat("c", 32) + "-cloud"
	edgeSecret  = strings.Repeat("e", 32) + "-edge"
)

func token(t *testing.T, secret, group, id string, issued time.Time) string {
	t.Helper()
	p, err := nodeauth.NewSharedSecretProvider(secret, nodeauth.SharedSecretOptions{Now: func() time.Time { return issued }})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := p.Token(context.Background(), group, id)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestSharedSecretOverTheWire: every denial ends the stream with PermissionDenied and
// a reason, and saves nothing; a valid token registers once and cannot be replayed.
func TestSharedSecretOverTheWire(t *testing.T) {
	verifier, err := nodeauth.NewSharedSecret(map[string]string{"cloud": cloudSecret, "edge": edgeSecret}, nodeauth.SharedSecretOptions{Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, verifier, 0)
	now := time.Now()
	valid := token(t, cloudSecret, "cloud", "n1", now)
	cases := []struct {
		name, group, id, creds, reason string
	}{
		{"empty credentials", "cloud", "n2", "", "empty credentials"},
		{"wrong secret", "cloud", "n2", token(t, strings.Repeat("x", 40), "cloud", "n2", now), "bad token signature"},
		{"token of another group", "cloud", "n2", token(t, edgeSecret, "edge", "n2", now), "token identity does not match"},
		{"group without a secret", "rogue", "n2", token(t, cloudSecret, "rogue", "n2", now), "no secret configured"},
		{"no group", "", "n2", valid, "no group name"},
		{"expired", "cloud", "n2", token(t, cloudSecret, "cloud", "n2", now.Add(-10*time.Minute)), "token expired"},
		{"garbage", "cloud", "n2", "sb1.nope", "invalid token"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := f.open()
			n.send(registerMsg(tc.group, tc.id, tc.creds))
			wantStatus(t, n.recvErr(), codes.PermissionDenied, tc.reason)
			if _, err := f.st.GetNode(context.Background(), "cloud/n2"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("denied node was saved: %v", err)
			}
			if o := f.lastOutcome(); o != OutcomeDenied {
				t.Fatalf("outcome %q", o)
			}
		})
	}
	f.register("cloud", "n1", valid)
	if n, err := f.st.GetNode(context.Background(), "cloud/n1"); err != nil || !n.Connected {
		t.Fatalf("valid registration: %+v, %v", n, err)
	}
	replay := f.open()
	replay.send(registerMsg("cloud", "n1", valid))
	wantStatus(t, replay.recvErr(), codes.PermissionDenied, "token replayed")
}

// jwtAuthority signs JWT-SVIDs for one trust domain.
type jwtAuthority struct {
	td  spiffeid.TrustDomain
	key *ecdsa.PrivateKey
}

func newJWTAuthority(t *testing.T, td string) *jwtAuthority {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &jwtAuthority{td: spiffeid.RequireTrustDomainFromString(td), key: key}
}

func (a *jwtAuthority) bundle() *jwtbundle.Bundle {
	return jwtbundle.FromJWTAuthorities(a.td, map[string]crypto.PublicKey{"k1": a.key.Public()})
}

func (a *jwtAuthority) svid(t *testing.T, path string, exp time.Time) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: a.key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(signer).Claims(jwt.Claims{
		Subject: spiffeid.RequireFromPath(a.td, "/"+path).String(), Audience: []string{nodeauth.DefaultAudience},
		Expiry: jwt.NewNumericDate(exp), IssuedAt: jwt.NewNumericDate(time.Now().Add(-time.Minute)),
	}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestSPIFFEOverTheWire: JWT-SVIDs verified against a test trust bundle; the trust
// domain must be the claimed group.
func TestSPIFFEOverTheWire(t *testing.T) {
	cloud, edge, rogue := newJWTAuthority(t, "cloud"), newJWTAuthority(t, "edge"), newJWTAuthority(t, "cloud")
	verifier, err := nodeauth.NewSPIFFE(jwtbundle.NewSet(cloud.bundle(), edge.bundle()), "")
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, verifier, 0)
	later := time.Now().Add(5 * time.Minute)
	for _, tc := range []struct{ name, creds, reason string }{
		{"other trust domain", edge.svid(t, "dp/n2", later), "trust domain does not match"},
		{"unknown signer", rogue.svid(t, "dp/n2", later), "bad token signature"},
		{"expired", cloud.svid(t, "dp/n2", time.Now().Add(-time.Minute)), "token expired"},
		{"empty", "", "empty credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := f.open()
			n.send(registerMsg("cloud", "n2", tc.creds))
			wantStatus(t, n.recvErr(), codes.PermissionDenied, tc.reason)
			if _, err := f.st.GetNode(context.Background(), "cloud/n2"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("denied node was saved: %v", err)
			}
		})
	}
	f.register("cloud", "n1", cloud.svid(t, "dp/n1", later))
}
