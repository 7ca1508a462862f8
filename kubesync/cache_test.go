package kubesync

import (
	"context"
	"log/slog"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// An exporter whose cache has not seen what the API server holds: the create is
// refused as a duplicate, and the live object decides, without an error.
func TestExportDecidesOnTheLiveObjectWhenTheCacheLags(t *testing.T) {
	plan := planExport(ns, "web", []endpoint.Endpoint{ep(other, "web", "http", "10.0.0.1", 8080)})
	userSl := userSlice(plan.slices[0].Name, "web", "IPv4", []slicePortSpec{{name: "http", port: 80}}, sliceEP{addr: "10.9.0.1"})
	cases := []struct {
		name      string
		live      []runtime.Object
		wantOwner bool
		wantMine  bool
	}{
		{"ours, already there", []runtime.Object{plan.service.DeepCopy(), plan.slices[0].DeepCopy()}, true, true},
		{"a user's", []runtime.Object{userService("web"), userSl}, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			empty := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			e := &exporter{
				ns: ns, client: fake.NewClientset(c.live...),
				services: corelisters.NewServiceLister(empty).Services(ns),
				slices:   discoverylisters.NewEndpointSliceLister(empty).EndpointSlices(ns),
				log:      slog.New(slog.DiscardHandler), m: newMetrics(),
			}
			ctx := context.Background()
			rec := e.refused.begin("web")
			owner, taken, err := e.ensureService(ctx, plan.service.DeepCopy(), rec)
			if err != nil || (owner != nil) != c.wantOwner || taken == c.wantOwner {
				t.Fatalf("ensureService = %v, %v, %v; want an owner: %v", owner, taken, err, c.wantOwner)
			}
			mine, err := e.ensureSlice(ctx, plan.slices[0].DeepCopy(), rec)
			if err != nil || mine != c.wantMine {
				t.Fatalf("ensureSlice = %v, %v; want %v", mine, err, c.wantMine)
			}
			if n := sum(e.m.objects); n != 0 {
				t.Errorf("%g objects written, want none", n)
			}
		})
	}
}
