package nodeauth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/spiffe/go-spiffe/v2/bundle/jwtbundle"
	"github.com/spiffe/go-spiffe/v2/proto/spiffe/workload"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"
)

// authority is a test JWT signing authority of one trust domain.
type authority struct {
	td  spiffeid.TrustDomain
	kid string
	key *ecdsa.PrivateKey
}

func newAuthority(t *testing.T, td, kid string) *authority {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &authority{td: spiffeid.RequireTrustDomainFromString(td), kid: kid, key: key}
}

func (a *authority) bundle() *jwtbundle.Bundle {
	return jwtbundle.FromJWTAuthorities(a.td, map[string]crypto.PublicKey{a.kid: a.key.Public()})
}

// svid signs a JWT-SVID for spiffe://<td>/<path>.
func (a *authority) svid(t *testing.T, path string, aud []string, exp time.Time) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: a.key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", a.kid))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(signer).Claims(jwt.Claims{
		Subject:  spiffeid.RequireFromPath(a.td, "/"+path).String(),
		Audience: aud,
		Expiry:   jwt.NewNumericDate(exp),
		IssuedAt: jwt.NewNumericDate(time.Now().Add(-time.Minute)),
	}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestSPIFFEVerify(t *testing.T) {
	alpha := newAuthority(t, "alpha", "k1")
	beta := newAuthority(t, "beta", "k1")
	rogue := newAuthority(t, "alpha", "k1")   // same trust domain and kid, other key
	unknown := newAuthority(t, "alpha", "k9") // kid not in the bundle
	nobundle := newAuthority(t, "gamma", "k1")
	v, err := NewSPIFFE(jwtbundle.NewSet(alpha.bundle(), beta.bundle()), "")
	if err != nil {
		t.Fatal(err)
	}
	aud := []string{DefaultAudience}
	later := time.Now().Add(5 * time.Minute)
	cases := []struct {
		name, token, group string
		want               error
	}{
		{"valid", alpha.svid(t, "node/n1", aud, later), "alpha", nil},
		{"extra audiences fine", alpha.svid(t, "n1", []string{"other", DefaultAudience}, later), "alpha", nil},
		{"wrong trust domain vs group", beta.svid(t, "n1", aud, later), "alpha", ErrWrongGroup},
		{"wrong audience", alpha.svid(t, "n1", []string{"someone-else"}, later), "alpha", ErrWrongAudience},
		{"expired", alpha.svid(t, "n1", aud, time.Now().Add(-2*time.Minute)), "alpha", ErrExpired},
		{"unknown key id", unknown.svid(t, "n1", aud, later), "alpha", ErrBadSignature},
		{"signed by other key", rogue.svid(t, "n1", aud, later), "alpha", ErrBadSignature},
		{"no bundle for trust domain", nobundle.svid(t, "n1", aud, later), "gamma", ErrBadSignature},
		{"empty credentials", "", "alpha", ErrEmptyCredentials},
		{"no group", alpha.svid(t, "n1", aud, later), "", ErrNoGroup},
		{"garbage", "a.b.c", "alpha", ErrInvalidToken},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := v.Verify(context.Background(), tc.token, tc.group, "n1")
			if tc.want == nil && err != nil {
				t.Fatalf("want accepted, got %v", err)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("want %v, got %v", tc.want, err)
			}
		})
	}
}

// workloadAPI is a minimal SPIFFE Workload API server: it hands out JWT-SVIDs signed
// by one authority and serves that authority's bundle, like a SPIRE agent would. As
// a SPIRE agent does, it caches each JWT-SVID by SPIFFE ID and audience set and hands
// the same token out again while more than half its lifetime is left.
type workloadAPI struct {
	workload.UnimplementedSpiffeWorkloadAPIServer
	t    *testing.T
	auth *authority
	path string

	mu    sync.Mutex
	cache map[string]string // sorted audiences -> token
}

func (w *workloadAPI) FetchJWTSVID(_ context.Context, req *workload.JWTSVIDRequest) (*workload.JWTSVIDResponse, error) {
	id := spiffeid.RequireFromPath(w.auth.td, "/"+w.path).String()
	key := strings.Join(slices.Sorted(slices.Values(req.Audience)), "\x00")
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cache == nil {
		w.cache = map[string]string{}
	}
	tok, ok := w.cache[key]
	if !ok {
		tok = w.auth.svid(w.t, w.path, req.Audience, time.Now().Add(5*time.Minute))
		w.cache[key] = tok
	}
	return &workload.JWTSVIDResponse{Svids: []*workload.JWTSVID{{SpiffeId: id, Svid: tok}}}, nil
}

func (w *workloadAPI) FetchJWTBundles(_ *workload.JWTBundlesRequest, s grpc.ServerStreamingServer[workload.JWTBundlesResponse]) error {
	raw, err := w.auth.bundle().Marshal()
	if err != nil {
		return err
	}
	if err := s.Send(&workload.JWTBundlesResponse{Bundles: map[string][]byte{w.auth.td.IDString(): raw}}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

func startWorkloadAPI(t *testing.T, a *authority, path string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "api.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	workload.RegisterSpiffeWorkloadAPIServer(srv, &workloadAPI{t: t, auth: a, path: path})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return sock
}

// TestSPIREEndToEnd: provider and verifier built from config, both talking to a real
// Workload API server over a unix socket.
func TestSPIREEndToEnd(t *testing.T) {
	sock := startWorkloadAPI(t, newAuthority(t, "alpha", "k1"), "dp/n1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v, err := New(ctx, Config{Type: TypeSPIRE, SocketPath: sock})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	p, err := NewTokenProvider(ctx, ProviderConfig{Type: TypeSPIRE, SocketPath: "unix://" + sock})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tok, err := p.Token(ctx, "alpha", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(ctx, tok, "alpha", "n1"); err != nil {
		t.Fatalf("valid SVID rejected: %v", err)
	}
	if err := v.Verify(ctx, tok, "beta", "n1"); !errors.Is(err, ErrWrongGroup) {
		t.Fatalf("want ErrWrongGroup, got %v", err)
	}
	if _, err := p.Token(ctx, "", "n1"); !errors.Is(err, ErrNoGroup) {
		t.Fatalf("want ErrNoGroup, got %v", err)
	}
}

func TestSPIREProviderFailure(t *testing.T) {
	sock := startWorkloadAPI(t, newAuthority(t, "alpha", "k1"), "dp/n1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := NewTokenProvider(ctx, ProviderConfig{Type: TypeSPIRE, SocketPath: sock, Audience: "x"})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	if _, err := p.Token(ctx, "alpha", "n1"); !errors.Is(err, ErrProvider) {
		t.Fatalf("closed source: want ErrProvider, got %v", err)
	}
}

func TestNewFromConfig(t *testing.T) {
	ctx := context.Background()
	for _, typ := range []string{"", "noop"} {
		a, err := New(ctx, Config{Type: typ})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := a.(Noop); !ok {
			t.Fatalf("type %q: got %T, want Noop", typ, a)
		}
	}
	if _, err := New(ctx, Config{Type: "kerberos"}); err == nil {
		t.Fatal("unknown type must be rejected")
	}
	if _, err := New(ctx, Config{Type: TypeSharedSecret, Secrets: map[string]string{"g": "short"}}); err == nil {
		t.Fatal("short secret must be rejected")
	}
	a, err := New(ctx, Config{Type: TypeSharedSecret, Secrets: map[string]string{"alpha": secretAlpha}, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewTokenProvider(ctx, ProviderConfig{Type: TypeSharedSecret, Secret: secretAlpha})
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := p.Token(ctx, "alpha", "n1")
	if err := a.Verify(ctx, tok, "alpha", "n1"); err != nil {
		t.Fatal(err)
	}
	if err := a.Verify(ctx, "", "alpha", "n1"); !errors.Is(err, ErrEmptyCredentials) {
		t.Fatalf("want ErrEmptyCredentials, got %v", err)
	}
	if _, err := NewTokenProvider(ctx, ProviderConfig{Type: "x"}); err == nil {
		t.Fatal("unknown provider type must be rejected")
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := New(short, Config{Type: TypeSPIRE, SocketPath: filepath.Join(t.TempDir(), "none.sock")}); err == nil {
		t.Fatal("spire without a reachable workload API must fail")
	}
}
