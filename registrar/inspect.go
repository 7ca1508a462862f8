package registrar

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
	"github.com/switchboard-mesh/switchboard/internal/wire"
	"github.com/switchboard-mesh/switchboard/registrar/inspect"
	"github.com/switchboard-mesh/switchboard/registrar/internal/hub"
	"github.com/switchboard-mesh/switchboard/registrar/internal/view"
	"github.com/switchboard-mesh/switchboard/registry"
)

// The read-only introspection API, for the registrar's web page (registrar/ui)
// and other tools in the process. Its types are package inspect's, so that the
// page needs nothing else of the registrar.
//
// It must not slow the fan-out: every method holds the view's read lock only
// to copy references (ring events, entries) and does the decoding and
// allocating after, and what it knows of watchers comes from the inspector,
// under a lock of its own, never the watchers' fields that their senders write.

type (
	// Change is one change of the snapshot (inspect.Change).
	Change = inspect.Change
	// Status is the registrar's state at one moment (inspect.Status).
	Status = inspect.Status
)

var _ inspect.Source = (*Registrar)(nil)

// defaultChanges is how many changes Changes returns when asked for max <= 0.
const defaultChanges = 1024

// Changes returns the changes after version after, at most max of them, decoded
// from the history ring, and the version to continue from: the last one looked
// at (PROGRESS events, which change nothing, are passed over), or after itself
// when nothing is new. ok is false when after is no longer in the ring (or is
// not a version of this registrar): the caller reads Endpoints instead.
func (r *Registrar) Changes(after uint64, max int) (changes []Change, next uint64, ok bool) {
	if max <= 0 {
		max = defaultChanges
	}
	max = min(max, r.view.History()) // the ring holds no more
	var taken []takenEvent
	r.view.Read(func(h view.Reader) {
		if ok = h.CanResume(after); !ok {
			return
		}
		if h.Seq() == after { // nothing new: the page's idle polls allocate nothing
			return
		}
		end := min(h.Seq(), after+uint64(max))
		taken = make([]takenEvent, 0, end-after)
		for n := after + 1; n <= end; n++ {
			ev, _ := h.At(n)
			taken = append(taken, takenEvent{seq: ev.Seq, typ: ev.Type, msg: ev.Msg})
		}
	})
	if len(taken) == 0 {
		return nil, after, ok
	}
	end := taken[len(taken)-1].seq
	changes = make([]Change, 0, len(taken))
	for _, ev := range taken {
		if c, ok := ev.decode(); ok {
			changes = append(changes, c)
		}
	}
	return changes, end, true
}

// takenEvent is what Changes copies of a ring event under the lock.
type takenEvent struct {
	seq uint64
	typ wire.EventType
	msg []byte
}

// decode decodes the event's change; false for a PROGRESS.
func (ev takenEvent) decode() (Change, bool) {
	var t inspect.ChangeType
	switch ev.typ {
	case wire.EndpointAdded:
		t = inspect.Added
	case wire.EndpointUpdated:
		t = inspect.Updated
	case wire.EndpointRemoved:
		t = inspect.Removed
	default:
		return Change{}, false
	}
	ew := wire.EventEndpoint(ev.msg)
	if ew == nil {
		return Change{}, false // never: the view encoded it (wire.EncodeChange)
	}
	var p registryv1.Endpoint
	if err := proto.Unmarshal(ew, &p); err != nil {
		return Change{}, false
	}
	e, err := endpoint.FromProtoUnchecked(&p)
	if err != nil {
		return Change{}, false
	}
	return Change{Type: t, Endpoint: e, Version: ev.seq}, true
}

// Endpoints returns a copy of every visible endpoint and the version it is at
// (view.View.Endpoints). The Annotations maps are the registrar's own: read them
// only.
func (r *Registrar) Endpoints() ([]endpoint.Endpoint, uint64) { return r.view.Endpoints() }

// Status returns the watchers, the backend and the counts by cluster.
func (r *Registrar) Status() Status {
	vs := r.view.Stats()
	st := Status{Cluster: r.cfg.Cluster, Version: vs.Version, Counts: vs.Counts}
	pending := vs.Pending
	select {
	case <-r.view.Ready():
		st.Ready = true
	default:
	}
	st.Watchers = r.insp.list(st.Version, r.hub.SendClock())
	st.Backend = r.backendStatus(pending)
	return st
}

func (r *Registrar) backendStatus(pending int) inspect.Backend {
	b := inspect.Backend{Kind: backendKind(r.cfg.Backend), SyncInterval: r.cfg.SyncInterval, BackstopInterval: r.cfg.BackstopInterval,
		QueueDepth: pending, Errors: counted(r.m.syncErrors)}
	failed := counted(r.m.batches.WithLabelValues("error"))
	b.Batches, b.FailedBatches = counted(r.m.batches.WithLabelValues("ok"))+failed, failed
	y := r.syncer.Load()
	if y == nil {
		return b // not running yet
	}
	b.Feed = y.live.Load()
	_, watches := r.cfg.Backend.(registry.Watcher)
	select {
	case <-y.noFeed: // it turned out to have none
		b.NoFeed = true
	default:
		b.NoFeed = !watches
	}
	if t := y.lastFull.Load(); t != 0 {
		b.LastSync = time.Unix(0, t)
	}
	if e := y.lastErr.Load(); e != nil {
		b.LastError, b.LastErrorAt = e.msg, e.at
	}
	return b
}

// backendKind is the backend's name (a registry.Front's), else "other".
func backendKind(b any) string {
	if n, ok := b.(interface{ Name() string }); ok {
		return n.Name()
	}
	return "other"
}

// counted reads a counter the registrar keeps anyway for /metrics, so that
// Status counts nothing twice.
func counted(c prometheus.Counter) uint64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return uint64(m.GetCounter().GetValue())
}

// syncError is a failed read of the backend.
type syncError struct {
	msg string
	at  time.Time
}

// noteError records err as the last failed read.
func (y *syncer) noteError(err error) {
	y.lastErr.Store(&syncError{msg: err.Error(), at: time.Now()})
}

// inspector keeps what Status reports of the watch streams. A watcher's request,
// peer and scope are fields its sender writes, which another goroutine cannot
// read without a race; so they are copied here when the stream opens or changes
// its scope, into a watcherInfo that is never changed once stored (a new scope
// stores a new one), so that Status reads it after the lock. The watcher itself
// keeps only its cursor for Status, an atomic that fit into its struct's padding
// (watcher). Resumes are counted per node of a cluster, and a node's count is
// kept a while after its last stream ended, so that an agent that reconnects
// again and again shows it.
type inspector struct {
	mu       sync.Mutex
	watchers map[*hub.Watcher]*watcherInfo
	nodes    map[nodeKey]*nodeRecord
}

// nodeKey is a node of a cluster: nodes of two clusters may share a name.
type nodeKey struct{ cluster, node string }

// watcherInfo is 112 bytes, an allocator size class: with its map entry, what
// Status adds to a watcher's ~7.6 KiB. It is not changed once stored.
type watcherInfo struct {
	id            uint64
	node, cluster string
	peer          string   // formatted once; "" if unknown
	services      []string // at most inspect.MaxScopeNames, sorted; nil: all
	scopeSize     int
	since         int64       // Unix ns
	rec           *nodeRecord // its node's, read under the lock
	resumed       bool
}

type nodeRecord struct {
	open    int // streams open
	resumes int
}

// keepNodes is how many nodes without an open stream the inspector keeps counts
// for, beyond the ones with one.
const keepNodes = 1024

// noteOpen records a stream that openWatcher opened; its sender calls it.
func (r *Registrar) noteOpen(w *hub.Watcher, cluster string) {
	info := &watcherInfo{id: w.ID, node: w.Node, cluster: cluster, since: time.Now().UnixNano(), resumed: w.Resumed()}
	if w.Peer != nil {
		info.peer = w.Peer.String()
	}
	info.services, info.scopeSize = scopeNames(w.Services)
	k := nodeKey{cluster, w.Node}
	in := &r.insp
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.watchers == nil {
		in.watchers, in.nodes = map[*hub.Watcher]*watcherInfo{}, map[nodeKey]*nodeRecord{}
	}
	n := in.nodes[k]
	if n == nil {
		n = &nodeRecord{}
		in.nodes[k] = n
	}
	n.open++
	if w.Resumed() {
		n.resumes++
	}
	info.rec = n
	in.watchers[w] = info
}

// noteScope records w's new set of services; its sender calls it.
func (r *Registrar) noteScope(w *hub.Watcher) {
	names, size := scopeNames(w.Services)
	in := &r.insp
	in.mu.Lock()
	defer in.mu.Unlock()
	if info := in.watchers[w]; info != nil {
		next := *info // a new one: list reads the old one after the lock
		next.services, next.scopeSize = names, size
		in.watchers[w] = &next
	}
}

// noteClose forgets a stream that ended.
func (r *Registrar) noteClose(w *hub.Watcher) {
	in := &r.insp
	in.mu.Lock()
	defer in.mu.Unlock()
	if info := in.watchers[w]; info != nil {
		info.rec.open--
		delete(in.watchers, w)
	}
	if len(in.nodes) > len(in.watchers)+keepNodes {
		for k, n := range in.nodes {
			if n.open <= 0 {
				delete(in.nodes, k)
			}
		}
	}
}

// listed is what list copies of a watcher under the lock.
type listed struct {
	w       *hub.Watcher
	info    *watcherInfo
	resumes int
}

// list returns the open streams, by id, with their lag behind version, and
// when their send under way began (sendClock). The lock is held to copy
// pointers and counts only; the Watchers are built after.
func (in *inspector) list(version uint64, sendClock func(int64) time.Time) []inspect.Watcher {
	in.mu.Lock()
	taken := make([]listed, 0, len(in.watchers))
	for w, info := range in.watchers {
		taken = append(taken, listed{w, info, info.rec.resumes})
	}
	in.mu.Unlock()
	out := make([]inspect.Watcher, 0, len(taken))
	for _, t := range taken {
		info := t.info
		v := inspect.Watcher{ID: info.id, Node: info.node, Cluster: info.cluster, Peer: info.peer, AllServices: info.services == nil,
			Services: info.services, ScopeSize: info.scopeSize, Since: time.Unix(0, info.since), Resumed: info.resumed, Resumes: t.resumes}
		v.SendingSince = sendClock(t.w.SendingSince())
		// The cursor is the next version to send: everything before it is sent.
		switch c := t.w.Cursor(); {
		case c == 0:
			v.Snapshot = true
		case version+1 > c:
			v.Lag = version + 1 - c
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b inspect.Watcher) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// scopeNames returns the first inspect.MaxScopeNames of services, sorted, and
// their number; nil for every service.
func scopeNames(services map[string]struct{}) ([]string, int) {
	if services == nil {
		return nil, 0
	}
	names := slices.Sorted(maps.Keys(services))
	return slices.Clip(names[:min(len(names), inspect.MaxScopeNames)]), len(names)
}
