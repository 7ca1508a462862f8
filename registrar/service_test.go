package registrar

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

func TestRejectsBadWritesAndStoresNothing(t *testing.T) {
	b := memory.New()
	defer b.Close()
	ts := startServer(t, Config{Backend: b, BatchInterval: 10 * time.Millisecond})
	ctx := testCtx(t)
	good := ep("east", "web", "10.0.0.1", 80)
	bad := func(mut func(*registryv1.Endpoint)) *registryv1.Endpoint {
		p := ep("east", "web", "10.0.0.2", 80).ToProto()
		mut(p)
		return p
	}
	cases := []struct {
		name  string
		eps   []*registryv1.Endpoint
		code  codes.Code
		field string
	}{
		{"empty", nil, codes.InvalidArgument, "endpoints"},
		{"nil endpoint", []*registryv1.Endpoint{good.ToProto(), nil}, codes.InvalidArgument, "endpoints[1]"},
		{"address", []*registryv1.Endpoint{good.ToProto(), bad(func(p *registryv1.Endpoint) { p.Address = "10.0.0.300" })}, codes.InvalidArgument, "endpoints[1]: invalid endpoint: address"},
		{"service", []*registryv1.Endpoint{bad(func(p *registryv1.Endpoint) { p.Service = "9web" })}, codes.InvalidArgument, "service"},
		{"port", []*registryv1.Endpoint{bad(func(p *registryv1.Endpoint) { p.Port = 70000 })}, codes.InvalidArgument, "port"},
		// An unset priority (0) means the default: TestRegisterWithoutPriority.
		{"priority", []*registryv1.Endpoint{bad(func(p *registryv1.Endpoint) { p.Priority = 256 })}, codes.InvalidArgument, "priority"},
		{"annotation", []*registryv1.Endpoint{bad(func(p *registryv1.Endpoint) { p.Annotations = map[string]string{"bad key": "v"} })}, codes.InvalidArgument, "annotations"},
		{"wrong cluster", []*registryv1.Endpoint{good.ToProto(), ep("west", "web", "10.0.0.3", 80).ToProto()}, codes.PermissionDenied, `endpoints[1].cluster "west"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ts.client.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: c.eps})
			if status.Code(err) != c.code || !strings.Contains(status.Convert(err).Message(), c.field) {
				t.Fatalf("RegisterEndpoint = %v, want %s naming %q", err, c.code, c.field)
			}
		})
	}
	_, err := ts.client.UnregisterEndpoint(ctx, &registrarv1.UnregisterEndpointRequest{Endpoints: protos(ep("west", "web", "10.0.0.1", 80))})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("UnregisterEndpoint of another cluster = %v, want PermissionDenied", err)
	}
	_, err = ts.client.UnregisterEndpoint(ctx, &registrarv1.UnregisterEndpointRequest{Endpoints: protos(ep("east", "web", "nope", 80))})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "address") {
		t.Fatalf("UnregisterEndpoint with a bad address = %v, want InvalidArgument naming address", err)
	}
	_, err = ts.client.ListAllEndpoints(ctx, &registrarv1.ListAllEndpointsRequest{Service: "no such"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "service") {
		t.Fatalf("ListAllEndpoints with a bad filter = %v, want InvalidArgument naming service", err)
	}
	// The status of a server stream arrives with the first Recv.
	st, _ := ts.client.WatchEndpoints(ctx, &registrarv1.WatchEndpointsRequest{ClusterName: "bad name"})
	if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "cluster_name") {
		t.Fatalf("WatchEndpoints with a bad cluster_name = %v, want InvalidArgument naming cluster_name", err)
	}

	// A valid write afterwards goes through, proving the server was not wedged, and
	// nothing of the rejected requests reached the snapshot or the backend.
	if _, err := ts.client.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: protos(good)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the good write is persisted", func() bool { return ts.Registrar().Pending() == 0 })
	stored, err := b.List(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 1 || stored[0].Key() != good.Key() {
		t.Fatalf("backend holds %v, want only %s", stored, good.Key())
	}
	resp, err := ts.client.ListAllEndpoints(ctx, &registrarv1.ListAllEndpointsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetEndpoints()) != 1 {
		t.Fatalf("snapshot holds %d endpoints, want 1", len(resp.GetEndpoints()))
	}
}

func TestQueueFullIsResourceExhausted(t *testing.T) {
	b := &faulty{Registry: memory.New()}
	defer b.Close()
	b.failApply.Store(true)
	ts := startServer(t, Config{Backend: b, MaxQueue: 3, BatchInterval: 10 * time.Millisecond, DrainTimeout: 50 * time.Millisecond})
	ctx := testCtx(t)
	first := protos(ep("east", "web", "10.0.0.1", 80), ep("east", "web", "10.0.0.2", 80))
	if _, err := ts.client.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: first}); err != nil {
		t.Fatal(err)
	}
	// Rewriting a queued key does not grow the queue.
	if _, err := ts.client.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: first[:1]}); err != nil {
		t.Fatal(err)
	}
	over := protos(ep("east", "web", "10.0.0.3", 80), ep("east", "web", "10.0.0.4", 80))
	_, err := ts.client.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: over})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("write beyond the queue = %v, want ResourceExhausted", err)
	}
	resp, err := ts.client.ListAllEndpoints(ctx, &registrarv1.ListAllEndpointsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetEndpoints()) != 2 {
		t.Fatalf("snapshot has %d endpoints after a refused write, want the 2 accepted", len(resp.GetEndpoints()))
	}
	// The backend comes back: the queue drains and the refused write now fits.
	b.failApply.Store(false)
	eventually(t, "queue drains", func() bool { return ts.Registrar().Pending() == 0 })
	if _, err := ts.client.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: over}); err != nil {
		t.Fatalf("write after the queue drained: %v", err)
	}
}

// rawCodec sends the bytes it is given as they are, so a test can put what a
// well-behaved client never would on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { return nil }
func (rawCodec) Name() string                       { return "proto" }

// Invalid UTF-8 in a string field is bad input like any other: InvalidArgument
// naming the field, and nothing stored.
func TestInvalidUTF8IsInvalidArgument(t *testing.T) {
	b := memory.New()
	defer b.Close()
	ts := startServer(t, Config{Backend: b, BatchInterval: 5 * time.Millisecond})
	good, err := proto.Marshal(ep("east", "web", "10.0.0.1", 80).ToProto())
	if err != nil {
		t.Fatal(err)
	}
	// The endpoint's service (field 2) is overwritten by a later occurrence with
	// invalid UTF-8, as proto's last-one-wins rule allows.
	bad := protowire.AppendTag(append([]byte(nil), good...), 2, protowire.BytesType)
	bad = protowire.AppendBytes(bad, []byte("we\xffb"))
	req := protowire.AppendTag(nil, 1, protowire.BytesType)
	req = protowire.AppendBytes(req, bad)
	for _, method := range []string{"RegisterEndpoint", "UnregisterEndpoint"} {
		err := ts.conn.Invoke(testCtx(t), "/switchboard.registrar.v1.Registrar/"+method, req, new([]byte), grpc.ForceCodec(rawCodec{}))
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "service") {
			t.Fatalf("%s with invalid UTF-8 = %v, want InvalidArgument naming the service field", method, err)
		}
	}
	filter := protowire.AppendTag(nil, 2, protowire.BytesType)
	filter = protowire.AppendBytes(filter, []byte("\xff"))
	err = ts.conn.Invoke(testCtx(t), "/switchboard.registrar.v1.Registrar/ListAllEndpoints", filter, new([]byte), grpc.ForceCodec(rawCodec{}))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "service") {
		t.Fatalf("ListAllEndpoints with invalid UTF-8 = %v, want InvalidArgument naming the service field", err)
	}
	st, err := ts.conn.NewStream(testCtx(t), &grpc.StreamDesc{ServerStreams: true}, "/switchboard.registrar.v1.Registrar/WatchEndpoints", grpc.ForceCodec(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	watch := protowire.AppendTag(nil, 2, protowire.BytesType)
	watch = protowire.AppendBytes(watch, []byte("node\xff"))
	if err := st.SendMsg(watch); err != nil {
		t.Fatal(err)
	}
	_ = st.CloseSend()
	if err := st.RecvMsg(new([]byte)); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "node_name") {
		t.Fatalf("WatchEndpoints with invalid UTF-8 = %v, want InvalidArgument naming node_name", err)
	}
	if n := ts.Registrar().Pending(); n != 0 {
		t.Fatalf("%d writes pending after rejected requests", n)
	}
	if eps, err := b.List(testCtx(t), endpoint.Filter{}); err != nil || len(eps) != 0 {
		t.Fatalf("backend holds %v (%v) after rejected requests", eps, err)
	}
}
