package pods_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/agent/pods"
	cniv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/cni/v1"
)

type testServer struct {
	client  cniv1.PodNetworkClient
	store   *pods.Store
	reg     *prometheus.Registry
	nudges  *atomic.Int64
	socket  string
	dataDir string
}

func newTestServer(t *testing.T) *testServer {
	t.Helper()
	ts := &testServer{dataDir: t.TempDir(), nudges: &atomic.Int64{}, reg: prometheus.NewPedanticRegistry()}
	ts.store, _, _ = openStore(t, ts.dataDir)
	m, err := pods.NewMetrics(ts.reg) // the server's series, apart from the store's
	if err != nil {
		t.Fatal(err)
	}
	ts.client, ts.socket = serve(t, ts.store, pods.ServerOptions{Nudge: func() { ts.nudges.Add(1) }, Metrics: m})
	return ts
}

// An invalid ADD is refused with InvalidArgument naming the field, and nothing is
// recorded.
func TestAddRefusesInvalidRequests(t *testing.T) {
	ts := newTestServer(t)
	for _, tc := range []struct {
		name  string
		req   *cniv1.AddRequest
		field string
	}{
		{"no ips", addRequest("c1", "default", "web-1", "u1"), "ips"},
		{"empty ip", addRequest("c1", "default", "web-1", "u1", ""), "ips[0]"},
		{"bad ip", addRequest("c1", "default", "web-1", "u1", "10.0.0.1", "10.0.0.300"), "ips[1]"},
		{"ip with prefix", addRequest("c1", "default", "web-1", "u1", "10.0.0.1/24"), "ips[0]"},
		{"ip with zone", addRequest("c1", "default", "web-1", "u1", "fe80::1%eth0"), "ips[0]"},
		{"missing pod name", addRequest("c1", "default", "", "u1", "10.0.0.1"), "pod.name"},
		{"invalid pod name", addRequest("c1", "default", "Web_1", "u1", "10.0.0.1"), "pod.name"},
		{"missing namespace", addRequest("c1", "", "web-1", "u1", "10.0.0.1"), "pod.namespace"},
		{"invalid namespace", addRequest("c1", "a.b", "web-1", "u1", "10.0.0.1"), "pod.namespace"},
		{"missing container id", addRequest("", "default", "web-1", "u1", "10.0.0.1"), "ref.container_id"},
		{"no pod", &cniv1.AddRequest{Ref: refOf("c1"), Ips: []string{"10.0.0.1"}}, "pod.namespace"},
		{"no ref", &cniv1.AddRequest{Pod: &cniv1.Pod{Namespace: "default", Name: "web-1"}, Ips: []string{"10.0.0.1"}}, "ref.network"},
		{"control character", addRequest("c1\n", "default", "web-1", "u1", "10.0.0.1"), "ref.container_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ts.client.Add(callCtx(t), tc.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.field) {
				t.Fatalf("Add = %v; want InvalidArgument naming %s", err, tc.field)
			}
			if n := ts.store.Len(); n != 0 {
				t.Fatalf("an invalid ADD recorded %d attachments", n)
			}
		})
	}
	if n := value(t, ts.reg, "switchboard_agent_cni_invalid_requests_total", "method", "add"); n != 13 {
		t.Fatalf("invalid requests counted %v, want 13", n)
	}
	if ts.nudges.Load() != 0 {
		t.Fatal("an invalid ADD nudged the reconciler")
	}
}

// ADD records durably (a new store on the directory finds it), CHECK compares the
// addresses as a set.
func TestAddThenCheck(t *testing.T) {
	ts := newTestServer(t)
	ctx := callCtx(t)
	if _, err := ts.client.Add(ctx, addRequest("c1", "default", "web-1", "u1", "10.0.0.1", "FD00::0001")); err != nil {
		t.Fatal(err)
	}
	if ts.nudges.Load() != 1 {
		t.Fatalf("nudged %d times, want 1", ts.nudges.Load())
	}
	again, _, _ := openStore(t, ts.dataDir)
	recs := again.List()
	if len(recs) != 1 || !reflect.DeepEqual(recs[0].IPs, []string{"10.0.0.1", "fd00::1"}) || recs[0].Pod.UID != "u1" {
		t.Fatalf("on disk: %+v; want the pod with canonical addresses", recs)
	}
	for _, tc := range []struct {
		name string
		req  *cniv1.CheckRequest
		want codes.Code
	}{
		{"same", &cniv1.CheckRequest{Ref: refOf("c1"), Ips: []string{"10.0.0.1", "fd00::1"}}, codes.OK},
		{"same, other order and spelling", &cniv1.CheckRequest{Ref: refOf("c1"), Ips: []string{"fd00:0::1", "10.0.0.1"}}, codes.OK},
		{"other addresses", &cniv1.CheckRequest{Ref: refOf("c1"), Ips: []string{"10.0.0.2"}}, codes.FailedPrecondition},
		{"one address missing", &cniv1.CheckRequest{Ref: refOf("c1"), Ips: []string{"10.0.0.1"}}, codes.FailedPrecondition},
		{"not recorded", &cniv1.CheckRequest{Ref: refOf("c2"), Ips: []string{"10.0.0.1"}}, codes.NotFound},
		{"bad address", &cniv1.CheckRequest{Ref: refOf("c1"), Ips: []string{"x"}}, codes.InvalidArgument},
		{"no ref", &cniv1.CheckRequest{Ips: []string{"10.0.0.1"}}, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ts.client.Check(ctx, tc.req); status.Code(err) != tc.want {
				t.Fatalf("Check = %v, want %s", err, tc.want)
			}
		})
	}
	if n := value(t, ts.reg, "switchboard_agent_cni_request_duration_seconds", "method", "add", "result", "OK"); n != 1 {
		t.Fatalf("add latency observed %v times, want 1", n)
	}
}

// DEL of an attachment that is not recorded (a second DEL) succeeds with found=false.
func TestDelTwice(t *testing.T) {
	ts := newTestServer(t)
	ctx := callCtx(t)
	if _, err := ts.client.Add(ctx, addRequest("c1", "default", "web-1", "u1", "10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		resp, err := ts.client.Del(ctx, &cniv1.DelRequest{Ref: refOf("c1"), Pod: &cniv1.Pod{Namespace: "default", Name: "web-1"}})
		if err != nil || resp.GetFound() != want {
			t.Fatalf("DEL #%d = %v, %v; want found=%v", i+1, resp, err, want)
		}
	}
	if ts.store.Len() != 0 {
		t.Fatal("record still there after DEL")
	}
	again, _, _ := openStore(t, ts.dataDir)
	if again.Len() != 0 {
		t.Fatal("DEL did not reach the disk")
	}
	if _, err := ts.client.Del(ctx, &cniv1.DelRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("DEL without a ref = %v, want InvalidArgument", err)
	}
}

// GC forgets the attachments of its network that the runtime no longer lists.
func TestGCRemovesStaleAttachments(t *testing.T) {
	ts := newTestServer(t)
	ctx := callCtx(t)
	for i, c := range []string{"live", "stale1", "stale2"} {
		if _, err := ts.client.Add(ctx, addRequest(c, "default", "web-"+c, "", "10.0.0."+string(rune('1'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	other := addRequest("elsewhere", "default", "web-x", "", "10.0.1.1")
	other.Ref.Network = "other"
	if _, err := ts.client.Add(ctx, other); err != nil {
		t.Fatal(err)
	}
	resp, err := ts.client.GC(ctx, &cniv1.GCRequest{Network: "k8s-pod-network", Valid: []*cniv1.AttachmentRef{refOf("live")}})
	if err != nil || resp.GetRemoved() != 2 {
		t.Fatalf("GC = %v, %v; want 2 removed", resp, err)
	}
	var left []string
	for _, r := range ts.store.List() {
		left = append(left, r.Ref.ContainerID)
	}
	if !reflect.DeepEqual(left, []string{"live", "elsewhere"}) {
		t.Fatalf("left after GC: %v", left)
	}
	if _, err := ts.client.GC(ctx, &cniv1.GCRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("GC without a network = %v, want InvalidArgument", err)
	}
}

func TestStatus(t *testing.T) {
	ts := newTestServer(t)
	if _, err := ts.client.Status(callCtx(t), &cniv1.StatusRequest{}); err != nil {
		t.Fatalf("Status = %v", err)
	}
	if err := os.RemoveAll(ts.dataDir); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.client.Status(callCtx(t), &cniv1.StatusRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("Status without a state directory = %v, want Unavailable", err)
	}
}

// The socket is 0660, a stale one left by a killed agent is replaced, anything else at
// the path is refused, and the socket is removed when the server stops.
func TestServeSocketFile(t *testing.T) {
	store, _, _ := openStore(t, t.TempDir())
	dir := shortDir(t)

	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false) // as if the agent was SIGKILLed
	ln.Close()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pods.NewServer(store, pods.ServerOptions{}).Serve(ctx, stale) }()
	client := dial(t, stale)
	if _, err := client.Status(callCtx(t), &cniv1.StatusRequest{}); err != nil {
		t.Fatalf("Status on a replaced stale socket = %v", err)
	}
	fi, err := os.Stat(stale)
	if err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode %v (%v), want 0660", fi.Mode().Perm(), err)
	}
	// A second server on a socket that is served refuses to take it over.
	if err := pods.NewServer(store, pods.ServerOptions{}).Serve(context.Background(), stale); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("Serve on a live socket = %v, want a refusal", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve = %v", err)
		}
	case <-time.After(wait):
		t.Fatal("server did not stop")
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("socket left behind after stop: %v", err)
	}

	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := pods.NewServer(store, pods.ServerOptions{}).Serve(context.Background(), file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Serve over a regular file = %v, want a refusal", err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("the regular file was touched: %v", err)
	}
}

// The plugin gives up on an ADD whose write outlasts its timeout (its deadline
// reaches the server's context) and, under "allow", the pod starts anyway: the
// attachment is withdrawn, so that a DEL that overtook it does not leave a record
// behind, and the ADD answers with the context's error. The reconciler registers the
// pod from status.podIPs.
func TestAddWithdrawnWhenItsCallerGivesUpDuringTheWrite(t *testing.T) {
	dir := t.TempDir()
	store, _, _ := openStore(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	pods.SetFileSync(store, func(f *os.File) error { // a slow disk: the fsync outlasts the deadline
		select {
		case <-ctx.Done():
		case <-time.After(wait):
			t.Error("the ADD's deadline did not pass")
		}
		return f.Sync()
	})
	var nudges atomic.Int64
	srv := pods.NewServer(store, pods.ServerOptions{Nudge: func() { nudges.Add(1) }})
	_, err := srv.Add(ctx, addRequest("c1", "default", "web-1", "u1", "10.0.0.1"))
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Add = %v, want DeadlineExceeded", err)
	}
	if n := store.Len(); n != 0 {
		t.Fatalf("%d attachments recorded by an ADD whose caller gave up", n)
	}
	if again, _, _ := openStore(t, dir); again.Len() != 0 {
		t.Fatal("the withdrawn attachment is still on disk")
	}
}

// A DEL that reaches the store before the pending write of an ADD whose caller gave
// up finds nothing; the ADD must not record the attachment after it.
func TestDelOvertakingAGivenUpAddLeavesNoRecord(t *testing.T) {
	ts := newTestServer(t)
	srv := pods.NewServer(ts.store, pods.ServerOptions{})
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond)) // the plugin's timeout passed
	defer cancel()
	resp, err := ts.client.Del(callCtx(t), &cniv1.DelRequest{Ref: refOf("c1"), Pod: &cniv1.Pod{Namespace: "default", Name: "web-1"}})
	if err != nil || resp.GetFound() {
		t.Fatalf("DEL = %v, %v; want found=false", resp, err)
	}
	if _, err := srv.Add(ctx, addRequest("c1", "default", "web-1", "u1", "10.0.0.1")); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Add = %v, want DeadlineExceeded", err)
	}
	if n := ts.store.Len(); n != 0 {
		t.Fatalf("the ADD recorded the attachment after its DEL: %d records", n)
	}
}
