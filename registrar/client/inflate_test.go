package client

import (
	"bytes"
	"errors"
	"testing"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/proto"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
)

var testEncoder, _ = zstd.NewWriter(nil)

// compressedPart is a FULL_SNAPSHOT part as the registrar compresses one: each
// group of endpoints one zstd frame of their fields.
func compressedPart(t testing.TB, groups ...[]*registryv1.Endpoint) *registrarv1.EndpointEvent {
	t.Helper()
	ev := &registrarv1.EndpointEvent{Type: registrarv1.EndpointEvent_FULL_SNAPSHOT}
	for _, g := range groups {
		raw, err := proto.Marshal(&registrarv1.EndpointEvent{Endpoints: g})
		if err != nil {
			t.Fatal(err)
		}
		ev.Compressed = append(ev.Compressed, testEncoder.EncodeAll(raw, nil))
	}
	return ev
}

func TestInflateRestoresThePart(t *testing.T) {
	a := &registryv1.Endpoint{Cluster: "east", Service: "web", Protocol: "http", Address: "10.0.0.1", Port: 80, Annotations: map[string]string{"zone": "a"}}
	b := &registryv1.Endpoint{Cluster: "east", Service: "db", Protocol: "tcp", Address: "10.0.0.2", Port: 5432}
	c := &registryv1.Endpoint{Cluster: "west", Service: "web", Protocol: "http", Address: "10.0.0.3", Port: 80}
	ev := compressedPart(t, []*registryv1.Endpoint{a, b}, []*registryv1.Endpoint{c})
	if err := inflate(ev); err != nil {
		t.Fatal(err)
	}
	want := &registrarv1.EndpointEvent{Type: registrarv1.EndpointEvent_FULL_SNAPSHOT, Endpoints: []*registryv1.Endpoint{a, b, c}}
	if !proto.Equal(ev, want) {
		t.Fatalf("inflated %v, want %v", ev, want)
	}
}

func TestInflateRefusesWhatIsNotAPart(t *testing.T) {
	smuggle := func(m *registrarv1.EndpointEvent) *registrarv1.EndpointEvent {
		raw, _ := proto.Marshal(m)
		return &registrarv1.EndpointEvent{Compressed: [][]byte{testEncoder.EncodeAll(raw, nil)}}
	}
	for name, ev := range map[string]*registrarv1.EndpointEvent{
		"not zstd":     {Compressed: [][]byte{[]byte("not a zstd frame")}},
		"truncated":    {Compressed: [][]byte{compressedPart(t, []*registryv1.Endpoint{{Service: "web"}}).Compressed[0][:9]}},
		"not protobuf": {Compressed: [][]byte{testEncoder.EncodeAll([]byte{0xff, 0xff, 0xff}, nil)}},
		"a type":       smuggle(&registrarv1.EndpointEvent{Type: registrarv1.EndpointEvent_SNAPSHOT_COMPLETE}),
		"a version":    smuggle(&registrarv1.EndpointEvent{Version: "1.2"}),
		"frames":       smuggle(&registrarv1.EndpointEvent{Compressed: [][]byte{{1}}}),
		"a frontier":   smuggle(&registrarv1.EndpointEvent{Persisted: "1.2"}),
		"a scope":      smuggle(&registrarv1.EndpointEvent{ScopeId: 3, Resumed: true}),
	} {
		if err := inflate(ev); err == nil {
			t.Errorf("%s: inflated %v", name, ev)
		} else if name != "not zstd" && name != "truncated" && name != "not protobuf" && !errors.Is(err, errSmuggled) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A frame that decompresses past maxInflated is refused, not decompressed.
func TestInflateBoundsAFrame(t *testing.T) {
	bomb := testEncoder.EncodeAll(bytes.Repeat([]byte{0}, maxInflated+1), nil)
	if err := inflate(&registrarv1.EndpointEvent{Compressed: [][]byte{bomb}}); err == nil {
		t.Fatal("a frame decompressing past the bound was inflated")
	}
}

// FuzzInflate: whatever frames arrive, inflate returns an error or a part holding
// endpoints only, and never panics; a part compressed as the registrar does comes
// back whole.
func FuzzInflate(f *testing.F) {
	part := compressedPart(f, []*registryv1.Endpoint{{Service: "web", Address: "10.0.0.1", Port: 80}})
	f.Add(part.Compressed[0], []byte{})
	f.Add([]byte("junk"), part.Compressed[0])
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ev := &registrarv1.EndpointEvent{Compressed: [][]byte{a, b}}
		if err := inflate(ev); err != nil {
			return
		}
		if ev.GetType() != registrarv1.EndpointEvent_FULL_SNAPSHOT || len(ev.GetCompressed()) > 0 || ev.GetVersion() != "" {
			t.Fatalf("inflated into more than a part: %v", ev)
		}
	})
}
