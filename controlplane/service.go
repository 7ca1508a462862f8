package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// Errors callers branch on; the API edge maps them to gRPC codes.
var (
	// ErrConfigMode: a topology mutation while the config file owns the topology
	// (FailedPrecondition).
	ErrConfigMode = errors.New("topology is managed by the config file (config mode)")
	// ErrNoExternalEndpoint: two groups should be linked but no node on either side has an
	// external endpoint.
	ErrNoExternalEndpoint = errors.New("no external endpoint")
	// ErrInvalidArgument: a malformed id, name or request (InvalidArgument).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrStaleSession: a disconnect or deregistration from a stream the node has since
	// replaced; nothing was changed (FailedPrecondition).
	ErrStaleSession = errors.New("stale node session")
	// ErrClaimRejected: a claim for a deleted link or from a node outside the link's
	// destination group (FailedPrecondition).
	ErrClaimRejected = errors.New("link claim rejected")
)

// Options configure a Service.
type Options struct {
	Store store.Store
	// Topology is the config file's section; nil or empty selects API mode.
	Topology *config.Topology
	Logger   *slog.Logger
	// Rand picks gateways and link targets. Tests pass a seeded one; nil seeds from the
	// runtime. It is only used under the service lock.
	Rand *rand.Rand
	// NewLinkID returns link ids; nil means random UUIDs.
	NewLinkID func() string
	// Links is injected into every link's client configuration.
	Links LinkSettings
	// Deferred leaves the restart rule to a later Reset: a standby replica must not
	// write, and resets when it takes the lead.
	Deferred bool
}

// Service is the control plane's decision logic, the spec's route service: it turns node
// lifecycle events, link claims, wildcard announcements and topology changes into link
// and route records, and reports which nodes the reconcilers must visit.
//
// All mutating methods hold one lock. That is stronger than the spec's per-node locks:
// besides serialising register/deregister of one node, it keeps decisions that span
// groups consistent (two groups registering at once would otherwise both create the link
// for their pair). Reads for the API go straight to the store.
type Service struct {
	mu       sync.Mutex
	store    store.Store
	topology *config.Topology
	log      *slog.Logger
	rng      *rand.Rand
	newID    func() string
	links    LinkSettings

	// view is the live links and the graph the planner made of them, kept across
	// operations (guarded by mu).
	view linkView

	// dropped and adopted are what link adoption remembers (adoptLinks), in memory
	// only: a restarted control plane or a new leader starts without them, and clears
	// the links anyway. Guarded by mu, and changed only once the operation that
	// decided it has committed (work.commit).
	dropped map[string]linkEnds // soft-deleted while Applied: the ends it had then
	adopted map[string]string   // adopted with its far end away: the far end

	// topoMu guards topo, the last resolved topology (read also by Segments, which
	// does not take mu).
	topoMu sync.Mutex
	topo   *resolved
}

// New starts the service on opts.Store and applies the restart rule of the mode: config
// mode wipes every record (the file rebuilds the topology, nodes rebuild the rest); API
// mode clears nodes, links and routes and keeps segments.
func New(ctx context.Context, opts Options) (*Service, error) {
	if opts.Store == nil {
		return nil, errors.New("controlplane: Options.Store is required")
	}
	s := &Service{store: opts.Store, log: opts.Logger, rng: opts.Rand, newID: opts.NewLinkID, links: opts.Links,
		dropped: map[string]linkEnds{}, adopted: map[string]string{}}
	if !opts.Topology.IsEmpty() {
		s.topology = opts.Topology
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.rng == nil {
		s.rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	if s.newID == nil {
		s.newID = uuid.NewString
	}
	if opts.Deferred {
		return s, nil
	}
	if err := s.Reset(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Reset applies the restart rule of the mode (see New); a service made Deferred
// calls it once, before its first change.
func (s *Service) Reset(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	reset := s.store.ClearRuntime
	if s.Mode() == config.ConfigMode {
		reset = s.store.ClearAll
	}
	if err := reset(ctx); err != nil {
		return fmt.Errorf("controlplane: reset store for %s mode: %w", s.Mode(), err)
	}
	clear(s.dropped)
	clear(s.adopted)
	s.log.Info("control plane state reset", "mode", s.Mode().String())
	return nil
}

// Mode reports whether the topology comes from the config file or the API.
func (s *Service) Mode() config.Mode {
	if s.topology != nil {
		return config.ConfigMode
	}
	return config.APIMode
}

// Store returns the store the service writes, for the reconcilers and list APIs.
func (s *Service) Store() store.Store { return s.store }

// Result says which nodes the reconcilers must visit after a change: LinkNodes for the
// link reconciler (keyed by a link's source node), RouteNodes for the route reconciler.
// Problems are errors that did not stop the operation, such as a group pair that cannot
// be linked for lack of an external endpoint.
type Result struct {
	LinkNodes  []string
	RouteNodes []string
	Problems   []error
}

// work collects a Result while an operation runs, and what the operation touched that
// planning must look at again: the names whose announcements changed, or — when the
// linked topology changed — every name.
type work struct {
	links map[string]bool
	// routes lists the source node of every route written, with repeats: a planning
	// step writes a thousand routes, and a slice sorted once at the end costs less
	// than a set kept as they come.
	routes   []string
	problems []error
	names    map[store.Name]bool
	graph    bool // re-plan everything
	// touched lists the links the operation wrote in a way the planner sees (made,
	// claimed, moved, deleted), for the service's copy of the links to re-read.
	touched map[string]bool
	// moved lists the touched links that changed only their ends.
	moved []string
	// commit lists the changes to the service's memory of partitions (adoptLinks),
	// made once the operation's transaction has committed.
	commit []func()
}

// onCommit runs f once the operation's transaction has committed.
func (w *work) onCommit(f func()) { w.commit = append(w.commit, f) }

// committed runs the functions given to onCommit.
func (w *work) committed() {
	for _, f := range w.commit {
		f()
	}
}

func newWork() *work {
	return &work{links: map[string]bool{}, names: map[store.Name]bool{},
		touched: map[string]bool{}}
}

// name marks a name for re-planning.
func (w *work) name(n store.Name) { w.names[n] = true }

// relinked marks a link as changed where the planner sees it: made, deleted, claimed
// or moved to another node. A link that only changed ends moves no tree, and only the
// routes over it are re-planned; one that gave a group pair its hop or took it away
// can reshape every tree, and every route is. "" means the topology rules changed.
func (w *work) relinked(linkID string) {
	if linkID == "" {
		w.graph = true
		return
	}
	w.touched[linkID] = true
}

func (w *work) link(nodeID string) {
	if nodeID != "" && nodeID != store.AllNodes {
		w.links[nodeID] = true
	}
}

func (w *work) route(nodeID string) {
	if nodeID != "" && nodeID != store.AllNodes {
		w.routes = append(w.routes, nodeID)
	}
}

func (w *work) result() Result {
	routes := slices.Compact(slices.Sorted(slices.Values(w.routes)))
	if routes == nil {
		routes = []string{}
	}
	return Result{LinkNodes: sortedKeys(w.links), RouteNodes: routes, Problems: w.problems}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// NodeID returns the effective node id: "{group}/{id}", or id without a group.
func NodeID(group, id string) string {
	if group == "" {
		return id
	}
	return group + "/" + id
}

// GroupOf returns the group part of an effective node id ("" for a bare id).
func GroupOf(nodeID string) string {
	if i := strings.IndexByte(nodeID, '/'); i >= 0 {
		return nodeID[:i]
	}
	return ""
}

func (s *Service) pick(n int) int { return s.rng.IntN(n) }
