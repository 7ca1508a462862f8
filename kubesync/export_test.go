package kubesync

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

func exportConfig(services ...string) Config {
	return Config{Export: &ExportConfig{Namespace: ns, Services: services}}
}

func withAnnotation(e endpoint.Endpoint, k, v string) endpoint.Endpoint {
	e.Annotations = map[string]string{k: v}
	return e
}

func TestExport(t *testing.T) {
	cases := []struct {
		name     string
		services []string
		others   bool // OnlyOtherClusters
		eps      []endpoint.Endpoint
		want     map[string]string
		skipped  map[string]float64 // by reason
	}{
		{
			name: "matched services only", services: []string{"web", "api-*"},
			eps: []endpoint.Endpoint{
				ep(other, "web", "http", "10.0.0.1", 8080), ep(other, "web", "http", "10.0.0.2", 8080),
				ep(other, "web", "grpc", "10.0.0.1", 9090), ep(other, "api-v1", "tcp", "10.0.2.1", 7000),
				ep(other, "db", "tcp", "10.0.1.1", 5432),
			},
			want: map[string]string{
				"web":    "ports grpc=TCP/9090/grpc,http=TCP/8080/http; IPv4[grpc,http]: 10.0.0.1; IPv4[http]: 10.0.0.2",
				"api-v1": "ports tcp=TCP/7000/tcp; IPv4[tcp]: 10.0.2.1",
			},
		},
		{
			name: "only other clusters", others: true,
			eps:  []endpoint.Endpoint{ep(self, "web", "http", "10.0.0.9", 8080), ep(other, "web", "http", "10.0.0.1", 8080)},
			want: map[string]string{"web": "ports http=TCP/8080/http; IPv4[http]: 10.0.0.1"},
		},
		{
			name: "this cluster's imported entries are not exported back",
			eps: []endpoint.Endpoint{
				withAnnotation(ep(self, "web", "http", "10.0.0.9", 8080), AnnotationOrigin, OriginKubernetes),
				ep(self, "web", "http", "10.0.0.8", 8080),
				withAnnotation(ep(other, "web", "http", "10.0.0.1", 8080), AnnotationOrigin, OriginKubernetes),
			},
			want: map[string]string{"web": "ports http=TCP/8080/http; IPv4[http]: 10.0.0.1,10.0.0.8"},
		},
		{
			name: "IPv4 and IPv6 in slices of their own",
			eps:  []endpoint.Endpoint{ep(other, "web", "http", "2001:db8::1", 8080), ep(other, "web", "http", "10.0.0.1", 8080)},
			want: map[string]string{"web": "ports http=TCP/8080/http; IPv4[http]: 10.0.0.1; IPv6[http]: 2001:db8::1"},
		},
		{
			name: "an address in several clusters is one endpoint",
			eps:  []endpoint.Endpoint{ep(other, "web", "http", "10.0.0.1", 8080), ep("north", "web", "http", "10.0.0.1", 8080)},
			want: map[string]string{"web": "ports http=TCP/8080/http; IPv4[http]: 10.0.0.1"},
		},
		{
			name: "a protocol on several ports",
			eps:  []endpoint.Endpoint{ep(other, "web", "http", "10.0.0.1", 8080), ep(other, "web", "http", "10.0.0.1", 8443)},
			want: map[string]string{"web": "ports http-8080=TCP/8080/http,http-8443=TCP/8443/http; IPv4[http-8080,http-8443]: 10.0.0.1"},
		},
		{
			name:    "two protocols on one port: the first by name is kept",
			eps:     []endpoint.Endpoint{ep(other, "web", "http", "10.0.0.1", 8080), ep(other, "web", "grpc", "10.0.0.1", 8080)},
			want:    map[string]string{"web": "ports grpc=TCP/8080/grpc; IPv4[grpc]: 10.0.0.1"},
			skipped: map[string]float64{reasonPortClash: 1},
		},
		{
			name: "udp and odd protocol names",
			eps:  []endpoint.Endpoint{ep(other, "dns", "udp", "10.0.0.53", 53), ep(other, "dns", "Grpc_Web", "10.0.0.53", 8081)},
			want: map[string]string{"dns": "ports grpc-web=TCP/8081/Grpc_Web,udp=UDP/53/udp; IPv4[grpc-web,udp]: 10.0.0.53"},
		},
		{
			name:    "a registry name that is no Service name",
			eps:     []endpoint.Endpoint{ep(other, "Web_Admin", "http", "10.0.0.1", 8080)},
			want:    map[string]string{},
			skipped: map[string]float64{reasonInvalidName: 1},
		},
		{
			name:    "entries without a port",
			eps:     []endpoint.Endpoint{ep(other, "web", "http", "10.0.0.1", 0)},
			want:    map[string]string{},
			skipped: map[string]float64{reasonNoPort: 1},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := exportConfig(c.services...)
			cfg.Export.OnlyOtherClusters = c.others
			e := start(t, cfg)
			e.apply(registerAll(c.eps...)...)
			for reason, n := range c.skipped {
				e.atLeast("skipped "+reason, e.s.m.skipped.WithLabelValues(dirExport, reason), n)
			}
			e.waitFor("exported objects", func() error { return sameMap(e.exported(), c.want) })
			for reason, n := range c.skipped {
				if got := testutil.ToFloat64(e.s.m.skipped.WithLabelValues(dirExport, reason)); got != n {
					t.Errorf("skipped %s = %g, want %g", reason, got, n)
				}
			}
		})
	}
}

// A skipped service is logged and counted once, not at every resync.
func TestExportWarnsOnceAboutAnInvalidName(t *testing.T) {
	cfg := exportConfig()
	cfg.Resync = 10 * time.Millisecond
	e := start(t, cfg)
	e.apply(registry.Register(ep(other, "Web_Admin", "http", "10.0.0.1", 8080)))
	syncs := e.s.m.syncs.WithLabelValues(dirExport)
	e.atLeast("several resyncs", syncs, 10)
	if n := strings.Count(e.logs.String(), "reason=invalid_name"); n != 1 {
		t.Errorf("%d warnings about the invalid name, want 1:\n%s", n, e.logs.String())
	}
	if got := testutil.ToFloat64(e.s.m.skipped.WithLabelValues(dirExport, reasonInvalidName)); got != 1 {
		t.Errorf("skipped invalid_name = %g, want 1", got)
	}
}

func TestExportUpdatesInPlaceAndDeletes(t *testing.T) {
	e := start(t, exportConfig())
	a := ep(other, "web", "http", "10.0.0.1", 8080)
	e.apply(registerAll(a, ep(other, "db", "tcp", "10.0.1.1", 5432))...)
	db := "ports tcp=TCP/5432/tcp; IPv4[tcp]: 10.0.1.1"
	e.waitFor("exported", func() error {
		return sameMap(e.exported(), map[string]string{"web": "ports http=TCP/8080/http; IPv4[http]: 10.0.0.1", "db": db})
	})

	// A new address, and a new port on the first one: the Service gains the port,
	// the http-only slice (same name) now holds the second address.
	e.apply(registerAll(ep(other, "web", "http", "10.0.0.2", 8080), ep(other, "web", "grpc", "10.0.0.1", 9090))...)
	e.waitFor("updated", func() error {
		return sameMap(e.exported(), map[string]string{
			"web": "ports grpc=TCP/9090/grpc,http=TCP/8080/http; IPv4[grpc,http]: 10.0.0.1; IPv4[http]: 10.0.0.2",
			"db":  db,
		})
	})
	// A write is counted once the API call returns, which may be after the object
	// shows: wait for the counts.
	m := e.s.m.objects
	e.atLeast("Service web updated in place", m.WithLabelValues(kindService, opUpdated), 1)
	e.atLeast("the http slice updated in place", m.WithLabelValues(kindSlice, opUpdated), 1)
	if created := testutil.ToFloat64(m.WithLabelValues(kindService, opCreated)); created != 2 {
		t.Errorf("Services created %g, want 2: web, db", created)
	}

	// The service leaves the registry: its Service and slices go, db stays.
	e.apply(registry.Unregister(a), registry.Unregister(ep(other, "web", "http", "10.0.0.2", 8080)), registry.Unregister(ep(other, "web", "grpc", "10.0.0.1", 9090)))
	e.waitFor("deleted", func() error { return sameMap(e.exported(), map[string]string{"db": db}) })
	e.atLeast("Service deleted", m.WithLabelValues(kindService, opDeleted), 1)
	if n := testutil.ToFloat64(m.WithLabelValues(kindService, opDeleted)); n != 1 {
		t.Errorf("Services deleted %g, want 1", n)
	}
}

// What a syncer exported, and whose registry service went away while it was down,
// is removed when it starts again.
func TestExportRemovesWhatIsGoneOnStart(t *testing.T) {
	plan := planExport(ns, "old", []endpoint.Endpoint{ep(other, "old", "http", "10.0.0.1", 8080)})
	objs := []runtime.Object{plan.service}
	for _, s := range plan.slices {
		objs = append(objs, s)
	}
	e := start(t, exportConfig(), append(objs, userService("mine"))...)
	e.waitFor("stale objects removed", func() error { return sameMap(e.exported(), map[string]string{}) })
	if _, err := e.client.CoreV1().Services(ns).Get(context.Background(), "mine", metav1.GetOptions{}); err != nil {
		t.Errorf("a user's Service is gone: %v", err)
	}
}

func TestExportLeavesAUsersServiceAlone(t *testing.T) {
	user := userService("web")
	userSl := userSlice("web-abcde", "web", "IPv4", []slicePortSpec{{name: "http", port: 80}}, sliceEP{addr: "10.9.0.1"})
	cfg := exportConfig()
	cfg.Resync = 10 * time.Millisecond
	e := start(t, cfg, user, userSl)
	ctx := context.Background()
	e.apply(registry.Register(ep(other, "web", "http", "10.0.0.1", 8080)))

	conflicts := e.s.m.conflicts.WithLabelValues(kindService)
	e.atLeast("conflict counted", conflicts, 1)
	e.atLeast("several resyncs", e.s.m.syncs.WithLabelValues(dirExport), 10)
	if n := testutil.ToFloat64(conflicts); n != 1 {
		t.Errorf("conflicts = %g, want 1 (counted once, not per resync)", n)
	}
	if n := strings.Count(e.logs.String(), "name taken"); n != 1 {
		t.Errorf("%d warnings about the clash, want 1", n)
	}
	got, err := e.client.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ownedService(got) || got.Spec.Selector["app"] != "web" || renderPorts(got.Spec.Ports) != "http=TCP/80/" {
		t.Errorf("the user's Service was changed: %+v", got)
	}
	if ex := e.exported(); len(ex) != 0 {
		t.Errorf("exported %v next to a user's Service", ex)
	}
	if _, err := e.client.DiscoveryV1().EndpointSlices(ns).Get(ctx, userSl.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the user's slice is gone: %v", err)
	}

	// The registry service going away deletes nothing of the user's.
	e.apply(registry.Unregister(ep(other, "web", "http", "10.0.0.1", 8080)))
	e.waitFor("synced after the removal", func() error {
		// The sync that finds nothing to export clears the clash it noted.
		if e.s.exp.notes.has("web") {
			return fmt.Errorf("the clash is still noted")
		}
		return nil
	})
	if _, err := e.client.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Fatalf("the user's Service was deleted: %v", err)
	}

	// Once the user deletes theirs, ours takes the name.
	e.apply(registry.Register(ep(other, "web", "http", "10.0.0.1", 8080)))
	if err := e.client.CoreV1().Services(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("ours created", func() error {
		return sameMap(e.exported(), map[string]string{"web": "ports http=TCP/8080/http; IPv4[http]: 10.0.0.1"})
	})
}

func TestExportSplitsLargeServices(t *testing.T) {
	e := start(t, exportConfig())
	var eps []endpoint.Endpoint
	for i := range 250 {
		eps = append(eps, ep(other, "big", "http", fmt.Sprintf("10.1.%d.%d", i/200, i%200+1), 80))
	}
	e.apply(registerAll(eps...)...)
	sizes := func() ([]int, int) {
		l, err := e.client.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=big"})
		if err != nil {
			t.Fatal(err)
		}
		var out []int
		seen := map[string]bool{}
		for _, s := range l.Items {
			out = append(out, len(s.Endpoints))
			for _, x := range s.Endpoints {
				seen[x.Addresses[0]] = true
			}
		}
		slices.Sort(out)
		return out, len(seen)
	}
	check := func(want []int, addrs int) func() error {
		return func() error {
			if got, n := sizes(); !slices.Equal(got, want) || n != addrs {
				return fmt.Errorf("slice sizes %v holding %d addresses, want %v holding %d", got, n, want, addrs)
			}
			return nil
		}
	}
	e.waitFor("split in three", check([]int{50, 100, 100}, 250))

	var ops []registry.Op
	for _, x := range eps[50:] {
		ops = append(ops, registry.Unregister(x))
	}
	e.apply(ops...)
	e.waitFor("shrunk to one", check([]int{50}, 50))
}

// listOnly hides the memory backend's change feed: a backend that can only list.
type listOnly struct{ registry.Registry }

func TestExportPollsABackendWithoutChangeFeed(t *testing.T) {
	r := memory.New()
	defer r.Close()
	cfg := exportConfig("web")
	cfg.Registry = listOnly{r}
	cfg.Export.PollInterval = 10 * time.Millisecond
	e := start(t, cfg)
	e.apply(registry.Register(ep(other, "web", "http", "10.0.0.1", 8080)))
	e.waitFor("exported", func() error {
		return sameMap(e.exported(), map[string]string{"web": "ports http=TCP/8080/http; IPv4[http]: 10.0.0.1"})
	})
	e.apply(registry.Unregister(ep(other, "web", "http", "10.0.0.1", 8080)))
	e.waitFor("removed", func() error { return sameMap(e.exported(), map[string]string{}) })
	if !strings.Contains(e.logs.String(), "no change feed") {
		t.Errorf("no word of listing instead of watching:\n%s", e.logs.String())
	}
}
