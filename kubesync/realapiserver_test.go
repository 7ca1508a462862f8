package kubesync

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
