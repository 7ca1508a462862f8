package registrar

// The hooks package registrar/aether serves Aether's registrar API through. That
// package cannot import this one (server.go registers its service, so this one
// imports it): it states what it needs as an interface, aether.Registrar, and
// aetherHooks is this registrar seen through it. Everything goes through the
// same paths as Switchboard's own API: writes through accept (validation of the
// cluster, writeCheck's authorization, the write-behind writer), reads through
// mayRead and readyErr, and watches through watchStream, so an Aether watch is
// one of the registrar's own watchers (history ring, resume tokens, slow-watcher
// resync) whose messages are handed to the Aether service instead of a client.

import (
	"context"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/internal/wire"
	"github.com/switchboard-mesh/switchboard/registrar/aether"
	"github.com/switchboard-mesh/switchboard/registrar/internal/view"
	"github.com/switchboard-mesh/switchboard/registrar/token"
	"github.com/switchboard-mesh/switchboard/registry"
)

// registerAether registers Aether's registrar API (package registrar/aether) on s,
// beside the Registrar API, over the same snapshot. s must have been made with
// ServerOptions.
func (r *Registrar) registerAether(s grpc.ServiceRegistrar) {
	aether.Register(s, aetherHooks{r: r})
}

// aetherHooks implements aether.Registrar.
type aetherHooks struct{ r *Registrar }

var _ aether.Registrar = aetherHooks{}

func (h aetherHooks) Cluster() string { return h.r.cfg.Cluster }

// Accepts reports whether writes for cluster are taken here (Config.Cluster and
// Config.AlsoAccept).
func (h aetherHooks) Accepts(cluster string) bool { return h.r.cfg.accepts(cluster) }

// CallerNode is the node the caller's certificate names when the registrar
// authorizes writes, else "": the node an Aether registration is stored under,
// which writeCheck then holds the caller to.
func (h aetherHooks) CallerNode(ctx context.Context) string {
	a := h.r.cfg.Authorizer
	if a == nil {
		return ""
	}
	who, _ := a.callerOf(ctx)
	return who.node
}

// Write accepts ops as RegisterEndpoint and UnregisterEndpoint do: all of this
// registrar's cluster, authorized by writeCheck, all or nothing.
func (h aetherHooks) Write(ctx context.Context, ops []registry.Op) error {
	for i, op := range ops {
		if !h.r.cfg.accepts(op.Endpoint.Cluster) {
			return status.Errorf(codes.PermissionDenied,
				"endpoints[%d].cluster %q: this registrar accepts writes for cluster %q only", i, op.Endpoint.Cluster, h.r.cfg.Cluster)
		}
	}
	_, _, err := h.r.acceptHeld(ctx, ops, "")
	return err
}

// MayRead and Ready are the checks of every read of ours (ListAllEndpoints).
func (h aetherHooks) MayRead(ctx context.Context) error { return h.r.mayRead(ctx) }
func (h aetherHooks) Ready() error                      { return h.r.readyErr() }

// Endpoints returns the visible endpoints f matches, unordered, and the version
// they were read at. The endpoints share their annotations with the snapshot:
// callers only read them.
func (h aetherHooks) Endpoints(f endpoint.Filter) ([]endpoint.Endpoint, string) {
	f = f.Normalize()
	var out []endpoint.Endpoint
	var at token.Version
	h.r.view.Read(func(v view.Reader) {
		for e := range v.Entries() {
			if f.Match(e) {
				out = append(out, e)
			}
		}
		at = v.Current()
	})
	return out, at.String()
}

// Catalog returns the number of visible endpoints per service, of the protocols
// visible reports true for, at version: the current counts, less the additions
// and removals the history ring holds since version. ok is false when version is
// not this replica's, or the ring no longer holds every event since.
func (h aetherHooks) Catalog(version string, visible func(protocol string) bool) (counts map[string]int, ok bool) {
	v, err := token.Parse(version)
	if err != nil {
		return nil, false
	}
	h.r.view.Read(func(r view.Reader) { counts, ok = catalog(r, v, visible) })
	if !ok {
		return nil, false
	}
	for svc, n := range counts {
		if n <= 0 {
			delete(counts, svc)
		}
	}
	return counts, true
}

// catalog is Catalog under the view's read lock.
func catalog(r view.Reader, v token.Version, visible func(protocol string) bool) (map[string]int, bool) {
	if v.Epoch != r.Epoch() || !r.CanResume(v.Seq) {
		return nil, false
	}
	counts := map[string]int{}
	for e := range r.Entries() {
		if visible(e.Protocol) {
			counts[e.Service]++
		}
	}
	for seq := r.Seq(); seq > v.Seq; seq-- {
		ev, ok := r.At(seq)
		if !ok {
			return nil, false
		}
		if d := ringDelta(ev); d != 0 && visible(ringProtocol(ev)) {
			counts[ev.Service] -= d // undone: the count before the event
		}
	}
	return counts, true
}

// ringDelta is what ev did to its service's number of endpoints.
func ringDelta(ev view.Event) int {
	switch ev.Type {
	case wire.EndpointAdded:
		return 1
	case wire.EndpointRemoved:
		return -1
	}
	return 0
}

// ringProtocol is the protocol of a change event's endpoint; our own encoding,
// so it decodes.
func ringProtocol(ev view.Event) string {
	var m registrarv1.EndpointEvent
	if err := proto.Unmarshal(ev.Msg, &m); err != nil {
		return ""
	}
	return m.GetEndpoint().GetProtocol()
}

// Watch runs one of the registrar's watchers for an Aether stream: req is its
// request (as our client would send it), and send gets every message the
// watcher sends, in wire form (an encoded registrarv1.EndpointEvent, which send
// must not keep). stream's context is the watcher's, for mayRead and for its
// end. It returns when the stream ends, with the error that ended it (send's,
// when send failed).
func (h aetherHooks) Watch(stream grpc.ServerStream, req *registrarv1.WatchEndpointsRequest, send func([]byte) error) error {
	b, err := proto.Marshal(req)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return h.r.watchStream(&rawStream{ServerStream: stream, req: b, send: send}, false)
}

// rawStream is the stream an Aether watcher runs on: its one request is req, and
// what the watcher sends goes to send in wire form.
type rawStream struct {
	grpc.ServerStream
	req   []byte
	taken bool
	send  func([]byte) error
}

// RecvMsg hands the watcher its request, as our codec would (undecoded, see
// recvWatchRequest); there is no other.
func (s *rawStream) RecvMsg(m any) error {
	b, ok := m.(*[]byte)
	if !ok || s.taken {
		return io.EOF
	}
	s.taken, *b = true, s.req
	return nil
}

// SendMsg takes each kind of message the watcher sends (wire.go, fanout.go, and
// the hub's batch.go).
func (s *rawStream) SendMsg(m any) error {
	switch v := m.(type) {
	case *shared:
		if v.raw == nil { // a snapshot chunk: a run of its buckets' parts
			return s.send(v.data.Materialize())
		}
		return s.send(v.bytes())
	case encoded:
		return s.send(v)
	case mem.Buffer:
		// A paced message (only to a watcher that accepts batches, which the
		// Aether service does not ask for): freeing it is its landing.
		defer v.Free()
		return s.send(v.ReadOnlyData())
	case proto.Message:
		b, err := proto.Marshal(v)
		if err != nil {
			return err
		}
		return s.send(b)
	}
	return fmt.Errorf("registrar: aether watch: message of type %T", m)
}
