package kubesync

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

func importConfig(ttl time.Duration) Config {
	return Config{Import: &ImportConfig{Namespace: ns, TTL: ttl}}
}

func TestImport(t *testing.T) {
	ipv4 := discoveryv1.AddressTypeIPv4
	cases := []struct {
		name    string
		slices  []runtime.Object
		want    []string
		skipped map[string]float64
	}{
		{
			name: "protocols from appProtocol, the port name, the L4 protocol",
			slices: []runtime.Object{userSlice("api-1", "api", ipv4, []slicePortSpec{
				{name: "http-web", appProtocol: "kubernetes.io/h2c", port: 8080},
				{name: "grpc-api", port: 9090},
				{name: "grpc-web-ui", port: 9091},
				{name: "metrics", proto: corev1.ProtocolUDP, port: 9100},
				{port: 7000},
				{name: "HTTPS", port: 8443},
			}, sliceEP{addr: "10.1.0.1", node: "n1", ready: yes})},
			want: []string{
				"api/grpc-web/10.1.0.1:9091@n1", "api/grpc/10.1.0.1:9090@n1", "api/h2c/10.1.0.1:8080@n1",
				"api/https/10.1.0.1:8443@n1", "api/tcp/10.1.0.1:7000@n1", "api/udp/10.1.0.1:9100@n1",
			},
		},
		{
			name: "ready endpoints only; an unset condition is ready",
			slices: []runtime.Object{userSlice("api-1", "api", ipv4, []slicePortSpec{{name: "http", port: 80}},
				sliceEP{addr: "10.1.0.1", ready: yes}, sliceEP{addr: "10.1.0.2", ready: no}, sliceEP{addr: "10.1.0.3"})},
			want: []string{"api/http/10.1.0.1:80", "api/http/10.1.0.3:80"},
		},
		{
			name: "IPv6 in canonical form, several slices of one service",
			slices: []runtime.Object{
				userSlice("api-1", "api", discoveryv1.AddressTypeIPv6, []slicePortSpec{{name: "http", port: 80}}, sliceEP{addr: "2001:DB8:0::1"}),
				userSlice("api-2", "api", ipv4, []slicePortSpec{{name: "http", port: 80}}, sliceEP{addr: "10.1.0.1"}),
			},
			want: []string{"api/http/10.1.0.1:80", "api/http/[2001:db8::1]:80"},
		},
		{
			name: "an invalid entry is skipped, the rest registered",
			slices: []runtime.Object{userSlice("api-1", "api", ipv4, []slicePortSpec{
				{appProtocol: "example.com/9p", port: 564}, {name: "http", port: 80},
			}, sliceEP{addr: "10.1.0.1"}, sliceEP{addr: "10.1.0.2", node: "bad node"})},
			want:    []string{"api/http/10.1.0.1:80"},
			skipped: map[string]float64{reasonInvalidEndpoint: 3},
		},
		{
			name: "FQDN and portless slices are skipped",
			slices: []runtime.Object{
				userSlice("ext-1", "ext", discoveryv1.AddressTypeFQDN, []slicePortSpec{{name: "http", port: 80}}, sliceEP{addr: "example.com"}),
				userSlice("headless-1", "headless", ipv4, nil, sliceEP{addr: "10.1.0.9"}),
				userSlice("api-1", "api", ipv4, []slicePortSpec{{name: "http", port: 80}}, sliceEP{addr: "10.1.0.1"}),
			},
			want:    []string{"api/http/10.1.0.1:80"},
			skipped: map[string]float64{reasonFQDN: 1, reasonNoPort: 1},
		},
		{
			name: "slices export made are not imported",
			slices: func() []runtime.Object {
				plan := planExport(ns, "web", []endpoint.Endpoint{ep(other, "web", "http", "10.0.0.1", 8080)})
				return []runtime.Object{plan.service, plan.slices[0],
					userSlice("api-1", "api", ipv4, []slicePortSpec{{name: "http", port: 80}}, sliceEP{addr: "10.1.0.1"})}
			}(),
			want: []string{"api/http/10.1.0.1:80"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := start(t, importConfig(0), c.slices...)
			for reason, n := range c.skipped {
				e.atLeast("skipped "+reason, e.s.m.skipped.WithLabelValues(dirImport, reason), n)
			}
			e.waitFor("registered", func() error { return sameList(e.registered(self), c.want) })
			for reason, n := range c.skipped {
				if got := testutil.ToFloat64(e.s.m.skipped.WithLabelValues(dirImport, reason)); got != n {
					t.Errorf("skipped %s = %g, want %g", reason, got, n)
				}
			}
		})
	}
}

func TestImportFollowsSliceChanges(t *testing.T) {
	e := start(t, importConfig(30*time.Second))
	ctx := context.Background()
	slices := e.client.DiscoveryV1().EndpointSlices(ns)
	s := userSlice("api-1", "api", discoveryv1.AddressTypeIPv4, []slicePortSpec{{name: "grpc", port: 9090}},
		sliceEP{addr: "10.1.0.1", node: "n1"}, sliceEP{addr: "10.1.0.2", node: "n2"})
	if _, err := slices.Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("registered", func() error {
		return sameList(e.registered(self), []string{"api/grpc/10.1.0.1:9090@n1", "api/grpc/10.1.0.2:9090@n2"})
	})
	got, err := e.reg.List(ctx, endpoint.Filter{Cluster: self, Address: "10.1.0.1"})
	if err != nil || len(got) != 1 {
		t.Fatalf("List = %v, %v", got, err)
	}
	want := map[string]string{AnnotationNamespace: ns, AnnotationService: "api", AnnotationOrigin: OriginKubernetes}
	if fmt.Sprint(got[0].Annotations) != fmt.Sprint(want) || got[0].TTL != endpoint.TTL(30*time.Second) || got[0].Priority != 1 {
		t.Errorf("entry %+v: want annotations %v, TTL 30s, priority 1", got[0], want)
	}

	// One endpoint turns not ready, another arrives.
	s.Endpoints[1].Conditions.Ready = no
	s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.1.0.3"}})
	if _, err := slices.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("updated", func() error {
		return sameList(e.registered(self), []string{"api/grpc/10.1.0.1:9090@n1", "api/grpc/10.1.0.3:9090"})
	})

	if err := slices.Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("unregistered", func() error { return sameList(e.registered(self), nil) })
	// Counted once Apply returns, which may be after the registry shows it.
	e.atLeast("unregistrations counted", e.s.m.entries.WithLabelValues(entryUnregistered), 3)
	if n := testutil.ToFloat64(e.s.m.entries.WithLabelValues(entryUnregistered)); n != 3 {
		t.Errorf("unregistered %g, want 3", n)
	}
}

// Entries are refreshed before their TTL runs out while the endpoint is there,
// and expire on their own once the syncer is gone.
func TestImportRefreshesAndExpires(t *testing.T) {
	s := userSlice("api-1", "api", discoveryv1.AddressTypeIPv4, []slicePortSpec{{name: "http", port: 80}}, sliceEP{addr: "10.1.0.1"})
	e := start(t, importConfig(time.Second), s)
	e.waitFor("registered", func() error { return sameList(e.registered(self), []string{"api/http/10.1.0.1:80"}) })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := e.reg.(registry.Watcher).Watch(ctx, endpoint.Filter{Cluster: self})
	if err != nil {
		t.Fatal(err)
	}
	var removed atomic.Int32
	go func() {
		for ev := range ch {
			if ev.Type == registry.Removed {
				removed.Add(1)
			}
		}
	}()
	// Four refreshes, every TTL/3, span more than the TTL.
	e.atLeast("refreshed", e.s.m.entries.WithLabelValues(entryRefreshed), 4)
	if n := removed.Load(); n != 0 {
		t.Fatalf("the entry expired %d times while the syncer ran", n)
	}

	e.stop()
	e.waitFor("expired", func() error { return sameList(e.registered(self), nil) })
}

// hangingRegistry is a registry whose Apply, while hang is set, blocks until its
// context ends, as a backend whose server stopped answering does.
type hangingRegistry struct {
	registry.Registry
	hang atomic.Bool
}

func (r *hangingRegistry) Apply(ctx context.Context, ops []registry.Op) error {
	if r.hang.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return r.Registry.Apply(ctx, ops)
}

// A registry write that hangs is given up in time to retry before the entries
// expire, and once writes have failed for longer than the TTL, import is not
// ready: what it registered has expired.
func TestImportGivesUpAHungRegistry(t *testing.T) {
	r := memory.New()
	defer r.Close()
	hr := &hangingRegistry{Registry: r}
	hr.hang.Store(true)
	cfg := importConfig(time.Second)
	cfg.Registry = hr
	s := userSlice("api-1", "api", discoveryv1.AddressTypeIPv4, []slicePortSpec{{name: "http", port: 80}}, sliceEP{addr: "10.1.0.1"})
	e := start(t, cfg, s)

	e.atLeast("failed writes", e.s.m.syncErrors.WithLabelValues(dirImport), 2)
	e.waitFor("not ready", func() error {
		if ok, why := e.s.Ready(); ok || !strings.Contains(why, "registry") {
			return fmt.Errorf("Ready = %v %q, want false naming the registry", ok, why)
		}
		return nil
	})

	hr.hang.Store(false)
	e.waitFor("registered", func() error { return sameList(e.registered(self), []string{"api/http/10.1.0.1:80"}) })
	e.waitFor("ready again", func() error {
		if ok, why := e.s.Ready(); !ok {
			return fmt.Errorf("Ready = false: %s", why)
		}
		return nil
	})
}
