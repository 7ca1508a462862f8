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
