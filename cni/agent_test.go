package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	cniv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/cni/v1"
	"github.com/switchboard-mesh/switchboard/internal/grpcstop"
)

// fakeAgent is a PodNetwork server that records its calls and answers each method
// with the error set for it (nil: success). hang makes a method wait for the
// caller's deadline instead.
type fakeAgent struct {
	cniv1.UnimplementedPodNetworkServer
	mu    sync.Mutex
	calls []proto.Message
	errs  map[string]error
	hang  map[string]bool
}

func (a *fakeAgent) answer(ctx context.Context, method string, req proto.Message) error {
	a.mu.Lock()
	a.calls = append(a.calls, proto.Clone(req))
	err, hang := a.errs[method], a.hang[method]
	a.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return err
}

func (a *fakeAgent) Add(ctx context.Context, r *cniv1.AddRequest) (*cniv1.AddResponse, error) {
	return &cniv1.AddResponse{}, a.answer(ctx, "Add", r)
}

func (a *fakeAgent) Del(ctx context.Context, r *cniv1.DelRequest) (*cniv1.DelResponse, error) {
	return &cniv1.DelResponse{}, a.answer(ctx, "Del", r)
}

func (a *fakeAgent) Check(ctx context.Context, r *cniv1.CheckRequest) (*cniv1.CheckResponse, error) {
	return &cniv1.CheckResponse{}, a.answer(ctx, "Check", r)
}

func (a *fakeAgent) GC(ctx context.Context, r *cniv1.GCRequest) (*cniv1.GCResponse, error) {
	return &cniv1.GCResponse{}, a.answer(ctx, "GC", r)
}

func (a *fakeAgent) Status(ctx context.Context, r *cniv1.StatusRequest) (*cniv1.StatusResponse, error) {
	return &cniv1.StatusResponse{}, a.answer(ctx, "Status", r)
}

func (a *fakeAgent) setErr(method string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.errs[method] = err
}

func (a *fakeAgent) setHang(method string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.hang[method] = true
}

func (a *fakeAgent) recorded() []proto.Message {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]proto.Message(nil), a.calls...)
}

// startAgent serves a fakeAgent on a fresh Unix socket, stopped when the test ends.
func startAgent(t *testing.T) (*fakeAgent, string) {
	t.Helper()
	sock := filepath.Join(shortTempDir(t), "cni.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	a := &fakeAgent{errs: map[string]error{}, hang: map[string]bool{}}
	srv := grpc.NewServer()
	cniv1.RegisterPodNetworkServer(srv, a)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		grpcstop.Stop(srv, 5*time.Second)
		<-done
	})
	return a, sock
}

// shortTempDir is a temporary directory with a path short enough for a Unix socket
// (t.TempDir's can pass the 107 bytes a socket path may have).
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sbcni")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// missingSocket is a socket path nobody listens on.
func missingSocket(t *testing.T) string {
	return filepath.Join(shortTempDir(t), "gone.sock")
}

const (
	podCNIArgs  = "IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=c0ffee;K8S_POD_UID=uid-1"
	containerID = "c0ffee"
	netnsPath   = "/var/run/netns/cni-1"
)

// prevResult is what a main plugin such as bridge returns: the pod's eth0 with an
// IPv4 and an IPv6 address, and the bridge's own address on a host interface.
const prevResult = `{"cniVersion":"1.1.0",
 "interfaces":[{"name":"cni0","mac":"0a:58:0a:01:00:01"},{"name":"veth1234","mac":"aa:bb:cc:dd:ee:ff"},
   {"name":"eth0","mac":"0a:58:0a:01:00:05","mtu":1450,"sandbox":"/var/run/netns/cni-1"}],
 "ips":[{"address":"10.1.0.5/24","gateway":"10.1.0.1","interface":2},{"address":"fd00::5/64","interface":2},
   {"address":"10.1.0.1/24","interface":0}],
 "routes":[{"dst":"0.0.0.0/0","gw":"10.1.0.1"}],
 "dns":{"nameservers":["10.96.0.10"],"search":["default.svc.cluster.local"]}}`

// chained is the configuration of the plugin chained after one that returned prev.
func chained(t *testing.T, sock string, prev string, kv map[string]any) []byte {
	t.Helper()
	m := map[string]any{"agentSocket": sock}
	if prev != "" {
		m["prevResult"] = json.RawMessage(prev)
	}
	for k, v := range kv {
		m[k] = v
	}
	return netConf(t, m)
}

// runCmd runs one CNI command of a Plugin with the real gRPC dialer, as skel would
// after its own checks. Every error a command returns must be a *types.Error: skel
// turns anything else into code 999.
func runCmd(t *testing.T, cmd string, conf []byte, cniArgs string) (string, *types.Error) {
	t.Helper()
	var out bytes.Buffer
	p := &Plugin{Stdout: &out, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}
	run := map[string]func(*skel.CmdArgs) error{"ADD": p.Add, "DEL": p.Del, "CHECK": p.Check, "GC": p.GC, "STATUS": p.Status}[cmd]
	if run == nil {
		t.Fatalf("no command %s", cmd)
	}
	err := run(&skel.CmdArgs{
		ContainerID: containerID, Netns: netnsPath, IfName: "eth0",
		Args: cniArgs, Path: "/opt/cni/bin", StdinData: conf,
	})
	if err == nil {
		return out.String(), nil
	}
	e, ok := err.(*types.Error)
	if !ok {
		t.Fatalf("%s failed with %T %v, not a *types.Error", cmd, err, err)
	}
	return out.String(), e
}

// sameJSON fails unless a and b are the same JSON value.
func sameJSON(t *testing.T, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if !bytes.Equal(gb, wb) {
		t.Fatalf("output differs:\n got %s\nwant %s", gb, wb)
	}
}

func wantCode(t *testing.T, e *types.Error, code uint) {
	t.Helper()
	if e == nil {
		t.Fatalf("succeeded, want error code %d", code)
	}
	if e.Code != code {
		t.Fatalf("error code %d (%v), want %d", e.Code, e, code)
	}
}

func wantOK(t *testing.T, e *types.Error) {
	t.Helper()
	if e != nil {
		t.Fatalf("failed with code %d: %v", e.Code, e)
	}
}
