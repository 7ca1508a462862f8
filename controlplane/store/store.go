package store

import (
	"context"
	"errors"
	"strconv"
)

// Errors callers branch on. Implementations wrap them with the record's identity.
var (
	ErrNotFound          = errors.New("not found")
	ErrExists            = errors.New("already exists")
	ErrInvalidTransition = errors.New("invalid status transition")
	ErrClosed            = errors.New("store closed")
	// ErrConflict: a write's version precondition failed because the record changed
	// since the caller read it. Nothing was written.
	ErrConflict = errors.New("record changed since it was read")
)

// ErrTxDone is returned for a call made with a transaction's context after the
// transaction ended (committed or rolled back).
var ErrTxDone = errors.New("transaction already ended")

// Store persists the control plane's state. Every method is safe for concurrent use and
// each call is atomic on its own; Atomically makes several calls one change. Lists come
// back in a fixed order — nodes and segments by name, links by id, routes by id
// (creation order) — so both implementations answer alike.
type Store interface {
	// Atomically runs fn as one transaction. Every call fn makes on this store with the
	// context it is handed (or one derived from it) belongs to the transaction: it sees
	// the transaction's earlier writes, and all of them take effect together when fn
	// returns nil. When fn returns an error or panics, none of them does, and the error
	// is returned as is. Other callers never observe a transaction half done.
	//
	// The transaction travels in the context rather than as a second Store value so
	// that wrappers around a Store (metrics, fault injection, recording) see the calls
	// made inside a transaction like any other; they need not know transactions exist.
	//
	// The transaction takes the store's write lock at its first write, not when it
	// starts (SQLite's deferred transactions, without their failure when another
	// writer committed meanwhile): reads before the first write see the latest
	// committed state, as reads outside a transaction do, and keep no writer waiting.
	// From the first write on, the transaction's view is its own.
	//
	// Version checks (IfVersion, DeleteLinkIf, DeleteRouteIf) work inside a
	// transaction as outside, against the transaction's view. Atomically called with a
	// context that already carries a transaction of this store nests: the inner fn's
	// writes are undone alone if it fails, and are committed with the outer
	// transaction. The transaction's context is for one goroutine at a time, and calls
	// made with any other context while a transaction holds the lock may wait for it
	// to end (so after its first write a transaction must not wait on such a call).
	// After Atomically returns, calls with the transaction's context fail with
	// ErrTxDone.
	Atomically(ctx context.Context, fn func(ctx context.Context) error) error

	// SaveNode creates or replaces the node with n.ID; LastUpdated is set by the store.
	SaveNode(ctx context.Context, n Node) error
	GetNode(ctx context.Context, id string) (Node, error)
	ListNodes(ctx context.Context, f NodeFilter) ([]Node, error)
	// ListGroups returns the distinct non-empty groups of stored nodes, sorted.
	ListGroups(ctx context.Context) ([]string, error)
	SetNodeConnected(ctx context.Context, id string, connected bool) error
	DeleteNode(ctx context.Context, id string) error

	// CreateLink stores a new link; its status must be Pending and it must not be
	// deleted. A duplicate id fails with ErrExists.
	CreateLink(ctx context.Context, l Link) error
	GetLink(ctx context.Context, id string) (Link, error)
	ListLinks(ctx context.Context, f LinkFilter) ([]Link, error)
	// UpdateLink changes the fields set in u at once and returns the result, its
	// Version one higher. A stale u.IfVersion fails with ErrConflict, a status change
	// the link state machine forbids with ErrInvalidTransition; either changes
	// nothing. Status LinkDeleted marks the link deleted.
	UpdateLink(ctx context.Context, id string, u LinkUpdate) (Link, error)
	// DeleteLink removes the link (the hard delete).
	DeleteLink(ctx context.Context, id string) error
	// DeleteLinkIf removes the link only if it is still at version (ErrConflict if not).
	DeleteLinkIf(ctx context.Context, id string, version int64) error

	// CreateRoute stores a new route and returns it with its id. An expansion starts
	// Pending, a template Pending or Applied. A route with the same Key, deleted or not,
	// fails with ErrExists.
	CreateRoute(ctx context.Context, r Route) (Route, error)
	GetRoute(ctx context.Context, id int64) (Route, error)
	ListRoutes(ctx context.Context, f RouteFilter) ([]Route, error)
	// UpdateRoute is UpdateLink for routes. Changing the source node re-keys the route
	// and fails with ErrExists if another route has the new key.
	UpdateRoute(ctx context.Context, id int64, u RouteUpdate) (Route, error)
	// DeleteRoute removes the route (the hard delete).
	DeleteRoute(ctx context.Context, id int64) error
	// DeleteRouteIf is DeleteLinkIf for routes.
	DeleteRouteIf(ctx context.Context, id int64, version int64) error

	CreateSegment(ctx context.Context, name string) error
	// DeleteSegment removes the segment and its links.
	DeleteSegment(ctx context.Context, name string) error
	// ListSegments returns every segment with its links.
	ListSegments(ctx context.Context) ([]Segment, error)
	// AddSegmentLink stores the edge, normalised by NewSegmentLink. The segment must
	// exist (ErrNotFound) and the edge must be new (ErrExists).
	AddSegmentLink(ctx context.Context, l SegmentLink) error
	RemoveSegmentLink(ctx context.Context, l SegmentLink) error

	// SetGroupSecret stores the group's registration secret, replacing any it had.
	SetGroupSecret(ctx context.Context, group, secret string) error
	// DeleteGroupSecret removes the group's secret (ErrNotFound when it has none).
	DeleteGroupSecret(ctx context.Context, group string) error
	// ListGroupSecrets returns every stored secret by group.
	ListGroupSecrets(ctx context.Context) (map[string]string, error)

	// ClearRuntime removes every node, link and route and keeps segments and group
	// secrets: what an API
	// mode control plane does on start.
	ClearRuntime(ctx context.Context) error
	// ClearAll removes everything: what a config mode control plane does on start.
	ClearAll(ctx context.Context) error
	// Close releases the store; later calls fail with ErrClosed.
	Close() error
}

// NodeFilter selects nodes; zero fields match everything.
type NodeFilter struct {
	Group         string
	ConnectedOnly bool
}

// DeletedMode says whether a list includes records marked deleted.
type DeletedMode uint8

const (
	// ExcludeDeleted (the zero value) lists live records only.
	ExcludeDeleted DeletedMode = iota
	// IncludeDeleted lists live and deleted records.
	IncludeDeleted
	// OnlyDeleted lists deleted records only.
	OnlyDeleted
)

// Match reports whether a record with the given deleted flag passes.
func (m DeletedMode) Match(deleted bool) bool {
	switch m {
	case IncludeDeleted:
		return true
	case OnlyDeleted:
		return deleted
	}
	return !deleted
}

// LinkFilter selects links; set fields are ANDed, zero fields match everything.
type LinkFilter struct {
	SourceNodeID string
	DestNodeID   string
	TargetNodeID string
	// Group matches links whose source or destination group it is.
	Group   string
	Deleted DeletedMode
}

// Match reports whether l passes the filter.
func (f LinkFilter) Match(l Link) bool {
	return f.Deleted.Match(l.Deleted) &&
		(f.SourceNodeID == "" || l.SourceNodeID == f.SourceNodeID) &&
		(f.DestNodeID == "" || l.DestNodeID == f.DestNodeID) &&
		(f.TargetNodeID == "" || l.TargetNodeID == f.TargetNodeID) &&
		(f.Group == "" || l.SourceGroup == f.Group || l.DestGroup == f.Group)
}

// LinkUpdate lists the fields UpdateLink changes; nil fields are kept.
type LinkUpdate struct {
	// IfVersion, when set, is the precondition: the stored link must still be at this
	// version. A reconciler that decided from a read made before a round trip to a node
	// sets it, so that its write cannot clobber what the core decided meanwhile.
	IfVersion     *int64
	SourceNodeID  *string
	DestNodeID    *string
	DestEndpoint  *string
	ConnConfig    *string
	Status        *LinkStatus
	StatusMessage *string
}

// Apply checks the update against l and returns the changed link, its version bumped.
func (u LinkUpdate) Apply(l Link) (Link, error) {
	if u.IfVersion != nil && *u.IfVersion != l.Version {
		return l, CheckVersion("link "+l.ID, l.Version, u.IfVersion)
	}
	if l.Deleted {
		return l, errorf(ErrInvalidTransition, "link %s is deleted", l.ID)
	}
	if u.Status != nil {
		if !LinkTransitionAllowed(l.Status, *u.Status) {
			return l, errorf(ErrInvalidTransition, "link %s: %s -> %s", l.ID, l.Status, *u.Status)
		}
		l.Status = *u.Status
		l.Deleted = l.Status == LinkDeleted
	}
	set(&l.SourceNodeID, u.SourceNodeID)
	set(&l.DestNodeID, u.DestNodeID)
	set(&l.DestEndpoint, u.DestEndpoint)
	set(&l.ConnConfig, u.ConnConfig)
	set(&l.StatusMessage, u.StatusMessage)
	l.Version++
	return l, nil
}

// RouteFilter selects routes; set fields are ANDed, zero fields match everything.
type RouteFilter struct {
	// SourceNodeID AllNodes selects templates.
	SourceNodeID string
	DestNodeID   string
	LinkID       string
	Name         *Name
	Deleted      DeletedMode
	// ExpansionsOnly leaves the templates out: planning reads the expansions of a
	// name without the thousand announcements beside them.
	ExpansionsOnly bool
}

// Match reports whether r passes the filter.
func (f RouteFilter) Match(r Route) bool {
	return f.Deleted.Match(r.Deleted) && !(f.ExpansionsOnly && r.IsTemplate()) &&
		(f.SourceNodeID == "" || r.SourceNodeID == f.SourceNodeID) &&
		(f.DestNodeID == "" || r.DestNodeID == f.DestNodeID) &&
		(f.LinkID == "" || r.LinkID == f.LinkID) &&
		(f.Name == nil || r.Name == *f.Name)
}

// RouteUpdate lists the fields UpdateRoute changes; nil fields are kept.
type RouteUpdate struct {
	// IfVersion is LinkUpdate.IfVersion for routes.
	IfVersion     *int64
	SourceNodeID  *string
	DestNodeID    *string
	Status        *RouteStatus
	StatusMessage *string
}

// Apply checks the update against r and returns the changed route, its version bumped.
func (u RouteUpdate) Apply(r Route) (Route, error) {
	if u.IfVersion != nil && *u.IfVersion != r.Version { // the name is built only for the error
		return r, CheckVersion("route "+strconv.FormatInt(r.ID, 10), r.Version, u.IfVersion)
	}
	if r.Deleted {
		return r, errorf(ErrInvalidTransition, "route %d is deleted", r.ID)
	}
	if u.Status != nil {
		if !RouteTransitionAllowed(r.Status, *u.Status) {
			return r, errorf(ErrInvalidTransition, "route %d: %s -> %s", r.ID, r.Status, *u.Status)
		}
		r.Status = *u.Status
		r.Deleted = r.Status == RouteDeleted
	}
	set(&r.SourceNodeID, u.SourceNodeID)
	set(&r.DestNodeID, u.DestNodeID)
	set(&r.StatusMessage, u.StatusMessage)
	r.Version++
	return r, nil
}

// CheckVersion returns ErrConflict, naming what, when a precondition is set and the
// stored version differs from it.
func CheckVersion(what string, stored int64, want *int64) error {
	if want == nil || *want == stored {
		return nil
	}
	return errorf(ErrConflict, "%s is at version %d, not %d", what, stored, *want)
}

// CheckNewLink returns an error if l cannot be created.
func CheckNewLink(l Link) error {
	switch {
	case l.ID == "":
		return errors.New("link id is empty")
	case l.Status != LinkPending || l.Deleted:
		return errorf(ErrInvalidTransition, "link %s must be created pending, not %s", l.ID, l.Status)
	}
	return nil
}

// CheckNewRoute returns an error if r cannot be created.
func CheckNewRoute(r Route) error {
	if r.Deleted {
		return errorf(ErrInvalidTransition, "route %s must not be created deleted", r.Name)
	}
	if r.Status == RoutePending || (r.IsTemplate() && r.Status == RouteApplied) {
		return nil
	}
	return errorf(ErrInvalidTransition, "route %s on %s cannot be created %s", r.Name, r.SourceNodeID, r.Status)
}

func set(dst *string, v *string) {
	if v != nil {
		*dst = *v
	}
}
