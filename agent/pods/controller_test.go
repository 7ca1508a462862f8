package pods_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/switchboard-mesh/switchboard/agent"
	"github.com/switchboard-mesh/switchboard/agent/manifest"
	"github.com/switchboard-mesh/switchboard/agent/pods"
	cniv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/cni/v1"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// node is a test node: the real agent publishing into the in-memory registry, a fake
// API server, and a controller that can be stopped and started again on the same
// state directory and socket, as a restarted agent would.
type testNode struct {
	t       testing.TB
	client  *fake.Clientset
	reg     *registry.Front
	agent   *agent.Agent
	dir     string
	socket  string
	cni     cniv1.PodNetworkClient
	logs    *logBuffer
	metrics *prometheus.Registry

	ctrl   *pods.Controller
	cancel context.CancelFunc
	done   chan error
}

func newTestNode(t testing.TB, objs ...*corev1.Pod) *testNode {
	t.Helper()
	n := &testNode{t: t, reg: memory.New(), dir: t.TempDir(), logs: &logBuffer{}}
	n.socket = filepath.Join(shortDir(t), "cni.sock")
	t.Cleanup(func() { n.reg.Close() })
	var initial []runtime.Object
	for _, p := range objs {
		initial = append(initial, p)
	}
	// The simple tracker: the field-managed one of NewClientset costs ~20 ms a write
	// under -race, which the soak cannot afford, and field management is no subject
	// here.
	n.client = fake.NewSimpleClientset(initial...)
	n.agent = agent.New(nil, agent.Options{Publisher: n.reg, RetryMin: 10 * time.Millisecond, Logger: newLogger(n.logs)})
	ctx, cancel := context.WithCancel(context.Background())
	agentDone := make(chan error, 1)
	go func() { agentDone <- n.agent.Run(ctx) }()
	t.Cleanup(func() {
		n.stop()
		cancel()
		select {
		case <-agentDone:
		case <-time.After(wait):
			t.Error("agent did not stop")
		}
	})
	n.cni = dial(t, n.socket)
	return n
}

// start runs a new controller (mod may change its config) and waits until it is
// ready.
func (n *testNode) start(mod func(*pods.Config)) {
	n.t.Helper()
	n.run(mod)
	eventually(n.t, "controller ready", func() bool { ok, _ := n.ctrl.Ready(); return ok })
}

// run runs a new controller (mod may change its config) without waiting for it.
func (n *testNode) run(mod func(*pods.Config)) {
	n.t.Helper()
	n.metrics = prometheus.NewPedanticRegistry()
	cfg := pods.Config{StateDir: n.dir, Socket: n.socket, NodeName: node, Cluster: "prod", Resync: 200 * time.Millisecond,
		TTL: 5 * time.Second, Client: n.client, Sink: n.agent, Logger: newLogger(n.logs), Metrics: n.metrics}
	if mod != nil {
		mod(&cfg)
	}
	ctrl, err := pods.New(cfg)
	if err != nil {
		n.t.Fatal(err)
	}
	if ok, _ := ctrl.Ready(); ok {
		n.t.Fatal("ready before Run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.ctrl, n.cancel, n.done = ctrl, cancel, make(chan error, 1)
	go func() { n.done <- ctrl.Run(ctx) }()
}

// stop stops the controller, if one runs, and waits for Run to return.
func (n *testNode) stop() {
	n.t.Helper()
	if n.cancel == nil {
		return
	}
	n.cancel()
	select {
	case err := <-n.done:
		if err != nil {
			n.t.Errorf("controller Run: %v", err)
		}
	case <-time.After(wait):
		n.t.Fatal("controller did not stop")
	}
	n.cancel = nil
}

func (n *testNode) create(p *corev1.Pod) {
	n.t.Helper()
	if _, err := n.client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		n.t.Fatal(err)
	}
}

// update changes the pod as the API server has it.
func (n *testNode) update(name string, opts ...podOpt) {
	n.t.Helper()
	pc := n.client.CoreV1().Pods("default")
	p, err := pc.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	p = p.DeepCopy()
	for _, o := range opts {
		o(p)
	}
	if _, err := pc.Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		n.t.Fatal(err)
	}
}

func (n *testNode) remove(name string) {
	n.t.Helper()
	if err := n.client.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		n.t.Fatal(err)
	}
}

func (n *testNode) add(container string, p *corev1.Pod, ips ...string) {
	n.t.Helper()
	if _, err := n.cni.Add(callCtx(n.t), addRequest(container, p.Namespace, p.Name, string(p.UID), ips...)); err != nil {
		n.t.Fatalf("CNI ADD: %v", err)
	}
}

// registered waits until the registry holds exactly want.
func (n *testNode) registered(what string, want ...string) {
	n.t.Helper()
	if want == nil {
		want = []string{}
	}
	var got []string
	deadline := time.Now().Add(wait)
	for {
		got = keys(n.t, n.reg)
		if reflect.DeepEqual(got, want) {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("%s: registry holds %v, want %v", what, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reason waits until the agent reports the pods' entry for k with the gate's reason.
func (n *testNode) reason(k, want string) {
	n.t.Helper()
	eventually(n.t, "entry "+k+" reports "+want, func() bool {
		for _, s := range n.agent.Status() {
			if s.Key.String() == k {
				return s.Source == pods.SourceName && s.Reason == want
			}
		}
		return false
	})
}

func (n *testNode) recordFiles() int {
	files, _ := filepath.Glob(filepath.Join(n.dir, "*.json"))
	return len(files)
}

// A pod's entries are held until it is Ready, published while it is, held again when
// it is not, and removed when a label change unmanages it.
func TestControllerFollowsReadiness(t *testing.T) {
	n := newTestNode(t)
	n.start(nil)
	p := newPod("web-1", withReady(false))
	n.create(p)
	n.add("c1", p, "10.0.0.1")
	n.reason(key("10.0.0.1", 8080), pods.HeldNotReady)
	n.registered("not Ready")

	n.update("web-1", withReady(true))
	n.registered("Ready", key("10.0.0.1", 8080))
	n.update("web-1", withReady(false))
	n.registered("not Ready again")
	n.update("web-1", withReady(true))
	n.registered("Ready again", key("10.0.0.1", 8080))

	n.update("web-1", withLabel(pods.KeyRegister, ""))
	n.registered("unmanaged")
	eventually(t, "entry gone from the agent", func() bool { return len(n.agent.Status()) == 0 })
}

// A pod deleted without a CNI DEL: its entries go with the informer's delete event,
// its record once it is older than a resync period.
func TestControllerPodDeletedWithoutDel(t *testing.T) {
	n := newTestNode(t)
	n.start(nil)
	p := newPod("web-1")
	n.create(p)
	n.add("c1", p, "10.0.0.1")
	n.registered("Ready pod", key("10.0.0.1", 8080))
	n.remove("web-1")
	n.registered("pod deleted")
	eventually(t, "record of the gone pod deleted and counted", func() bool {
		return n.recordFiles() == 0 && value(t, n.metrics, "switchboard_agent_pod_reconcile_corrections_total", "reason", "pod_gone") == 1
	})
}

// Pods that were there before the agent started (their ADD came while it was down)
// are registered from their status; pods of other nodes are not.
func TestControllerRegistersPodsFromBeforeStart(t *testing.T) {
	other := newPod("elsewhere", withIPs("10.9.0.1"))
	other.Spec.NodeName = "node-b"
	n := newTestNode(t, newPod("web-1", withIPs("10.0.0.1")), newPod("web-2", withIPs("10.0.0.2"), withReady(false)), other)
	n.start(nil)
	n.registered("pods from before", key("10.0.0.1", 8080))
	n.reason(key("10.0.0.2", 8080), pods.HeldNotReady)
	if v := value(t, n.metrics, "switchboard_agent_pod_reconcile_corrections_total", "reason", "no_record"); v != 2 {
		t.Fatalf("no_record corrections %v, want 2", v)
	}
	if v := value(t, n.metrics, "switchboard_agent_pods_managed"); v != 2 {
		t.Fatalf("pods managed %v, want 2", v)
	}
}

// A record whose pod is gone is deleted once older than a resync period; a newer one
// waits for the informer to catch up.
func TestControllerDeletesRecordsOfGonePods(t *testing.T) {
	n := newTestNode(t, newPod("live", withIPs("10.0.0.3")))
	store, _, _ := openStore(t, n.dir)
	old := record("old", "gone", "10.0.0.1")
	old.Created = time.Now().Add(-time.Hour)
	fresh := record("fresh", "not-yet-seen", "10.0.0.2")
	fresh.Created = time.Now()
	live := record("live", "live", "10.0.0.3")
	for _, r := range []pods.Record{old, fresh, live} {
		if err := store.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	n.start(func(c *pods.Config) { c.Resync = time.Minute })
	eventually(t, "the old record deleted and logged", func() bool {
		return n.recordFiles() == 2 && strings.Contains(n.logs.String(), "record of a gone pod deleted")
	})
	n.registered("live pod registered from its record", key("10.0.0.3", 8080))
	names := map[string]bool{}
	for _, r := range readRecords(t, n.dir) {
		names[r.Pod.Name] = true
	}
	if !names["not-yet-seen"] || !names["live"] || names["gone"] {
		t.Fatalf("records left %v; want the fresh and the live pod's", names)
	}
	if v := value(t, n.metrics, "switchboard_agent_pod_reconcile_corrections_total", "reason", "no_record"); v != 0 {
		t.Fatalf("a pod with a record counted as no_record")
	}
}

// Without an API client the controller records attachments and registers nothing.
func TestControllerWithoutClient(t *testing.T) {
	n := newTestNode(t)
	var sink recordingSink
	n.start(func(c *pods.Config) { c.Client, c.Sink = nil, &sink })
	p := newPod("web-1")
	n.add("c1", p, "10.0.0.1")
	if n.recordFiles() != 1 {
		t.Fatal("ADD not recorded")
	}
	n.stop()
	if sink.calls() != 0 {
		t.Fatalf("SetSource called %d times without an API client", sink.calls())
	}
	if strings.Count(n.logs.String(), "no Kubernetes API client") != 1 {
		t.Fatalf("want one WARN about the missing client:\n%s", n.logs.String())
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	good := pods.Config{StateDir: "/x", Socket: "/y", NodeName: node, Cluster: "prod", Sink: &recordingSink{}}
	for _, tc := range []struct {
		name string
		mod  func(*pods.Config)
		want string
	}{
		{"no state dir", func(c *pods.Config) { c.StateDir = "" }, "state directory"},
		{"no socket", func(c *pods.Config) { c.Socket = "" }, "socket"},
		{"no node", func(c *pods.Config) { c.NodeName = "" }, "node name"},
		{"no sink", func(c *pods.Config) { c.Sink = nil }, "sink"},
		{"bad cluster", func(c *pods.Config) { c.Cluster = "a.b" }, "cluster"},
		{"bad node", func(c *pods.Config) { c.NodeName = "a b" }, "node"},
		{"bad ttl", func(c *pods.Config) { c.TTL = time.Millisecond }, "ttl"},
		{"negative resync", func(c *pods.Config) { c.Resync = -time.Second }, "resync"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.mod(&cfg)
			if _, err := pods.New(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error about %s", err, tc.want)
			}
		})
	}
	if _, err := pods.New(good); err != nil {
		t.Fatalf("New(good) = %v", err)
	}
}

// recordingSink counts SetSource calls and keeps the last entries.
type recordingSink struct {
	mu   sync.Mutex
	n    int
	last []manifest.Entry
}

func (s *recordingSink) SetSource(_ string, es []manifest.Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	s.last = es
}

func (s *recordingSink) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// entries is what the sink was last given: key, then " held: why" when held.
func (s *recordingSink) entries() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []string{}
	for _, e := range s.last {
		k := e.Endpoint.Key().String()
		if e.Held != "" {
			k += " held: " + e.Held
		}
		if !e.KeepOnShutdown {
			k += " not KeepOnShutdown"
		}
		out = append(out, k)
	}
	return out
}

// gives waits until the sink was last given want (as entries lists them).
func (s *recordingSink) gives(t testing.TB, what string, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	deadline := time.Now().Add(wait)
	for {
		got := s.entries()
		if reflect.DeepEqual(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the sink was given %v, want %v", what, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readRecords decodes the record files in dir without opening a Store, which would
// clean up the temporary files of a running controller's writes.
func readRecords(t testing.TB, dir string) []pods.Record {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	var out []pods.Record
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r, err := pods.DecodeRecord(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, r)
	}
	return out
}

// A static pod's runtime sends the kubelet's config hash as K8S_POD_UID: the mirror
// pod the API shows carries it in its kubernetes.io/config.mirror annotation, under a
// UID of its own. The record is the pod's: its address is registered, a resync does
// not delete it as a gone pod's, and CHECK finds it.
func TestControllerStaticPodOwnsItsRecord(t *testing.T) {
	mirror := newPod("etcd-node-a", withAnnotation(corev1.MirrorPodAnnotationKey, "6f1c0e5d2a"))
	n := newTestNode(t, mirror)
	store, _, _ := openStore(t, n.dir)
	rec := record("c1", "etcd-node-a", "10.0.0.7")
	rec.Ref.Network = "k8s-pod-network"
	rec.Pod.UID = "6f1c0e5d2a"
	rec.Created = time.Now().Add(-time.Hour) // older than a resync: a gone pod's would be deleted
	if err := store.Put(rec); err != nil {
		t.Fatal(err)
	}
	n.start(nil)
	// The step that publishes the record's address has also collected gone pods' records.
	n.registered("the static pod, from its record", key("10.0.0.7", 8080))
	if got := n.recordFiles(); got != 1 {
		t.Fatalf("%d record files, want the static pod's", got)
	}
	if _, err := n.cni.Check(callCtx(t), &cniv1.CheckRequest{Ref: refOf("c1"), Ips: []string{"10.0.0.7"}}); err != nil {
		t.Fatalf("CHECK of the static pod = %v", err)
	}
	if v := value(t, n.metrics, "switchboard_agent_pod_reconcile_corrections_total", "reason", "pod_gone"); v != 0 {
		t.Fatalf("pod_gone corrections %v, want 0", v)
	}
}
