package kubesync

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

const (
	ns       = "mesh"
	self     = "west" // the cluster the syncer runs in
	other    = "east"
	deadline = 10 * time.Second
)

// env is one syncer under test, with its fake API server and memory registry.
type env struct {
	t      *testing.T
	client kubernetes.Interface
	fake   *fake.Clientset // nil when client is a real API server's
	reg    registry.Registry
	s      *Syncer
	logs   *syncbuf.Buffer
	stop   func() // stops the syncer and waits for Run to return; idempotent
}

// start runs a syncer of cfg, filling in what is unset: a fake clientset holding
// objs, a memory registry, cluster "west". It returns once the syncer is ready,
// and stops it when the test ends.
func start(t *testing.T, cfg Config, objs ...runtime.Object) *env {
	t.Helper()
	e := &env{t: t, logs: &syncbuf.Buffer{}}
	if cfg.Client == nil {
		e.fake = fake.NewClientset(objs...)
		cfg.Client = e.fake
	}
	e.client = cfg.Client
	if cfg.Registry == nil {
		r := memory.New()
		t.Cleanup(func() { r.Close() })
		cfg.Registry = r
	}
	e.reg = cfg.Registry
	if cfg.Cluster == "" {
		cfg.Cluster = self
	}
	cfg.Logger = slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.s = s
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	e.stop = sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v", err)
			}
		case <-time.After(deadline):
			t.Errorf("Run did not return within %s of its context ending", deadline)
		}
	})
	t.Cleanup(func() {
		e.stop()
		if t.Failed() {
			t.Logf("syncer logs:\n%s", e.logs.String())
		}
	})
	e.waitFor("ready", func() error {
		if ok, why := s.Ready(); !ok {
			return fmt.Errorf("%s", why)
		}
		return nil
	})
	return e
}

// waitFor polls cond until it returns nil, failing the test after the deadline
// with cond's last answer.
func (e *env) waitFor(what string, cond func() error) {
	e.t.Helper()
	waitFor(e.t, what, cond)
}

func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: not within %s: %v", what, deadline, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// apply writes ops to the registry.
func (e *env) apply(ops ...registry.Op) {
	e.t.Helper()
	if err := e.reg.Apply(context.Background(), ops); err != nil {
		e.t.Fatal(err)
	}
}

func ep(cluster, svc, proto, addr string, port int) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: cluster, Service: svc, Protocol: proto, Address: addr, Port: port, Priority: 1}
}

func registerAll(eps ...endpoint.Endpoint) []registry.Op {
	ops := make([]registry.Op, len(eps))
	for i, e := range eps {
		ops[i] = registry.Register(e)
	}
	return ops
}

// exported renders what the namespace holds of ours, by Service: its ports, then
// each slice as FAMILY[ports]: addresses. Objects without our labels show as
// "not ours".
func (e *env) exported() map[string]string {
	e.t.Helper()
	ctx := context.Background()
	svcs, err := e.client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	sls, err := e.client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	for i := range svcs.Items {
		s := &svcs.Items[i]
		if !ownedService(s) {
			continue
		}
		out[s.Name] = "ports " + renderPorts(s.Spec.Ports)
	}
	bySvc := map[string][]string{}
	for i := range sls.Items {
		s := &sls.Items[i]
		if ownedSlice(s) {
			bySvc[sliceService(s)] = append(bySvc[sliceService(s)], renderSlice(s))
		}
	}
	for svc, ss := range bySvc {
		sort.Strings(ss)
		out[svc] += "; " + strings.Join(ss, "; ")
	}
	return out
}

func renderPorts(ps []corev1.ServicePort) string {
	var out []string
	for _, p := range ps {
		ap := ""
		if p.AppProtocol != nil {
			ap = *p.AppProtocol
		}
		out = append(out, fmt.Sprintf("%s=%s/%d/%s", p.Name, p.Protocol, p.Port, ap))
	}
	return strings.Join(out, ",")
}

func renderSlice(s *discoveryv1.EndpointSlice) string {
	var ports, addrs []string
	for _, p := range s.Ports {
		ports = append(ports, *p.Name)
	}
	for _, ep := range s.Endpoints {
		if ep.Conditions.Ready == nil || !*ep.Conditions.Ready || ep.NodeName != nil {
			addrs = append(addrs, "unexpected:"+ep.Addresses[0])
			continue
		}
		addrs = append(addrs, ep.Addresses...)
	}
	return fmt.Sprintf("%s[%s]: %s", s.AddressType, strings.Join(ports, ","), strings.Join(addrs, ","))
}

// registered renders the registry's entries of cluster as "service/protocol/host:port@node".
func (e *env) registered(cluster string) []string {
	e.t.Helper()
	eps, err := e.reg.List(context.Background(), endpoint.Filter{Cluster: cluster})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, x := range eps {
		s := x.Service + "/" + x.Protocol + "/" + endpoint.HostPort(x.Address, x.Port)
		if x.Node != "" {
			s += "@" + x.Node
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// sameMap and sameList compare for waitFor.
func sameMap(got, want map[string]string) error {
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("got\n  %v\nwant\n  %v", got, want)
	}
	return nil
}

func sameList(got, want []string) error {
	if !slices.Equal(got, want) {
		return fmt.Errorf("got %q, want %q", got, want)
	}
	return nil
}

// atLeast waits until the series c reaches n.
func (e *env) atLeast(what string, c prometheus.Collector, n float64) {
	e.t.Helper()
	e.waitFor(what, func() error {
		if v := testutil.ToFloat64(c); v < n {
			return fmt.Errorf("%g, want at least %g", v, n)
		}
		return nil
	})
}

// userService is a Service someone else made: no kubesync label.
func userService(name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		},
	}
}

// slicePortSpec is one port of a test slice.
type slicePortSpec struct {
	name, appProtocol string
	proto             corev1.Protocol
	port              int32
}

// sliceEP is one endpoint of a test slice; ready nil leaves the condition unset.
type sliceEP struct {
	addr  string
	node  string
	ready *bool
}

var (
	yes = ptr(true)
	no  = ptr(false)
)

func ptr[T any](v T) *T { return &v }

// userSlice is an EndpointSlice as the EndpointSlice controller would make it.
func userSlice(name, svc string, fam discoveryv1.AddressType, ports []slicePortSpec, eps ...sliceEP) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io",
		}},
		AddressType: fam,
	}
	for _, p := range ports {
		sp := discoveryv1.EndpointPort{Port: ptr(p.port)}
		if p.name != "" {
			sp.Name = ptr(p.name)
		}
		if p.appProtocol != "" {
			sp.AppProtocol = ptr(p.appProtocol)
		}
		if p.proto != "" {
			sp.Protocol = ptr(p.proto)
		}
		s.Ports = append(s.Ports, sp)
	}
	for _, x := range eps {
		e := discoveryv1.Endpoint{Addresses: []string{x.addr}, Conditions: discoveryv1.EndpointConditions{Ready: x.ready}}
		if x.node != "" {
			e.NodeName = ptr(x.node)
		}
		s.Endpoints = append(s.Endpoints, e)
	}
	return s
}
