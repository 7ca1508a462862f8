package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/internal/cnitest"
	"github.com/switchboard-mesh/switchboard/internal/kubetest"
)

// podsWait bounds every wait of the pod tests: registration goes through the agent's
// informer, its publish loop and the registrar, each well under a second here.
const podsWait = 30 * time.Second

// The whole write path as a Kubernetes node runs it: the container runtime's libcni
// runs bridge, host-local and switchboard cni in real network namespaces; the plugin
// hands each pod to a running agent process, which reads the pods from a real
// kube-apiserver and registers them through a registrar process, where a watcher sees
// them come and go. The agent is stopped, SIGKILLed and restarted on the way.
func TestKubePodsRegisterThroughCNI(t *testing.T) {
	cnitest.Require(t)
	kube := kubetest.Start(t)
	reg := startRegistrar(t)
	if reg.addr == "" {
		t.Fatalf("registrar did not start: %s", reg.stderr.String())
	}
	w := watchRegistrar(t, reg.addr)
	dir := t.TempDir()
	ag := &cniAgent{t: t, args: []string{"agent",
		"--cni-socket", filepath.Join(dir, "run", "cni.sock"), "--cni-state-dir", filepath.Join(dir, "state"),
		"--kubeconfig", kube.Kubeconfig(t), "--node-name", "node-1", "--pod-cluster", "east",
		"--pod-resync", "1s", "--pod-ttl", "10s", "--metrics-listen", "127.0.0.1:" + freePort(t),
		"--registry-backend", "registrar", "--registrar-address", reg.addr}}
	ag.start()
	plugin := cnitest.Plugin{Type: "switchboard", Binary: binary(t), Config: map[string]any{"agentSocket": filepath.Join(dir, "run", "cni.sock")}}
	chain := cnitest.NewChain(t, "1.0.0", plugin)
	k := &kubePods{t: t, c: kube.Clientset, ns: "shop"}
	k.namespace()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Log("ADD, then Ready: both named ports registered, owned by the node; DEL removes them")
	web := k.pod("web-0")
	sandbox := cnitest.NewPod(t, k.ns, "web-0", string(web.UID))
	ip := add(ctx, t, chain, sandbox)
	if err := chain.Check(ctx, sandbox); err != nil {
		t.Fatalf("CHECK after ADD: %v", err)
	}
	k.ready("web-0", "") // no podIPs: the address comes from the CNI ADD the agent recorded
	w.waitFor(t, "web-0 registered", ip+":8080/http", ip+":9090/grpc")
	if n := w.node(ip + ":8080/http"); n != "node-1" {
		t.Fatalf("owner node %q, want node-1", n)
	}
	del(ctx, t, chain, sandbox)
	w.waitGone(t, "web-0 unregistered after DEL", ip+":8080/http", ip+":9090/grpc")
	del(ctx, t, chain, sandbox) // DEL is idempotent

	t.Log("ADD while the agent is down: the pod starts; the agent registers it from the API when it is back")
	ag.stop(syscall.SIGTERM)
	k.pod("web-1")
	down := cnitest.NewPod(t, k.ns, "web-1", "")
	ip1 := add(ctx, t, chain, down)
	k.ready("web-1", ip1)
	ag.start()
	w.waitFor(t, "web-1 registered after the agent came back", ip1+":8080/http")

	t.Log("agent SIGKILLed between ADD and registration: the record survives, the restarted agent registers")
	k.pod("web-2")
	killed := cnitest.NewPod(t, k.ns, "web-2", "")
	ip2 := add(ctx, t, chain, killed) // not Ready yet: recorded, held
	ag.stop(syscall.SIGKILL)
	k.ready("web-2", "")
	ag.start()
	w.waitFor(t, "web-2 registered from its record", ip2+":8080/http")
	del(ctx, t, chain, killed) // DEL after the restart
	w.waitGone(t, "web-2 unregistered by a DEL after the restart", ip2+":8080/http")

	t.Log("a pod deleted without DEL is unregistered within a resync")
	k.delete("web-1")
	w.waitGone(t, "web-1 gone with its pod", ip1+":8080/http")

	t.Log("a lost attachment is cleaned up by CNI GC (CNI 1.1 chain)")
	gc := cnitest.NewChain(t, "1.1.0", plugin)
	if err := gc.Status(ctx); err != nil {
		t.Fatalf("STATUS with the agent up: %v", err)
	}
	k.pod("web-3")
	old := cnitest.NewPod(t, k.ns, "web-3", "")
	ipOld := add(ctx, t, gc, old)
	k.ready("web-3", "")
	w.waitFor(t, "web-3 registered", ipOld+":8080/http")
	renewed := cnitest.NewPod(t, k.ns, "web-3", "") // the sandbox is recreated: a new attachment
	ipNew := add(ctx, t, gc, renewed)
	w.waitFor(t, "web-3's new address registered", ipNew+":8080/http")
	gc.Forget(t, old) // the runtime lost the old attachment: no DEL will come for it
	if err := gc.GC(ctx, renewed); err != nil {
		t.Fatalf("GC: %v", err)
	}
	w.waitGone(t, "the lost attachment's address removed by GC", ipOld+":8080/http")
	w.waitFor(t, "the live attachment kept", ipNew+":8080/http")
}

func add(ctx context.Context, t *testing.T, c *cnitest.Chain, p *cnitest.Pod) string {
	t.Helper()
	ips, _, err := c.Add(ctx, p)
	if err != nil {
		t.Fatalf("ADD %s/%s: %v", p.Namespace, p.Name, err)
	}
	if len(ips) != 1 {
		t.Fatalf("ADD %s gave %v, want one address", p.Name, ips)
	}
	return ips[0].String()
}

func del(ctx context.Context, t *testing.T, c *cnitest.Chain, p *cnitest.Pod) {
	t.Helper()
	if err := c.Del(ctx, p); err != nil {
		t.Fatalf("DEL %s/%s: %v", p.Namespace, p.Name, err)
	}
}

// kubePods writes pods as the API server's clients (the scheduler, the kubelet)
// would: there is no kubelet here, so the test sets their status.
type kubePods struct {
	t  *testing.T
	c  kubernetes.Interface
	ns string
}

func (k *kubePods) namespace() {
	_, err := k.c.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: k.ns}}, metav1.CreateOptions{})
	if err != nil {
		k.t.Fatal(err)
	}
}

// pod creates a managed pod of service web on node-1, with two named ports.
func (k *kubePods) pod(name string) *corev1.Pod {
	k.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"switchboard.dev/register": "true", "app": "web"}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "web:1",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "grpc-api", ContainerPort: 9090}}}}},
	}
	out, err := k.c.CoreV1().Pods(k.ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		k.t.Fatal(err)
	}
	return out
}

// ready marks the pod Running and Ready, with podIP when it is not empty.
func (k *kubePods) ready(name, podIP string) {
	k.t.Helper()
	ctx := context.Background()
	p, err := k.c.CoreV1().Pods(k.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		k.t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if podIP != "" {
		p.Status.PodIP, p.Status.PodIPs = podIP, []corev1.PodIP{{IP: podIP}}
	}
	if _, err := k.c.CoreV1().Pods(k.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		k.t.Fatal(err)
	}
}

func (k *kubePods) delete(name string) {
	k.t.Helper()
	zero := int64(0)
	if err := k.c.CoreV1().Pods(k.ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		k.t.Fatal(err)
	}
}

// cniAgent runs the agent binary, which the test stops, kills and starts again.
type cniAgent struct {
	t    *testing.T
	args []string
	p    *childProc
}

// start runs the agent and waits for its /readyz: its records loaded and the
// node's pods listed from the API server.
func (a *cniAgent) start() {
	a.t.Helper()
	a.p = startProc(a.t, "agent", nil, a.args...)
	a.p.waitReady(a.args[indexOf(a.args, "--metrics-listen")+1])
}

func (a *cniAgent) stop(sig syscall.Signal) { a.p.stop(sig) }

func indexOf(args []string, flag string) int {
	for i, a := range args {
		if a == flag {
			return i
		}
	}
	panic("no " + flag)
}

// registrarWatch holds what a WatchEndpoints stream on the registrar says is
// registered, keyed address:port/protocol, with each entry's node.
type registrarWatch struct {
	mu      sync.Mutex
	entries map[string]string
	err     error
}

func watchRegistrar(t *testing.T, addr string) *registrarWatch {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := registrarv1.NewRegistrarClient(conn).WatchEndpoints(ctx, &registrarv1.WatchEndpointsRequest{ClusterName: "east", NodeName: "test-watcher"})
	if err != nil {
		t.Fatal(err)
	}
	w := &registrarWatch{entries: map[string]string{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev, err := stream.Recv()
			if err != nil {
				w.mu.Lock()
				w.err = err
				w.mu.Unlock()
				return
			}
			w.apply(ev)
		}
	}()
	t.Cleanup(func() { cancel(); <-done; conn.Close() })
	return w
}

func (w *registrarWatch) apply(ev *registrarv1.EndpointEvent) {
	e := ev.GetEndpoint()
	if e == nil {
		return
	}
	key := fmt.Sprintf("%s:%d/%s", e.GetAddress(), e.GetPort(), e.GetProtocol())
	w.mu.Lock()
	defer w.mu.Unlock()
	if ev.GetType() == registrarv1.EndpointEvent_ENDPOINT_REMOVED {
		delete(w.entries, key)
		return
	}
	w.entries[key] = e.GetNode()
}

func (w *registrarWatch) node(key string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.entries[key]
}

func (w *registrarWatch) waitFor(t *testing.T, what string, keys ...string) {
	t.Helper()
	w.wait(t, what, func() bool {
		for _, k := range keys {
			if _, ok := w.entries[k]; !ok {
				return false
			}
		}
		return true
	})
}

func (w *registrarWatch) waitGone(t *testing.T, what string, keys ...string) {
	t.Helper()
	w.wait(t, what, func() bool {
		for _, k := range keys {
			if _, ok := w.entries[k]; ok {
				return false
			}
		}
		return true
	})
}

func (w *registrarWatch) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(podsWait)
	for {
		w.mu.Lock()
		ok, err := cond(), w.err
		held := fmt.Sprint(w.entries)
		w.mu.Unlock()
		switch {
		case ok:
			return
		case err != nil && !errors.Is(err, context.Canceled):
			t.Fatalf("%s: the watch ended: %v", what, err)
		case time.Now().After(deadline):
			t.Fatalf("%s: not after %s; the watcher holds %s", what, podsWait, held)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The plugin and a running agent process through the real CNI chain, with no
// Kubernetes API (the whole registration path is TestKubePodsRegisterThroughCNI,
// which needs a kube-apiserver): what the agent records on disk follows ADD, DEL,
// CHECK and GC, survives a SIGKILL, and an agent that is down fails ADD only when the
// configuration says so.
func TestCNIChainAgainstTheAgentProcess(t *testing.T) {
	cnitest.Require(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "cni.sock")
	metrics := "127.0.0.1:" + freePort(t)
	ag := &cniAgent{t: t, args: []string{"agent", "--cni-socket", sock, "--cni-state-dir", filepath.Join(dir, "state"),
		"--node-name", "node-1", "--pod-cluster", "east", "--metrics-listen", metrics}}
	ag.start()
	records := func() string { return metricValue(t, metrics, "switchboard_agent_pod_records") }
	plugin := cnitest.Plugin{Type: "switchboard", Binary: binary(t), Config: map[string]any{"agentSocket": sock}}
	chain := cnitest.NewChain(t, "1.0.0", plugin)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	a := cnitest.NewPod(t, "shop", "a", "uid-a")
	add(ctx, t, chain, a)
	waitMetric(t, "ADD recorded", records, "1")
	if err := chain.Check(ctx, a); err != nil {
		t.Fatalf("CHECK of a recorded pod: %v", err)
	}
	del(ctx, t, chain, a)
	waitMetric(t, "DEL forgot", records, "0")
	del(ctx, t, chain, a)

	t.Log("a record survives the agent's SIGKILL")
	c := cnitest.NewPod(t, "shop", "c", "uid-c")
	add(ctx, t, chain, c)
	ag.stop(syscall.SIGKILL)
	ag.start()
	waitMetric(t, "the record reloaded after SIGKILL", records, "1")
	del(ctx, t, chain, c)
	waitMetric(t, "DEL after the restart forgot", records, "0")

	t.Log("the agent down: ADD goes on by default, fails (code 11) when the configuration says fail")
	ag.stop(syscall.SIGTERM)
	add(ctx, t, chain, cnitest.NewPod(t, "shop", "b", "uid-b"))
	strict := cnitest.NewChain(t, "1.0.0", cnitest.Plugin{Type: "switchboard", Binary: binary(t),
		Config: map[string]any{"agentSocket": sock, "onAgentUnreachable": "fail", "timeout": "500ms"}})
	_, _, err := strict.Add(ctx, cnitest.NewPod(t, "shop", "s", "uid-s"))
	var cniErr *types.Error
	if !errors.As(err, &cniErr) || cniErr.Code != types.ErrTryAgainLater {
		t.Fatalf("ADD with the agent down under onAgentUnreachable fail: %v, want code %d", err, types.ErrTryAgainLater)
	}
	ag.start()
	waitMetric(t, "nothing recorded while down", records, "0")

	t.Log("GC forgets an attachment the runtime lost (CNI 1.1 chain)")
	gc := cnitest.NewChain(t, "1.1.0", plugin)
	lost, kept := cnitest.NewPod(t, "shop", "d1", "uid-d1"), cnitest.NewPod(t, "shop", "d2", "uid-d2")
	add(ctx, t, gc, lost)
	add(ctx, t, gc, kept)
	waitMetric(t, "both recorded", records, "2")
	gc.Forget(t, lost)
	if err := gc.GC(ctx, kept); err != nil {
		t.Fatalf("GC: %v", err)
	}
	waitMetric(t, "GC forgot the lost attachment", records, "1")
	if err := gc.Check(ctx, kept); err != nil {
		t.Fatalf("CHECK of the kept attachment: %v", err)
	}
	if err := gc.Status(ctx); err != nil {
		t.Fatalf("STATUS: %v", err)
	}
}

// metricValue reads one unlabelled series from a /metrics page ("" when absent).
func metricValue(t *testing.T, addr, name string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

func waitMetric(t *testing.T, what string, read func() string, want string) {
	t.Helper()
	deadline := time.Now().Add(podsWait)
	for {
		got := read()
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the series is %q after %s, want %q", what, got, podsWait, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The soak as a node lives it: 500 pod ADD/DEL cycles through the real CNI chain, the
// pods in a real kube-apiserver, with about one DEL in ten lost (the pod is deleted
// from the API, its sandbox torn down without telling the plugin) and the agent
// SIGKILLed or stopped every few dozen cycles. At the end the registrar holds exactly
// the endpoints of the pods that exist and are Ready. SOAK_SEED replays a run.
func TestKubeSoakPodCycles(t *testing.T) {
	cnitest.Require(t)
	kube := kubetest.Start(t)
	reg := startRegistrar(t)
	w := watchRegistrar(t, reg.addr)
	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "cni.sock")
	ag := &cniAgent{t: t, args: []string{"agent", "--cni-socket", sock, "--cni-state-dir", filepath.Join(dir, "state"),
		"--kubeconfig", kube.Kubeconfig(t), "--node-name", "node-1", "--pod-cluster", "east",
		"--pod-resync", "1s", "--pod-ttl", "10s", "--metrics-listen", "127.0.0.1:" + freePort(t),
		"--registry-backend", "registrar", "--registrar-address", reg.addr}}
	ag.start()
	chain := cnitest.NewChain(t, "1.0.0", cnitest.Plugin{Type: "switchboard", Binary: binary(t), Config: map[string]any{"agentSocket": sock}})
	k := &kubePods{t: t, c: kube.Clientset, ns: "soak"}
	k.namespace()
	seed := time.Now().UnixNano()
	if s := os.Getenv("SOAK_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("SOAK_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	type live struct {
		sandbox *cnitest.Pod
		ip      string
		ready   bool
	}
	pods := map[string]*live{}
	var dropped, restarts int
	for i := range 500 {
		if len(pods) < 5 || (len(pods) < 30 && rng.IntN(2) == 0) {
			name := fmt.Sprintf("web-%d", i)
			k.pod(name)
			sb := cnitest.NewPod(t, k.ns, name, "")
			p := &live{sandbox: sb, ip: add(ctx, t, chain, sb)}
			if p.ready = rng.IntN(4) != 0; p.ready {
				k.ready(name, "")
			}
			pods[name] = p
		} else {
			name := pickKey(rng, pods)
			p := pods[name]
			k.delete(name)
			if rng.IntN(10) == 0 {
				dropped++ // the runtime loses the DEL: only the namespace goes
			} else {
				del(ctx, t, chain, p.sandbox)
			}
			p.sandbox.Remove(t)
			delete(pods, name)
		}
		if i%40 == 39 {
			restarts++
			ag.stop([]syscall.Signal{syscall.SIGKILL, syscall.SIGTERM}[rng.IntN(2)])
			ag.start()
		}
	}
	var want []string
	for _, p := range pods {
		if p.ready {
			want = append(want, p.ip+":8080/http", p.ip+":9090/grpc")
		}
	}
	t.Logf("500 cycles: %d pods left (%d endpoints Ready), %d DELs dropped, %d agent restarts", len(pods), len(want), dropped, restarts)
	w.wait(t, "the registrar holds exactly the Ready pods' endpoints", func() bool {
		if len(w.entries) != len(want) {
			return false
		}
		for _, k := range want {
			if _, ok := w.entries[k]; !ok {
				return false
			}
		}
		return true
	})
}

func pickKey[V any](rng *rand.Rand, m map[string]V) string {
	keys := slices.Sorted(maps.Keys(m))
	return keys[rng.IntN(len(keys))]
}
