package registry

import (
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// sum tells apart endpoints of one key that endpoint.Equal tells apart, and only
// those: annotations count whatever their order, and no field's bytes can pass for
// another's.
func TestSum(t *testing.T) {
	base := endpoint.Endpoint{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.1", Port: 80,
		Node: "n1", Priority: 1, Weight: 2, TTL: endpoint.TTL(time.Minute), Region: "r", Zone: "z",
		Annotations: map[string]string{"a": "1", "b": "2"}}
	same := base.Clone()
	same.Annotations = map[string]string{"b": "2", "a": "1"}
	if sum(base) != sum(same) {
		t.Fatal("equal endpoints have different sums")
	}
	for name, change := range map[string]func(*endpoint.Endpoint){
		"node":             func(e *endpoint.Endpoint) { e.Node = "n2" },
		"node into region": func(e *endpoint.Endpoint) { e.Node, e.Region = "n1r", "" },
		"priority":         func(e *endpoint.Endpoint) { e.Priority = 2 },
		"weight":           func(e *endpoint.Endpoint) { e.Weight = 3 },
		"ttl":              func(e *endpoint.Endpoint) { e.TTL = endpoint.Never },
		"region":           func(e *endpoint.Endpoint) { e.Region = "q" },
		"zone":             func(e *endpoint.Endpoint) { e.Zone = "y" },
		"health":           func(e *endpoint.Endpoint) { e.Health = endpoint.Draining },
		"annotation":       func(e *endpoint.Endpoint) { e.Annotations["a"] = "3" },
		"annotations":      func(e *endpoint.Endpoint) { e.Annotations = map[string]string{"a": "1"} },
		"none":             func(e *endpoint.Endpoint) { e.Annotations = nil },
		"key into value":   func(e *endpoint.Endpoint) { e.Annotations = map[string]string{"a1": "", "b": "2"} },
	} {
		e := base.Clone()
		change(&e)
		if sum(e) == sum(base) {
			t.Errorf("a change of %s keeps the sum", name)
		}
	}
	one := map[string]string{"a": "b\x00c"}
	other := map[string]string{"a\x00b": "c"}
	if sum(endpoint.Endpoint{Annotations: one}) == sum(endpoint.Endpoint{Annotations: other}) {
		t.Error("an annotation's key and value can pass for another's")
	}
}

func BenchmarkSum(b *testing.B) {
	e := endpoint.Endpoint{Cluster: "prod", Service: "svc-042", Protocol: "http", Address: "10.0.1.17", Port: 8080, Priority: 1,
		Annotations: map[string]string{"version": "v1"}}
	b.ReportAllocs()
	var s uint64
	for b.Loop() {
		s += sum(e)
	}
	_ = s
}

func BenchmarkAdmit(b *testing.B) {
	e := endpoint.Endpoint{Cluster: "prod", Service: "svc-042", Protocol: "http", Address: "10.0.1.17", Port: 8080, Priority: 1,
		Annotations: map[string]string{"version": "v1"}}
	var v view
	v.admit(Event{Type: Added, Endpoint: e})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e.Weight = i
		v.admit(Event{Type: Updated, Endpoint: e})
	}
}

func BenchmarkSumNoAnnotations(b *testing.B) {
	e := endpoint.Endpoint{Cluster: "prod", Service: "svc-042", Protocol: "http", Address: "10.0.1.17", Port: 8080, Priority: 1}
	var s uint64
	for b.Loop() {
		s += sum(e)
	}
	_ = s
}
