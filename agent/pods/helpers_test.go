package pods_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/switchboard-mesh/switchboard/agent/pods"
	"github.com/switchboard-mesh/switchboard/endpoint"
	cniv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/cni/v1"
	"github.com/switchboard-mesh/switchboard/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 15 * time.Second // generous bound for anything a test waits on

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s", what, wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// shortDir is a temporary directory with a short path: a Unix socket's path must fit
// in 108 bytes, which t.TempDir's (named after the test) may not.
func shortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "sbpods")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// logBuffer captures a logger's output.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newLogger(b *logBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// serve runs a Server for store on a socket until the test ends and returns a client.
func serve(t testing.TB, store *pods.Store, o pods.ServerOptions) (cniv1.PodNetworkClient, string) {
	t.Helper()
	socket := filepath.Join(shortDir(t), "run", "cni.sock")
	srv := pods.NewServer(store, o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, socket) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(wait):
			t.Error("server did not stop")
		}
	})
	return dial(t, socket), socket
}

// dial returns a client of the socket whose calls wait for it to be served.
func dial(t testing.TB, socket string) cniv1.PodNetworkClient {
	t.Helper()
	conn, err := grpc.NewClient("unix:"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return cniv1.NewPodNetworkClient(conn)
}

func callCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

func addRequest(container, ns, name, uid string, ips ...string) *cniv1.AddRequest {
	return &cniv1.AddRequest{
		Ref:   &cniv1.AttachmentRef{Network: "k8s-pod-network", ContainerId: container, Ifname: "eth0"},
		Pod:   &cniv1.Pod{Namespace: ns, Name: name, Uid: uid},
		Netns: "/var/run/netns/" + container,
		Ips:   ips,
	}
}

func refOf(container string) *cniv1.AttachmentRef {
	return &cniv1.AttachmentRef{Network: "k8s-pod-network", ContainerId: container, Ifname: "eth0"}
}

const node = "node-a"

// podOpt changes a test pod.
type podOpt func(*corev1.Pod)

// newPod is a managed, Running, Ready pod on node with a container port "http" 8080
// and service "web".
func newPod(name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: name, UID: types.UID(name + "-uid"),
			Labels:            map[string]string{pods.KeyRegister: "true", "app": "web"},
			Annotations:       map[string]string{},
			CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Minute)),
		},
		Spec: corev1.PodSpec{
			NodeName: node,
			Containers: []corev1.Container{{Name: "main", Ports: []corev1.ContainerPort{
				{Name: "http", ContainerPort: 8080}, {ContainerPort: 9999},
			}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func withIPs(ips ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Status.PodIPs = nil
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
	}
}

func withReady(ready bool) podOpt {
	return func(p *corev1.Pod) {
		s := corev1.ConditionFalse
		if ready {
			s = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: s}}
	}
}

func withAnnotation(k, v string) podOpt {
	return func(p *corev1.Pod) { p.Annotations[k] = v }
}

func withLabel(k, v string) podOpt {
	return func(p *corev1.Pod) {
		if v == "" {
			delete(p.Labels, k)
			return
		}
		p.Labels[k] = v
	}
}

// keys lists what the registry holds, as sorted strings.
func keys(t testing.TB, r registry.Registry) []string {
	t.Helper()
	eps, err := r.List(context.Background(), endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = e.Key().String()
	}
	sort.Strings(out)
	return out
}

func key(ip string, port int) string {
	return endpoint.Key{Cluster: "prod", Service: "web", Protocol: "http", Address: ip, Port: port}.String()
}
