package xds

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// tracker follows the open streams through go-control-plane's callbacks: what each
// asked for (the demand), what it was last sent (to settle NACKs), and the metrics.
type tracker struct {
	m       *metrics
	log     *slog.Logger
	views   viewCounter
	changed chan struct{}

	mu      sync.Mutex
	streams map[streamID]*stream
	nodes   map[string]int // node id → open streams
	last    []string       // the last demand signalled; ["*"] for all
	// notify, when set (Server.OnChange), is called after what Clients returns
	// may have changed.
	notify atomic.Pointer[func()]
}

// streamID names an open stream. go-control-plane numbers SotW and delta streams
// with counters of their own, both from 1: the id alone does not tell them apart.
type streamID struct {
	delta bool
	id    int64
}

// viewCounter keeps a snapshot per view while a stream uses it (the Server).
type viewCounter interface {
	acquire(view)
	release(view)
}

type stream struct {
	node   string
	view   *view                    // of the first node sent; nil before it
	opened time.Time                // the stream's first request
	subs   map[string]*subscription // by type URL
	sent   map[string]string        // type URL → version of the last response (delta: its system version)
}

// subscription is what one stream asked for of one type.
type subscription struct {
	wildcard bool
	names    map[string]bool
}

func newTracker(m *metrics, log *slog.Logger, views viewCounter) *tracker {
	return &tracker{m: m, log: log, views: views, changed: make(chan struct{}, 1), streams: map[streamID]*stream{}, nodes: map[string]int{}}
}

func (t *tracker) callbacks() serverv3.CallbackFuncs {
	return serverv3.CallbackFuncs{
		StreamOpenFunc:      func(context.Context, int64, string) error { t.m.streams.Inc(); return nil },
		DeltaStreamOpenFunc: func(context.Context, int64, string) error { t.m.streams.Inc(); return nil },
		StreamClosedFunc:    func(id int64, _ *corev3.Node) { t.closed(streamID{id: id}) },
		DeltaStreamClosedFunc: func(id int64, _ *corev3.Node) {
			t.closed(streamID{delta: true, id: id})
		},
		StreamRequestFunc:      t.request,
		StreamDeltaRequestFunc: t.deltaRequest,
		StreamResponseFunc: func(_ context.Context, id int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
			t.m.pushes.WithLabelValues(shortType(resp.GetTypeUrl())).Inc()
			t.sent(streamID{id: id}, resp.GetTypeUrl(), resp.GetVersionInfo())
		},
		StreamDeltaResponseFunc: func(id int64, _ *discoveryv3.DeltaDiscoveryRequest, resp *discoveryv3.DeltaDiscoveryResponse) {
			t.m.pushes.WithLabelValues(shortType(resp.GetTypeUrl())).Inc()
			// Only SotW requests read sent back (to settle NACKs); for a delta
			// stream it is what Clients shows.
			t.sent(streamID{delta: true, id: id}, resp.GetTypeUrl(), resp.GetSystemVersionInfo())
		},
	}
}

// stream returns the state of stream id, created on its first request; t.mu is held.
func (t *tracker) stream(id streamID, node *corev3.Node) *stream {
	s := t.streams[id]
	if s == nil {
		s = &stream{subs: map[string]*subscription{}, sent: map[string]string{}, opened: time.Now()}
		t.streams[id] = s
	}
	if s.node == "" && node.GetId() != "" {
		s.node = node.GetId()
		t.nodes[s.node]++
		t.m.proxies.Set(float64(len(t.nodes)))
	}
	return s
}

func (t *tracker) closed(id streamID) {
	t.m.streams.Dec()
	t.mu.Lock()
	var v *view
	if s := t.streams[id]; s != nil {
		v = s.view
		delete(t.streams, id)
		if s.node != "" {
			if t.nodes[s.node]--; t.nodes[s.node] <= 0 {
				delete(t.nodes, s.node)
			}
			t.m.proxies.Set(float64(len(t.nodes)))
		}
	}
	t.mu.Unlock()
	if v != nil {
		t.views.release(*v)
	}
	t.poke()
	t.demandMayHaveChanged()
}

// errViewChanged ends a stream whose node names another view (another locality, or
// another kind of client) than its first: its open watches of every type live under
// the old view's snapshot cache key, and only the watch of the request naming the new
// node would move, so the others would never see a change again (and go with the old
// view's snapshot if this stream was its last). Unavailable makes Envoy and gRPC
// reconnect, now sending their new node from the first request.
var errViewChanged = status.Error(codes.Unavailable, "xds: the node changed its locality or kind mid-stream; reconnect")

// setView points stream s at node's view on its first request that names a node,
// and returns the view to acquire once t.mu is no longer held (the Server takes its
// own lock). go-control-plane calls the request callbacks before it asks the cache
// for the request's resources, so the view's snapshot exists by then. A later node
// of another view is errViewChanged; the stream keeps its view until it closes.
func (s *stream) setView(node *corev3.Node) (*view, error) {
	if node == nil {
		return nil, nil // a later request need not repeat its node
	}
	v := viewOf(node)
	switch {
	case s.view == nil:
		s.view = &v
		return s.view, nil
	case *s.view != v:
		return nil, errViewChanged
	}
	return nil, nil
}

// acquireView applies what setView returned; t.mu is not held.
func (t *tracker) acquireView(v *view) {
	if v != nil {
		t.views.acquire(*v)
	}
}

// viewChanged logs a stream ended by errViewChanged; t.mu is held.
func (t *tracker) viewChanged(s *stream, node *corev3.Node) {
	t.log.Info("ending an xDS stream whose node changed its locality or kind; the client reconnects",
		"node", s.node, "from", s.view.key(), "to", viewOf(node).key())
}

// request records a SotW request. A NACK is counted and logged, and its version is
// set to the one rejected: the snapshot cache resends whenever a request's version
// differs from the snapshot's, and would otherwise push the rejected resources again
// at once, over and over. The client gets the next change instead.
func (t *tracker) request(id int64, req *discoveryv3.DiscoveryRequest) error {
	t.mu.Lock()
	s := t.stream(streamID{id: id}, req.GetNode())
	acquire, err := s.setView(req.GetNode())
	if err != nil {
		t.viewChanged(s, req.GetNode())
		t.mu.Unlock()
		return err
	}
	typ := req.GetTypeUrl()
	if req.GetErrorDetail() != nil {
		t.m.nacks.WithLabelValues(shortType(typ)).Inc()
		t.log.Warn("xDS client rejected a response (NACK)", "node", s.node, "type", shortType(typ),
			"version", s.sent[typ], "err", req.GetErrorDetail().GetMessage())
		if v, ok := s.sent[typ]; ok {
			req.VersionInfo = v
		}
	}
	names := req.GetResourceNames()
	s.subs[typ] = &subscription{wildcard: isWildcard(typ, names), names: toSet(names)}
	t.mu.Unlock()
	t.acquireView(acquire)
	t.poke()
	t.demandMayHaveChanged()
	return nil
}

// deltaRequest records a delta request; delta clients name what they add and drop.
func (t *tracker) deltaRequest(id int64, req *discoveryv3.DeltaDiscoveryRequest) error {
	t.mu.Lock()
	s := t.stream(streamID{delta: true, id: id}, req.GetNode())
	acquire, err := s.setView(req.GetNode())
	if err != nil {
		t.viewChanged(s, req.GetNode())
		t.mu.Unlock()
		return err
	}
	typ := req.GetTypeUrl()
	if req.GetErrorDetail() != nil {
		t.m.nacks.WithLabelValues(shortType(typ)).Inc()
		t.log.Warn("xDS client rejected a delta response (NACK)", "node", s.node, "type", shortType(typ),
			"err", req.GetErrorDetail().GetMessage())
	}
	sub := s.subs[typ]
	if sub == nil {
		// The first request of a type: no names means a wildcard (LDS and CDS only).
		sub = &subscription{wildcard: isWildcard(typ, req.GetResourceNamesSubscribe()), names: map[string]bool{}}
		s.subs[typ] = sub
	}
	for _, n := range req.GetResourceNamesSubscribe() {
		if n == "*" {
			sub.wildcard = true
		} else {
			sub.names[n] = true
		}
	}
	for _, n := range req.GetResourceNamesUnsubscribe() {
		if n == "*" {
			sub.wildcard = false
		}
		delete(sub.names, n)
	}
	t.mu.Unlock()
	t.acquireView(acquire)
	t.poke()
	t.demandMayHaveChanged()
	return nil
}

// isWildcard says whether a subscription to names asks for every resource: "*" does,
// and so does an empty list for listeners and clusters (xDS's legacy wildcard).
func isWildcard(typeURL string, names []string) bool {
	if slices.Contains(names, "*") {
		return true
	}
	return len(names) == 0 && (typeURL == resource.ListenerType || typeURL == resource.ClusterType)
}

func toSet(names []string) map[string]bool {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		if n != "*" {
			set[n] = true
		}
	}
	return set
}

// serviceOf maps a resource name back to its service: listeners and routes are
// named after the service, clusters and load assignments after service|protocol.
func serviceOf(name string) string {
	if i := strings.IndexByte(name, '|'); i >= 0 {
		return name[:i]
	}
	return name
}

// demand is the union of what the open streams asked for.
func (t *tracker) demand() (services []string, all bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	set := map[string]bool{}
	for _, s := range t.streams {
		for _, sub := range s.subs {
			if sub.wildcard {
				return nil, true
			}
			for n := range sub.names {
				set[serviceOf(n)] = true
			}
		}
	}
	for n := range set {
		services = append(services, n)
	}
	slices.Sort(services)
	return services, false
}

// demandMayHaveChanged signals DemandChanged when the demand differs from the last
// one signalled.
func (t *tracker) demandMayHaveChanged() {
	services, all := t.demand()
	now := services
	if all {
		now = []string{"*"} // no service name is "*"
	}
	t.mu.Lock()
	same := slices.Equal(now, t.last)
	t.last = now
	t.mu.Unlock()
	if same {
		return
	}
	select {
	case t.changed <- struct{}{}:
	default:
	}
}
