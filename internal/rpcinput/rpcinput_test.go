package rpcinput

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
)

// withString appends one more occurrence of a string field to a message: proto's
// last-one-wins rule makes it the field's value.
func withString(b []byte, num protowire.Number, v string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, []byte(v))
}

func endpointBytes(t *testing.T, mut func([]byte) []byte) []byte {
	t.Helper()
	b, err := proto.Marshal(&registryv1.Endpoint{Cluster: "east", Service: "web", Protocol: "http", Address: "10.0.0.1", Port: 80})
	if err != nil {
		t.Fatal(err)
	}
	return mut(b)
}

func TestInvalidUTF8FieldNamesThePath(t *testing.T) {
	request := func(eps ...[]byte) []byte {
		var out []byte
		for _, e := range eps {
			out = protowire.AppendTag(out, 1, protowire.BytesType)
			out = protowire.AppendBytes(out, e)
		}
		return out
	}
	good := endpointBytes(t, func(b []byte) []byte { return b })
	annotation := func(k, v string) func([]byte) []byte {
		return func(b []byte) []byte {
			var entry []byte
			entry = withString(entry, 1, k)
			entry = withString(entry, 2, v)
			b = protowire.AppendTag(b, 9, protowire.BytesType)
			return protowire.AppendBytes(b, entry)
		}
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"second endpoint's service", request(good, endpointBytes(t, func(b []byte) []byte { return withString(b, 2, "w\xffb") })), "endpoints[1].service"},
		{"annotation value", request(endpointBytes(t, annotation("team", "a\xc3"))), `endpoints[0].annotations["team"]`},
		{"annotation key", request(endpointBytes(t, annotation("te\xffam", "a"))), "endpoints[0].annotations key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := proto.Unmarshal(tc.data, &registrarv1.RegisterEndpointRequest{}); err == nil {
				t.Fatal("the fixture decodes: it holds no invalid UTF-8")
			}
			got, ok := InvalidUTF8Field(tc.data, (&registrarv1.RegisterEndpointRequest{}).ProtoReflect().Descriptor())
			if !ok || got != tc.want {
				t.Fatalf("InvalidUTF8Field = %q, %v; want %q", got, ok, tc.want)
			}
		})
	}
	if got, ok := InvalidUTF8Field(request(good), (&registrarv1.RegisterEndpointRequest{}).ProtoReflect().Descriptor()); ok {
		t.Fatalf("a valid request reported %q", got)
	}
}

// Whatever the bytes, the walk never panics, and whenever proto rejects a request
// for invalid UTF-8 it finds the field.
func FuzzInvalidUTF8Field(f *testing.F) {
	f.Add(withString(nil, 2, "\xff"))
	f.Add(endpointBytes(&testing.T{}, func(b []byte) []byte { return b }))
	md := (&registryv1.Endpoint{}).ProtoReflect().Descriptor()
	f.Fuzz(func(t *testing.T, data []byte) {
		_, found := InvalidUTF8Field(data, md)
		err := proto.Unmarshal(data, &registryv1.Endpoint{})
		if err != nil && strings.Contains(err.Error(), "UTF-8") && !found {
			t.Fatalf("proto says %v, the walk found no field", err)
		}
	})
}
