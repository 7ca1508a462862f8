package kubesync

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/kubetest"
	"github.com/switchboard-mesh/switchboard/registry"
)

// TestKubeSyncRealAPIServer runs export and import together against a real
// kube-apiserver, which validates what the fake clientset takes as it is: Service
// and slice fields, owner references, delete preconditions. It skips unless
// SWITCHBOARD_KUBE=1 (or SWITCHBOARD_KUBE_APISERVER) is set.
func TestKubeSyncRealAPIServer(t *testing.T) {
	c := kubetest.Start(t)
	ctx := context.Background()
	cs := c.Clientset
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A user's Service and the slice the EndpointSlice controller would make for
	// it (no controller-manager runs).
	if _, err := cs.CoreV1().Services(ns).Create(ctx, userService("api"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	api := userSlice("api-abcde", "api", discoveryv1.AddressTypeIPv4, []slicePortSpec{{name: "http", port: 8080}},
		sliceEP{addr: "10.1.0.1", node: "n1", ready: yes}, sliceEP{addr: "10.1.0.2", node: "n2", ready: no})
	if _, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, api, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	e := start(t, Config{
		Client: cs,
		Export: &ExportConfig{Namespace: ns},
		Import: &ImportConfig{Namespace: ns, TTL: 30 * time.Second},
		Resync: 50 * time.Millisecond,
	})
	web := registerAll(
		ep(other, "web", "http", "10.0.0.1", 8080), ep(other, "web", "grpc", "10.0.0.1", 9090),
		ep(other, "web", "http", "2001:db8::1", 8080),
	)
	e.apply(web...)
	exported := map[string]string{
		"web": "ports grpc=TCP/9090/grpc,http=TCP/8080/http; IPv4[grpc,http]: 10.0.0.1; IPv6[http]: 2001:db8::1",
	}
	converged := func() error {
		if err := sameMap(e.exported(), exported); err != nil {
			return err
		}
		return sameList(e.registered(self), []string{"api/http/10.1.0.1:8080@n1"})
	}
	e.waitFor("converged", converged)

	svc, err := cs.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		t.Errorf("Service web has cluster IP %q, want one assigned", svc.Spec.ClusterIP)
	}
	sls, err := cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=web"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sls.Items {
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != svc.UID {
			t.Errorf("slice %s owners %v, want the Service %s", s.Name, s.OwnerReferences, svc.UID)
		}
	}

	// Once the writes in flight have landed, several resyncs change nothing.
	resyncs := func(n float64) {
		for _, dir := range []string{dirExport, dirImport} {
			c := e.s.m.syncs.WithLabelValues(dir)
			e.atLeast(dir+" resyncs", c, testutil.ToFloat64(c)+n)
		}
	}
	resyncs(5)
	objects := sum(e.s.m.objects)
	resyncs(10)
	if err := converged(); err != nil {
		t.Fatalf("state moved after converging: %v", err)
	}
	if n := sum(e.s.m.objects); n != objects {
		t.Errorf("%g writes to the API server after converging, want none", n-objects)
	}
	if n := sum(e.s.m.syncErrors); n != 0 {
		t.Errorf("%g sync errors, want none", n)
	}

	// The registry service leaves: ours go, the user's stay.
	var gone []registry.Op
	for _, op := range web {
		gone = append(gone, registry.Unregister(op.Endpoint))
	}
	e.apply(gone...)
	e.waitFor("removed", func() error { return sameMap(e.exported(), map[string]string{}) })
	if _, err := cs.CoreV1().Services(ns).Get(ctx, "api", metav1.GetOptions{}); err != nil {
		t.Errorf("the user's Service: %v", err)
	}
	if _, err := cs.DiscoveryV1().EndpointSlices(ns).Get(ctx, api.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the user's slice: %v", err)
	}
}

// An address the API server refuses in a slice (loopback, link-local,
// unspecified, IPv4-mapped IPv6…) is left out: it neither blocks the other
// addresses of its slice nor freezes the slice with addresses that have left.
func TestKubeExportLeavesOutAddressesTheAPIServerRefuses(t *testing.T) {
	c := kubetest.Start(t)
	ctx := context.Background()
	cs := c.Clientset
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e := start(t, Config{Client: cs, Export: &ExportConfig{Namespace: ns}, Resync: 50 * time.Millisecond})
	a, b := ep(other, "web", "http", "10.0.0.1", 8080), ep(other, "web", "http", "10.0.0.2", 8080)
	e.apply(registerAll(a, b)...)
	e.waitFor("exported", func() error {
		return sameMap(e.exported(), map[string]string{"web": "ports http=TCP/8080/http; IPv4[http]: 10.0.0.1,10.0.0.2"})
	})

	// 10.0.0.2 leaves as a loopback entry (`switchboard dev` in another cluster)
	// arrives: the slice is updated without either.
	e.apply(registry.Unregister(b), registry.Register(ep(other, "web", "http", "127.0.0.1", 8080)))
	e.waitFor("updated", func() error {
		return sameMap(e.exported(), map[string]string{"web": "ports http=TCP/8080/http; IPv4[http]: 10.0.0.1"})
	})

	// Every kind of refused address, new slices of both families, an IPv4-mapped
	// address, and a service with nothing exportable.
	var more []endpoint.Endpoint
	for _, x := range refusedAddrs {
		more = append(more, ep(other, "web", "http", x, 8080), ep(other, "web", "grpc", x, 9090))
	}
	more = append(more, ep(other, "web", "grpc", "2001:db8::1", 9090), ep(other, "web", "grpc", "::ffff:10.0.0.3", 9090),
		ep(other, "loop", "http", "::1", 8080), ep(other, "loop", "http", "127.0.0.2", 8080))
	e.apply(registerAll(more...)...)
	e.waitFor("exported", func() error {
		return sameMap(e.exported(), map[string]string{
			"web": "ports grpc=TCP/9090/grpc,http=TCP/8080/http; IPv4[grpc]: 10.0.0.3; IPv4[http]: 10.0.0.1; IPv6[grpc]: 2001:db8::1",
		})
	})
	e.atLeast("resyncs", e.s.m.syncs.WithLabelValues(dirExport), testutil.ToFloat64(e.s.m.syncs.WithLabelValues(dirExport))+10)
	if n := sum(e.s.m.syncErrors); n != 0 {
		t.Errorf("%g sync errors, want none", n)
	}
	if _, err := cs.CoreV1().Services(ns).Get(ctx, "loop", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Service loop, which has no address to export: %v, want none", err)
	}
}

// sliceAddress refuses exactly the addresses the API server refuses in a slice
// of the address's family, and takes an IPv4-mapped address for the IPv4 one,
// which the API server refuses to hold as written in either family.
func TestKubeEndpointAddressRules(t *testing.T) {
	c := kubetest.Start(t)
	ctx := context.Background()
	cs := c.Clientset
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	accepts := func(fam discoveryv1.AddressType, addr string) error {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "rules", Namespace: ns},
			AddressType: fam,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}}},
		}
		_, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && !apierrors.IsInvalid(err) {
			t.Fatalf("create a slice holding %s: %v", addr, err)
		}
		return err
	}
	for _, addr := range []string{
		"10.0.0.1", "100.64.0.1", "255.255.255.255", "169.253.255.255", "224.0.1.1", "239.255.255.250",
		"2001:db8::1", "fec0::1", "ff01::1", "ff05::1", "64:ff9b::a00:1", "2002::1", "fc00::1",
		"0.0.0.0", "127.0.0.1", "127.255.255.254", "169.254.0.1", "169.254.255.255", "224.0.0.1", "224.0.0.255",
		"::", "::1", "fe80::1", "febf:ffff::1", "ff02::1", "ff12::1", "ff32::1",
		"::ffff:10.0.0.1", "::ffff:127.0.0.1", "::ffff:169.254.0.1",
	} {
		a := netip.MustParseAddr(addr)
		got, why := sliceAddress(addr)
		if a.Is4In6() {
			for _, fam := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6} {
				if accepts(fam, addr) == nil {
					t.Errorf("the API server takes %s in an %s slice: export could write it as it is", addr, fam)
				}
			}
			if want := a.Unmap(); got != want {
				t.Errorf("sliceAddress(%s) = %s, want %s", addr, got, want)
			}
			continue
		}
		fam := discoveryv1.AddressTypeIPv6
		if a.Is4() {
			fam = discoveryv1.AddressTypeIPv4
		}
		err := accepts(fam, addr)
		switch {
		case err == nil && why != "":
			t.Errorf("sliceAddress(%s) refuses it (%s), the API server takes it", addr, why)
		case err != nil && why == "":
			t.Errorf("sliceAddress(%s) takes it, the API server refuses it: %v", addr, err)
		case why == "" && got.String() != addr:
			t.Errorf("sliceAddress(%s) = %s, want it as it is", addr, got)
		}
	}
}
