package wire

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// MarshalEndpoint's bytes are protobuf's deterministic encoding of the endpoint,
// whichever encoder made them: state digests compare them across processes.
func TestMarshalEndpointIsDeterministic(t *testing.T) {
	base := benchEndpoint()
	cases := []endpoint.Endpoint{base, {}, {Cluster: "c", Service: "s", Protocol: "tcp", Address: "::1"}}
	for _, mod := range []func(*endpoint.Endpoint){
		func(e *endpoint.Endpoint) { e.Annotations = nil },
		func(e *endpoint.Endpoint) { e.Annotations = map[string]string{"": ""} },
		func(e *endpoint.Endpoint) { e.Annotations = map[string]string{"a": "1", "b": "2", "c": "3", "d": "4"} },
		func(e *endpoint.Endpoint) { e.TTL = endpoint.Never },
		func(e *endpoint.Endpoint) { e.TTL = endpoint.TTL(1500 * time.Millisecond) },
		func(e *endpoint.Endpoint) { e.TTL = 0 },
		func(e *endpoint.Endpoint) { e.Health = endpoint.Health(2) },
		func(e *endpoint.Endpoint) { e.Port, e.Priority, e.Weight = 65535, 0, 1<<31 },
	} {
		e := base
		mod(&e)
		cases = append(cases, e)
	}
	for _, e := range cases {
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(e.ToProto())
		if err != nil {
			t.Fatal(err)
		}
		for range 5 { // map order changes from call to call
			if got := MarshalEndpoint(e); !bytes.Equal(got, want) {
				t.Fatalf("%+v:\n got %x\nwant %x", e, got, want)
			}
		}
	}
}

// An endpoint protobuf cannot encode (a string that is not UTF-8) still panics.
func TestMarshalEndpointInvalidUTF8Panics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	MarshalEndpoint(endpoint.Endpoint{Cluster: "c", Service: "s\xff"})
}

// FuzzMarshalEndpoint: whatever the endpoint, MarshalEndpoint's bytes are
// protobuf's deterministic encoding of it, or it panics where protobuf fails.
func FuzzMarshalEndpoint(f *testing.F) {
	f.Add("east", "web", "http", "10.0.0.1", uint16(80), "n1", "team", "blue", int64(90e9), uint8(0), false)
	f.Add("", "", "", "", uint16(0), "", "", "", int64(0), uint8(2), true)
	f.Add("c", "s\xff", "tcp", "::1", uint16(1), "", "k", "v", int64(1), uint8(1), false)
	f.Fuzz(func(t *testing.T, cluster, service, protocol, address string, port uint16, node, key, val string, ttl int64, health uint8, two bool) {
		e := endpoint.Endpoint{Cluster: cluster, Service: service, Protocol: protocol, Address: address, Port: int(port),
			Node: node, TTL: endpoint.TTL(ttl), Health: endpoint.Health(health % 3)}
		if key != "" || val != "" {
			e.Annotations = map[string]string{key: val}
			if two {
				e.Annotations[key+"2"] = val
			}
		}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(e.ToProto())
		defer func() {
			if r := recover(); (r != nil) != (err != nil) {
				t.Fatalf("panic %v, protobuf's error %v", r, err)
			}
		}()
		if got := MarshalEndpoint(e); !bytes.Equal(got, want) {
			t.Fatalf("%+v:\n got %x\nwant %x", e, got, want)
		}
	})
}
