package check

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func run(t *testing.T, s Spec) error {
	t.Helper()
	c, err := New(s.WithDefaults())
	if err != nil {
		t.Fatalf("New(%+v): %v", s, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.WithDefaults().Timeout)
	defer cancel()
	return c.Check(ctx)
}

func TestHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			w.Write([]byte("status: ready\n"))
		case "/teapot":
			w.WriteHeader(http.StatusTeapot)
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	tests := []struct {
		name string
		spec Spec
		want string // "" = OK
	}{
		{"2xx", Spec{Target: srv.URL + "/ok"}, ""},
		{"404", Spec{Target: srv.URL + "/missing"}, "status 404, want 2xx"},
		{"expected status", Spec{Target: srv.URL + "/teapot", ExpectStatus: 418}, ""},
		{"unexpected status", Spec{Target: srv.URL + "/ok", ExpectStatus: 204}, "status 200, want 204"},
		{"body matches", Spec{Target: srv.URL + "/ok", ExpectBody: "ready"}, ""},
		{"body differs", Spec{Target: srv.URL + "/ok", ExpectBody: "degraded"}, `does not contain "degraded"`},
		{"timeout", Spec{Target: srv.URL + "/slow", Interval: time.Second, Timeout: 100 * time.Millisecond}, "deadline exceeded"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Kind = HTTP
			expect(t, run(t, tc.spec), tc.want)
		})
	}
}

func TestTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	addr := ln.Addr().String()
	expect(t, run(t, Spec{Kind: TCP, Target: addr}), "")
	ln.Close()
	<-done
	expect(t, run(t, Spec{Kind: TCP, Target: addr}), "refused")
}

func TestGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := health.NewServer()
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	addr := ln.Addr().String()

	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("db", healthpb.HealthCheckResponse_NOT_SERVING)
	expect(t, run(t, Spec{Kind: GRPC, Target: addr}), "")
	expect(t, run(t, Spec{Kind: GRPC, Target: addr, GRPCService: "db"}), "NOT_SERVING")
	expect(t, run(t, Spec{Kind: GRPC, Target: addr, GRPCService: "nope"}), "NotFound")
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	expect(t, run(t, Spec{Kind: GRPC, Target: addr}), "NOT_SERVING")

	srv.Stop()
	<-done
	expect(t, run(t, Spec{Kind: GRPC, Target: addr}), "Unavailable")
}

func TestExec(t *testing.T) {
	expect(t, run(t, Spec{Kind: Exec, Argv: []string{"true"}}), "")
	expect(t, run(t, Spec{Kind: Exec, Argv: []string{"false"}}), "exit status 1")
	expect(t, run(t, Spec{Kind: Exec, Argv: []string{"sh", "-c", "echo disk full >&2; exit 3"}}), "exit status 3: disk full")
	expect(t, run(t, Spec{Kind: Exec, Argv: []string{"/no/such/command"}}), "no such file")
	expect(t, run(t, Spec{Kind: Exec, Argv: []string{"sleep", "10"}, Interval: time.Second, Timeout: 100 * time.Millisecond}), "killed")
}

func expect(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("check failed: %v; want OK", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("check = %v; want an error containing %q", err, want)
	}
}
