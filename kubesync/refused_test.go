package kubesync

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clienttesting "k8s.io/client-go/testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// refusedAddrs are addresses the API server refuses in an EndpointSlice
// (ValidateEndpointIP, and strict IP validation for IPv4-mapped IPv6).
var refusedAddrs = []string{"127.0.0.1", "::1", "169.254.1.1", "fe80::1", "0.0.0.0", "::", "224.0.0.251", "ff02::fb"}

// The addresses the API server refuses are left out, each counted and logged
// once; an IPv4-mapped IPv6 address is exported as the IPv4 address it maps; a
// service with nothing but refused addresses gets no Service.
func TestExportLeavesOutAddressesTheAPIServerRefuses(t *testing.T) {
	cfg := exportConfig()
	cfg.Resync = 10 * time.Millisecond
	e := start(t, cfg)
	eps := []endpoint.Endpoint{
		ep(other, "web", "http", "10.0.0.1", 8080), ep(other, "web", "http", "2001:db8::1", 8080),
		ep(other, "web", "http", "::ffff:10.0.0.3", 8080),
		ep(other, "loop", "http", "127.0.0.1", 8080), // nothing left to export
	}
	for _, a := range refusedAddrs {
		eps = append(eps, ep(other, "web", "http", a, 8080))
	}
	e.apply(registerAll(eps...)...)
	e.waitFor("exported", func() error {
		return sameMap(e.exported(), map[string]string{
			"web": "ports http=TCP/8080/http; IPv4[http]: 10.0.0.1,10.0.0.3; IPv6[http]: 2001:db8::1",
		})
	})
	skipped := e.s.m.skipped.WithLabelValues(dirExport, "invalid_address")
	want := float64(len(refusedAddrs) + 1)
	e.atLeast("refused addresses counted", skipped, want)
	e.atLeast("several resyncs", e.s.m.syncs.WithLabelValues(dirExport), 20)
	if n := testutil.ToFloat64(skipped); n != want {
		t.Errorf("skipped invalid_address = %g, want %g (each address once)", n, want)
	}
	if n := strings.Count(e.logs.String(), "reason=invalid_address"); n != int(want) {
		t.Errorf("%d warnings about refused addresses, want %g", n, want)
	}

	// web's last valid address leaves, a loopback one stays: our Service goes.
	var ops []registry.Op
	for _, x := range eps {
		if x.Service == "web" && !slices.Contains(refusedAddrs, x.Address) {
			ops = append(ops, registry.Unregister(x))
		}
	}
	e.apply(ops...)
	e.waitFor("removed", func() error { return sameMap(e.exported(), map[string]string{}) })
}

// A write the API server refuses as invalid (422) is not retried until what
// export wants of that object changes; the service's other slices are written.
func TestExportDoesNotRetryARefusedSlice(t *testing.T) {
	cfg := exportConfig()
	cfg.Resync = 10 * time.Millisecond
	e := start(t, cfg)
	const bad = "10.0.0.66"
	var refused atomic.Int32
	refuse := func(a clienttesting.Action) (bool, runtime.Object, error) {
		s := a.(interface{ GetObject() runtime.Object }).GetObject().(*discoveryv1.EndpointSlice)
		for _, x := range s.Endpoints {
			if slices.Contains(x.Addresses, bad) {
				refused.Add(1)
				return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: "discovery.k8s.io", Kind: "EndpointSlice"}, s.Name,
					field.ErrorList{field.Invalid(field.NewPath("endpoints"), bad, "refused by the test")})
			}
		}
		return false, nil, nil
	}
	e.fake.PrependReactor("create", "endpointslices", refuse)
	e.fake.PrependReactor("update", "endpointslices", refuse)
	tried := func() int { return int(refused.Load()) }

	e.apply(registerAll(ep(other, "web", "http", "10.0.0.1", 8080), ep(other, "web", "grpc", bad, 9090),
		ep(other, "db", "tcp", "10.0.1.1", 5432))...)
	db := "ports tcp=TCP/5432/tcp; IPv4[tcp]: 10.0.1.1"
	e.waitFor("the other slice written", func() error {
		return sameMap(e.exported(), map[string]string{"web": "ports grpc=TCP/9090/grpc,http=TCP/8080/http; IPv4[http]: 10.0.0.1", "db": db})
	})
	e.waitFor("refused once", func() error {
		if n := tried(); n < 1 {
			return fmt.Errorf("%d refused writes", n)
		}
		return nil
	})
	e.atLeast("several resyncs", e.s.m.syncs.WithLabelValues(dirExport), testutil.ToFloat64(e.s.m.syncs.WithLabelValues(dirExport))+40)
	if n := tried(); n != 1 {
		t.Errorf("the refused slice was written %d times over 40 resyncs, want once", n)
	}
	if n := testutil.ToFloat64(e.s.m.refused.WithLabelValues(kindSlice)); n != 1 {
		t.Errorf("refused slices = %g, want 1", n)
	}
	if n := strings.Count(e.logs.String(), "refused the object as invalid"); n != 1 {
		t.Errorf("%d warnings about the refused slice, want 1", n)
	}
	if n := sum(e.s.m.syncErrors); n != 0 {
		t.Errorf("%g sync errors, want none: the refusal is recorded, not retried", n)
	}

	// What export wants of the slice changes: it is tried again, once.
	e.apply(registry.Register(ep(other, "web", "grpc", "10.0.0.67", 9090)))
	e.waitFor("refused again", func() error {
		if n := tried(); n < 2 {
			return fmt.Errorf("%d refused writes", n)
		}
		return nil
	})
	e.atLeast("several resyncs", e.s.m.syncs.WithLabelValues(dirExport), testutil.ToFloat64(e.s.m.syncs.WithLabelValues(dirExport))+40)
	if n := tried(); n != 2 {
		t.Errorf("%d refused writes, want 2: one per version", n)
	}
	if n := testutil.ToFloat64(e.s.m.refused.WithLabelValues(kindSlice)); n != 2 {
		t.Errorf("refused slices = %g, want 2", n)
	}

	// Without the refused address the slice is written.
	e.apply(registry.Unregister(ep(other, "web", "grpc", bad, 9090)))
	e.waitFor("written", func() error {
		return sameMap(e.exported(), map[string]string{
			"web": "ports grpc=TCP/9090/grpc,http=TCP/8080/http; IPv4[grpc]: 10.0.0.67; IPv4[http]: 10.0.0.1", "db": db,
		})
	})
}

// A Service the API server refuses to create is not tried again until it
// changes, and gets no slices; other services are exported.
func TestExportDoesNotRetryARefusedService(t *testing.T) {
	cfg := exportConfig()
	cfg.Resync = 10 * time.Millisecond
	e := start(t, cfg)
	var refused atomic.Int32
	e.fake.PrependReactor("create", "services", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.(clienttesting.CreateAction).GetObject().(*corev1.Service).Name != "web" {
			return false, nil, nil
		}
		refused.Add(1)
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, "web",
			field.ErrorList{field.Invalid(field.NewPath("spec"), "", "refused by the test")})
	})
	e.apply(registerAll(ep(other, "web", "http", "10.0.0.1", 8080), ep(other, "db", "tcp", "10.0.1.1", 5432))...)
	e.waitFor("db exported", func() error {
		return sameMap(e.exported(), map[string]string{"db": "ports tcp=TCP/5432/tcp; IPv4[tcp]: 10.0.1.1"})
	})
	e.atLeast("refused", e.s.m.refused.WithLabelValues(kindService), 1)
	e.atLeast("several resyncs", e.s.m.syncs.WithLabelValues(dirExport), testutil.ToFloat64(e.s.m.syncs.WithLabelValues(dirExport))+40)
	if n := refused.Load(); n != 1 {
		t.Errorf("the refused Service was created %d times, want once", n)
	}
	// A new port changes the Service: it is tried again.
	e.apply(registry.Register(ep(other, "web", "grpc", "10.0.0.1", 9090)))
	e.atLeast("refused again", e.s.m.refused.WithLabelValues(kindService), 2)
	if n := refused.Load(); n != 2 {
		t.Errorf("the refused Service was created %d times, want twice", n)
	}
}
