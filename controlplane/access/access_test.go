package access

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil/tlstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestMethodTableCoversService: every method of the northbound service has a role, and
// the table names no method the service lacks; listing is for viewers, the rest is
// mutation and needs admin.
func TestMethodTableCoversService(t *testing.T) {
	desc := controlplanev1.ControlPlaneService_ServiceDesc
	served := map[string]bool{}
	var names []string
	for _, m := range desc.Methods {
		names = append(names, m.MethodName)
	}
	for _, s := range desc.Streams {
		names = append(names, s.StreamName)
	}
	for _, name := range names {
		full := "/" + desc.ServiceName + "/" + name
		served[full] = true
		role, ok := MethodRoles[full]
		switch {
		case !ok:
			t.Errorf("%s has no entry in MethodRoles: add it with the role it needs", full)
		case strings.HasPrefix(name, "List") && role != Viewer:
			t.Errorf("%s reads and should need viewer, not %s", full, role)
		case !strings.HasPrefix(name, "List") && role != Admin:
			t.Errorf("%s mutates and should need admin, not %s", full, role)
		}
	}
	for full := range MethodRoles {
		if !served[full] {
			t.Errorf("MethodRoles names %s, which the service does not have", full)
		}
	}
}

// fakeNorthbound answers one read and one mutation, recording the change.
type fakeNorthbound struct {
	controlplanev1.UnimplementedControlPlaneServiceServer
	mu       sync.Mutex
	segments []string
	callers  []Caller
}

func (f *fakeNorthbound) ListSegments(ctx context.Context, _ *controlplanev1.ListSegmentsRequest) (*controlplanev1.ListSegmentsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, _ := CallerFrom(ctx)
	f.callers = append(f.callers, c)
	return &controlplanev1.ListSegmentsResponse{}, nil
}

func (f *fakeNorthbound) AddSegment(ctx context.Context, req *controlplanev1.SegmentRequest) (*controlplanev1.MutationResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.segments = append(f.segments, req.GetName())
	RecordChange(ctx, nil, &controlplanev1.Segment{Name: req.GetName()})
	return &controlplanev1.MutationResponse{Message: "segment " + req.GetName() + " added"}, nil
}

type rig struct {
	t        *testing.T
	ca       *tlstest.CA
	addr     string
	fake     *fakeNorthbound
	authz    *Authorizer
	reg      *prometheus.Registry
	logs     *syncbuf.Buffer
	tokens   map[string]string // name -> token
	tokenDir string
}

// newRig serves the fake over loopback TLS that asks for, but does not require, a
// client certificate, so token-only and certificate-only callers both reach it.
func newRig(t *testing.T, authz config.Authorization) *rig {
	t.Helper()
	ca, err := tlstest.NewCA("access test")
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, ca: ca, fake: &fakeNorthbound{}, reg: prometheus.NewRegistry(), logs: &syncbuf.Buffer{}, tokens: map[string]string{}, tokenDir: t.TempDir()}
	if authz.TokenFile != "" {
		var lines []string
		for _, h := range [][2]string{{"admin", "ci"}, {"viewer", "dash"}} {
			tok := Generate()
			r.tokens[h[1]] = tok
			l, err := HashLine(h[0], h[1], tok)
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, l)
		}
		authz.TokenFile = filepath.Join(r.tokenDir, "tokens")
		r.writeTokens(strings.Join(lines, "\n"))
	}
	log := slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if r.authz, err = New(Options{Config: authz, Logger: log, Metrics: r.reg}); err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue("", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	pair, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(append(r.authz.ServerOptions(), grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12,
	})))...)
	controlplanev1.RegisterControlPlaneServiceServer(srv, r.fake)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	r.addr = lis.Addr().String()
	return r
}

func (r *rig) writeTokens(body string) {
	r.t.Helper()
	if err := os.WriteFile(filepath.Join(r.tokenDir, "tokens"), []byte(body+"\n"), 0o600); err != nil {
		r.t.Fatal(err)
	}
}

// client dials as a certificate holder (spiffeID and dnsNames; none: no certificate).
func (r *rig) client(spiffeID string, dnsNames ...string) controlplanev1.ControlPlaneServiceClient {
	r.t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(r.ca.Cert)
	conf := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if spiffeID != "" || len(dnsNames) > 0 {
		leaf, err := r.ca.Issue(spiffeID, dnsNames...)
		if err != nil {
			r.t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
		if err != nil {
			r.t.Fatal(err)
		}
		conf.Certificates = []tls.Certificate{pair}
	}
	conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(credentials.NewTLS(conf)))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { conn.Close() })
	return controlplanev1.NewControlPlaneServiceClient(conn)
}

func withToken(tok string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
}

func call(t *testing.T, ctx context.Context, c controlplanev1.ControlPlaneServiceClient, mutate bool) (codes.Code, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var err error
	if mutate {
		_, err = c.AddSegment(ctx, &controlplanev1.SegmentRequest{Name: "s1"})
	} else {
		_, err = c.ListSegments(ctx, &controlplanev1.ListSegmentsRequest{})
	}
	st, _ := status.FromError(err)
	return st.Code(), st.Message()
}

// TestRolesOverTLS: tokens and certificate identities (URI, DNS and CN) map to roles;
// viewers list, admins also mutate; every refusal names what is missing, is counted
// and changes nothing; every mutation leaves one audit line naming the caller.
func TestRolesOverTLS(t *testing.T) {
	r := newRig(t, config.Authorization{TokenFile: "set by newRig", Identities: map[string]string{
		"spiffe://test/ops":        config.RoleAdmin,
		"dns:viewer.test":          config.RoleViewer,
		"cn:switchboard test leaf": config.RoleViewer, // every leaf the test CA issues
	}})
	anon := r.client("")
	opsCert := r.client("spiffe://test/ops")
	dnsCert := r.client("", "viewer.test")
	otherCert := r.client("spiffe://test/somebody")
	bg := context.Background()
	for _, c := range []struct {
		name    string
		ctx     context.Context
		client  controlplanev1.ControlPlaneServiceClient
		mutate  bool
		code    codes.Code
		msg     string
		auditAs string
	}{
		{"viewer token lists", withToken(r.tokens["dash"]), anon, false, codes.OK, "", ""},
		{"viewer token cannot mutate", withToken(r.tokens["dash"]), anon, true, codes.PermissionDenied, "AddSegment needs role admin; token:dash has role viewer", ""},
		{"admin token mutates", withToken(r.tokens["ci"]), anon, true, codes.OK, "", "who=token:ci via=token role=admin"},
		{"unknown token", withToken(Generate()), anon, false, codes.Unauthenticated, "unknown or revoked token", ""},
		{"a bad token is refused even with an admin certificate", withToken("nope"), opsCert, false, codes.Unauthenticated, "unknown or revoked token", ""},
		{"no credentials", bg, anon, false, codes.Unauthenticated, "no credentials", ""},
		{"admin certificate (URI SAN) mutates", bg, opsCert, true, codes.OK, "", "who=spiffe://test/ops via=certificate role=admin"},
		{"viewer certificate (DNS SAN) lists", bg, dnsCert, false, codes.OK, "", ""},
		{"viewer certificate (DNS SAN) cannot mutate", bg, dnsCert, true, codes.PermissionDenied, "needs role admin; dns:viewer.test has role viewer", ""},
		{"a certificate known by its CN only is a viewer", bg, otherCert, true, codes.PermissionDenied, "needs role admin; cn:switchboard test leaf has role viewer", ""},
		{"a token decides over the certificate", withToken(r.tokens["dash"]), opsCert, true, codes.PermissionDenied, "token:dash has role viewer", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(r.fake.segments)
			auditBefore := strings.Count(r.logs.String(), "audit=true")
			code, msg := call(t, c.ctx, c.client, c.mutate)
			if code != c.code || !strings.Contains(msg, c.msg) {
				t.Fatalf("got %s %q, want %s %q", code, msg, c.code, c.msg)
			}
			r.fake.mu.Lock()
			changed := len(r.fake.segments) != before
			r.fake.mu.Unlock()
			if changed != (c.mutate && code == codes.OK) {
				t.Fatalf("segments changed: %v", changed)
			}
			logs := r.logs.String()
			audits := strings.Count(logs, "audit=true") - auditBefore
			if c.auditAs == "" && audits != 0 || c.auditAs != "" && audits != 1 {
				t.Fatalf("%d audit lines:\n%s", audits, logs)
			}
			if c.auditAs != "" {
				last := logs[strings.LastIndex(logs, "audit=true"):]
				last = last[:strings.Index(last, "\n")]
				for _, want := range []string{c.auditAs, "method=AddSegment", `before=null`, `\"name\":\"s1\"`, `result="segment s1 added"`} {
					if !strings.Contains(last, want) {
						t.Errorf("audit line lacks %s:\n%s", want, last)
					}
				}
			}
		})
	}
	for reason, want := range map[string]float64{"permission_denied": 4, "unauthenticated": 3} {
		if got := testutil.ToFloat64(r.authz.denied.WithLabelValues("ListSegments", reason)) +
			testutil.ToFloat64(r.authz.denied.WithLabelValues("AddSegment", reason)); got != want {
			t.Errorf("denied{reason=%s} = %v, want %v", reason, got, want)
		}
	}
	if !strings.Contains(r.logs.String(), "northbound call denied") {
		t.Error("denials are not logged")
	}
}

// TestReload: a token removed from the file stops working at the next Reload; a
// broken file keeps the tokens in force; the log says what changed, never a token.
func TestReload(t *testing.T) {
	r := newRig(t, config.Authorization{TokenFile: "set by newRig"})
	c := r.client("")
	if code, msg := call(t, withToken(r.tokens["dash"]), c, false); code != codes.OK {
		t.Fatalf("before reload: %s %s", code, msg)
	}
	keep, _ := HashLine("admin", "ci", r.tokens["ci"])
	r.writeTokens("admin broken-line")
	if err := r.authz.Reload(); err == nil {
		t.Fatal("a broken token file reloaded")
	}
	if code, _ := call(t, withToken(r.tokens["dash"]), c, false); code != codes.OK {
		t.Fatal("a failed reload dropped the tokens in force")
	}
	r.writeTokens(keep)
	if err := r.authz.Reload(); err != nil {
		t.Fatal(err)
	}
	if code, msg := call(t, withToken(r.tokens["dash"]), c, false); code != codes.Unauthenticated || !strings.Contains(msg, "revoked") {
		t.Fatalf("revoked token: %s %q", code, msg)
	}
	if code, _ := call(t, withToken(r.tokens["ci"]), c, true); code != codes.OK {
		t.Fatal("the kept token stopped working")
	}
	logs := r.logs.String()
	if !strings.Contains(logs, "northbound token file reloaded") || !strings.Contains(logs, "removed=1") || !strings.Contains(logs, "removed_names=[dash]") {
		t.Errorf("reload log:\n%s", logs)
	}
	for _, tok := range r.tokens {
		if strings.Contains(logs, tok) {
			t.Fatal("a token was logged")
		}
	}
	if got := testutil.ToFloat64(r.authz.reloads.WithLabelValues("error")); got != 1 {
		t.Errorf("reloads{error} = %v", got)
	}
}

// TestOpen: with no bindings every caller may do everything, and mutations are still
// audited, by certificate identity when there is one.
func TestOpen(t *testing.T) {
	r := newRig(t, config.Authorization{})
	if code, msg := call(t, context.Background(), r.client(""), true); code != codes.OK {
		t.Fatalf("open: %s %s", code, msg)
	}
	if code, _ := call(t, context.Background(), r.client("spiffe://test/x"), true); code != codes.OK {
		t.Fatal("open with a certificate refused")
	}
	logs := r.logs.String()
	if !strings.Contains(logs, "who=anonymous via=none") || !strings.Contains(logs, "who=spiffe://test/x via=none") {
		t.Fatalf("audit lines:\n%s", logs)
	}
}

func TestUnknownMethodRefused(t *testing.T) {
	a, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = a.authorize(context.Background(), "/switchboard.controlplane.v1.ControlPlaneService/DropEverything")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "not in the control plane's access table") {
		t.Fatalf("unknown method: %v", err)
	}
}
