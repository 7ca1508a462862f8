// Command kubernetes measures the pod write path: the CNI plugin (switchboard-cni, a
// real process per call, as a container runtime runs it; the whole switchboard binary
// as the plugin is timed beside it) hands pods to the agent's
// CNI server, which records them on disk and registers them through a registrar
// process; a watcher on the registrar times when each pod shows up.
//
//	go run ./bench/kubernetes [-pods 1000] [-burst 100]
//
// The agent runs in this process with its pods read from a fake clientset (the pods
// are created Ready beforehand): what is timed is the CNI plugin, the agent's record,
// its publish loop, the registrar and the fan-out, not the Kubernetes API.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/switchboard-mesh/switchboard/agent"
	"github.com/switchboard-mesh/switchboard/agent/pods"
	"github.com/switchboard-mesh/switchboard/bench/internal/hostspeed"
	cniv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/cni/v1"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registrar/client"
)

func main() {
	n := flag.Int("pods", 1000, "pods added one after another (ADD → visible, ADD latency)")
	burst := flag.Int("burst", 100, "pods added at once on one node")
	parallel := flag.Int("parallel", 10, "plugin processes running at once during the burst")
	flag.Parse()
	if err := run(*n, *burst, *parallel); err != nil {
		log.Fatal(err)
	}
}

type bench struct {
	dir, bin, sock string
	// plugin is the binary the runtime runs: switchboard-cni, which cni install
	// prefers, or the whole switchboard binary.
	pluginBin string
	watch     *watcher
}

func run(n, burst, parallel int) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "bench-kubernetes-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	b := &bench{dir: dir, bin: filepath.Join(dir, "switchboard"), sock: filepath.Join(dir, "cni.sock")}
	b.pluginBin = filepath.Join(dir, "switchboard-cni")
	for out, pkg := range map[string]string{b.bin: "switchboard", b.pluginBin: "switchboard-cni"} {
		if msg, err := exec.Command("go", "build", "-o", out, "github.com/switchboard-mesh/switchboard/cmd/"+pkg).CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v: %s", pkg, err, msg)
		}
	}
	regAddr, stopReg, err := startRegistrar(b.bin)
	if err != nil {
		return err
	}
	defer stopReg()
	total := n + burst
	kube := fake.NewClientset()
	for i := range total {
		if _, err := kube.CoreV1().Pods("bench").Create(ctx, readyPod(i), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	stopAgent, err := b.startAgent(ctx, regAddr, kube)
	if err != nil {
		return err
	}
	defer stopAgent()
	if b.watch, err = watch(ctx, regAddr); err != nil {
		return err
	}
	if h, err := hostspeed.Measure(); err == nil {
		fmt.Printf("host: %s\n", h)
	}
	fmt.Printf("%d pods one after another, then %d at once (%d plugin processes in parallel); load %s\n\n", n, burst, parallel, loadavg())

	addLat, visLat, err := b.sequential(n)
	if err != nil {
		return err
	}
	rpc, err := b.rpcLatency(min(200, n), false)
	if err != nil {
		return err
	}
	fresh, err := b.rpcLatency(min(200, n), true)
	if err != nil {
		return err
	}
	whole, err := b.wholeBinary(min(200, n))
	if err != nil {
		return err
	}
	all, err := b.burst(n, burst, parallel)
	if err != nil {
		return err
	}
	anchor, anchorErr := anchorPlugin(min(200, n))
	fmt.Printf("%-44s %9s %9s %9s\n", "", "p50", "p99", "max")
	row("CNI ADD → visible to a registrar watcher", visLat)
	row("CNI ADD, plugin process switchboard-cni", addLat)
	row("CNI ADD, plugin process switchboard (whole)", whole)
	row("CNI ADD, the agent's Add call (record fsync)", rpc)
	row("  the same on a new gRPC connection each", fresh)
	if anchorErr != nil {
		fmt.Printf("anchor (Debian's tuning plugin, chained, no I/O): not run: %v\n", anchorErr)
	} else {
		row("anchor: Debian's tuning plugin, chained", anchor)
	}
	fmt.Printf("\nburst of %d pods: all visible %s after the first ADD started (goal ≤ 1 s); load %s\n", burst, all.Round(time.Millisecond), loadavg())
	return nil
}

func row(name string, d []time.Duration) {
	slices.Sort(d)
	q := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
	fmt.Printf("%-44s %9s %9s %9s\n", name, ms(q(0.50)), ms(q(0.99)), ms(d[len(d)-1]))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000) }

// sequential adds pods 0..n-1 one at a time, each once the previous one is visible.
func (b *bench) sequential(n int) (add, visible []time.Duration, err error) {
	for i := range n {
		start := time.Now()
		if err := b.plugin("ADD", i); err != nil {
			return nil, nil, err
		}
		add = append(add, time.Since(start))
		at, err := b.watch.waitFor(podIP(i), 10*time.Second)
		if err != nil {
			return nil, nil, err
		}
		visible = append(visible, at.Sub(start))
	}
	return add, visible, nil
}

// burst adds pods from..from+count-1 with parallel plugin processes at a time and
// returns how long until the last is visible.
func (b *bench) burst(from, count, parallel int) (time.Duration, error) {
	start := time.Now()
	sem := make(chan struct{}, parallel)
	errs := make(chan error, count)
	var wg sync.WaitGroup
	for i := from; i < from+count; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs <- b.plugin("ADD", i)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return 0, err
		}
	}
	var last time.Time
	for i := from; i < from+count; i++ {
		at, err := b.watch.waitFor(podIP(i), 10*time.Second)
		if err != nil {
			return 0, err
		}
		if at.After(last) {
			last = at
		}
	}
	return last.Sub(start), nil
}

// wholeBinary times ADD run by the whole switchboard binary as the plugin, for pods
// added before (the agent replaces their records).
func (b *bench) wholeBinary(count int) ([]time.Duration, error) {
	small := b.pluginBin
	b.pluginBin = b.bin
	defer func() { b.pluginBin = small }()
	var out []time.Duration
	for i := range count {
		start := time.Now()
		if err := b.plugin("ADD", i); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// rpcLatency times the agent's Add over its socket, record and fsync included, for
// attachments of pods added before (Add replaces a record), so that nothing new is
// registered before the burst. With fresh, each call dials a new connection, as each
// plugin process does.
func (b *bench) rpcLatency(count int, fresh bool) ([]time.Duration, error) {
	var conn *grpc.ClientConn
	dial := func() (err error) {
		conn, err = grpc.NewClient("unix://"+b.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		return err
	}
	if err := dial(); err != nil {
		return nil, err
	}
	var out []time.Duration
	for i := range count {
		req := &cniv1.AddRequest{Ref: &cniv1.AttachmentRef{Network: "bench", ContainerId: containerID(i), Ifname: "eth0"},
			Pod: &cniv1.Pod{Namespace: "bench", Name: podName(i), Uid: podUID(i)}, Netns: "/var/run/netns/bench", Ips: []string{podIP(i)}}
		start := time.Now()
		if fresh && i > 0 {
			_ = conn.Close()
			if err := dial(); err != nil {
				return nil, err
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cniv1.NewPodNetworkClient(conn).Add(ctx, req)
		cancel()
		if err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out, conn.Close()
}

// anchorPlugin times ADD of Debian's tuning plugin with nothing to tune: a chained
// Go plugin that passes prevResult through, which is what a plugin process costs
// before it does any work. It needs root (a network namespace) and the plugin.
func anchorPlugin(count int) ([]time.Duration, error) {
	const bin, ns = "/usr/lib/cni/tuning", "switchboard-bench"
	if _, err := os.Stat(bin); err != nil {
		return nil, err
	}
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add: %v: %s", err, out)
	}
	defer func() { _ = exec.Command("ip", "netns", "del", ns).Run() }()
	stdin, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "bench", "type": "tuning",
		"prevResult": map[string]any{"cniVersion": "1.0.0",
			"interfaces": []any{map[string]any{"name": "eth0", "sandbox": "/var/run/netns/" + ns}},
			"ips":        []any{map[string]any{"address": "10.244.0.5/16", "interface": 0}}}})
	var out []time.Duration
	for range count {
		cmd := exec.Command(bin)
		cmd.Stdin = bytes.NewReader(stdin)
		cmd.Env = []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=anchor", "CNI_NETNS=/var/run/netns/" + ns,
			"CNI_IFNAME=eth0", "CNI_PATH=/usr/lib/cni"}
		start := time.Now()
		if msg, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("tuning ADD: %v: %s", err, msg)
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// plugin runs the switchboard binary as a container runtime runs a chained plugin:
// no arguments, CNI_* in the environment, the network configuration with the
// previous plugin's result on stdin.
func (b *bench) plugin(command string, i int) error {
	conf := map[string]any{"cniVersion": "1.0.0", "name": "bench", "type": "switchboard", "agentSocket": b.sock,
		"prevResult": map[string]any{"cniVersion": "1.0.0",
			"interfaces": []any{map[string]any{"name": "eth0", "sandbox": "/var/run/netns/bench"}},
			"ips":        []any{map[string]any{"address": podIP(i) + "/16", "interface": 0}}}}
	stdin, _ := json.Marshal(conf)
	cmd := exec.Command(b.pluginBin)
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Env = []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=" + containerID(i), "CNI_NETNS=/var/run/netns/bench",
		"CNI_IFNAME=eth0", "CNI_PATH=" + filepath.Dir(b.pluginBin),
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=" + podName(i) + ";K8S_POD_UID=" + podUID(i)}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("plugin %s %s: %v: %s", command, podName(i), err, out)
	}
	return nil
}

func (b *bench) startAgent(ctx context.Context, regAddr string, kube *fake.Clientset) (stop func(), err error) {
	reg, err := client.New(client.Options{Addresses: []string{regAddr}, Node: "node-1", Cluster: "east"})
	if err != nil {
		return nil, err
	}
	src := func(a *agent.Agent, m prometheus.Registerer) (agent.Source, error) {
		return pods.New(pods.Config{StateDir: filepath.Join(b.dir, "state"), Socket: b.sock, NodeName: "node-1",
			Cluster: "east", Client: kube, Sink: a, Metrics: m})
	}
	actx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- agent.Run(actx, agent.Config{Registry: reg, Sources: []agent.NewSource{src}}) }()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if c, err := net.Dial("unix", b.sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			cancel()
			return nil, fmt.Errorf("the agent's CNI socket never answered")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return func() {
		cancel()
		if err := <-done; err != nil {
			log.Printf("agent: %v", err)
		}
		_ = reg.Close()
	}, nil
}

func readyPod(i int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: podName(i), UID: types.UID(podUID(i)),
			Labels: map[string]string{pods.KeyRegister: "true", "app": "web"}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

func podName(i int) string     { return fmt.Sprintf("web-%d", i) }
func podUID(i int) string      { return fmt.Sprintf("uid-%d", i) }
func containerID(i int) string { return fmt.Sprintf("c%08d", i) }
func podIP(i int) string       { return fmt.Sprintf("10.244.%d.%d", i/250, i%250+1) }

var listening = regexp.MustCompile(`gRPC on (\S+), health on (\S+)`)

// startRegistrar runs a registrar process on the memory backend.
func startRegistrar(bin string) (addr string, stop func(), err error) {
	cmd := exec.Command(bin, "registrar", "--cluster-name", "east", "--registry-backend", "memory", "--listen", "127.0.0.1:0", "--health-listen", "127.0.0.1:0")
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }
	found := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			if m := listening.FindStringSubmatch(s.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	select {
	case addr = <-found:
		return addr, stop, nil
	case <-time.After(30 * time.Second):
		stop()
		return "", nil, fmt.Errorf("the registrar did not say where it listens")
	}
}

// watcher keeps, for each address, when a WatchEndpoints stream first showed it.
type watcher struct {
	mu    sync.Mutex
	seen  map[string]time.Time
	added chan struct{}
}

func watch(ctx context.Context, addr string) (*watcher, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	stream, err := registrarv1.NewRegistrarClient(conn).WatchEndpoints(ctx, &registrarv1.WatchEndpointsRequest{ClusterName: "east", NodeName: "bench-watcher"})
	if err != nil {
		return nil, err
	}
	w := &watcher{seen: map[string]time.Time{}, added: make(chan struct{}, 1)}
	go func() {
		defer conn.Close()
		for {
			ev, err := stream.Recv()
			if err != nil {
				return
			}
			if ev.GetType() == registrarv1.EndpointEvent_ENDPOINT_ADDED {
				now := time.Now()
				w.mu.Lock()
				if _, ok := w.seen[ev.GetEndpoint().GetAddress()]; !ok {
					w.seen[ev.GetEndpoint().GetAddress()] = now
				}
				w.mu.Unlock()
				select {
				case w.added <- struct{}{}:
				default:
				}
			}
		}
	}()
	return w, nil
}

func (w *watcher) waitFor(addr string, limit time.Duration) (time.Time, error) {
	deadline := time.After(limit)
	for {
		w.mu.Lock()
		at, ok := w.seen[addr]
		w.mu.Unlock()
		if ok {
			return at, nil
		}
		select {
		case <-w.added:
		case <-time.After(5 * time.Millisecond):
		case <-deadline:
			return time.Time{}, fmt.Errorf("%s not visible after %s", addr, limit)
		}
	}
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := bytes.Fields(b)
	return string(bytes.Join(f[:3], []byte(" ")))
}
