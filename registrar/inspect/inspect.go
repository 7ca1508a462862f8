// Package inspect holds the types of the registrar's read-only introspection API
// (registrar/inspect.go: Registrar.Changes, Endpoints and Status) and Source, the
// interface that API satisfies.
//
// It is a leaf, apart from package endpoint: the registrar's web page
// (registrar/ui) reads a registrar only through Source, so it needs neither the
// registrar's internals nor gRPC, and the registrar can mount the page without an
// import cycle.
package inspect

import (
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// Source is what a registrar offers for inspection. Every method is safe for
// concurrent use and cheap enough to call a few times a second.
type Source interface {
	// Changes returns the changes after version after, at most max of them, in
	// order, and the version to ask from next time (after itself when nothing
	// is new). ok is false when after has fallen out of the registrar's history:
	// the caller then reads Endpoints again.
	Changes(after uint64, max int) (changes []Change, next uint64, ok bool)
	// Endpoints returns every visible endpoint and the version they are at. The
	// endpoints' Annotations maps are shared with the registrar: read them only.
	Endpoints() ([]endpoint.Endpoint, uint64)
	// Status returns the watchers, the backend and the counts.
	Status() Status
}

// ChangeType is what happened to an endpoint.
type ChangeType uint8

const (
	Added ChangeType = iota + 1
	Updated
	Removed
)

func (t ChangeType) String() string {
	switch t {
	case Added:
		return "added"
	case Updated:
		return "updated"
	case Removed:
		return "removed"
	}
	return "unknown"
}

// Change is one change of the registrar's snapshot. A removal carries the
// endpoint as it was.
type Change struct {
	Type     ChangeType        `json:"type"`
	Endpoint endpoint.Endpoint `json:"endpoint"`
	Version  uint64            `json:"version"`
}

// Status is a registrar's state at one moment.
type Status struct {
	// Cluster is the cluster the registrar accepts writes for.
	Cluster string `json:"cluster"`
	// Version is the latest version of the snapshot.
	Version uint64 `json:"version"`
	// Ready is true once the backend has been read in full.
	Ready bool `json:"ready"`
	// Counts are the visible endpoints per cluster.
	Counts   map[string]int `json:"counts"`
	Watchers []Watcher      `json:"watchers"`
	Backend  Backend        `json:"backend"`
}

// Watcher is one open watch stream.
type Watcher struct {
	ID uint64 `json:"id"`
	// Node and Cluster are what the client's request named (either may be empty).
	Node    string `json:"node"`
	Cluster string `json:"cluster"`
	Peer    string `json:"peer"`
	// AllServices is true when the watcher watches every service. Otherwise
	// its scope is ScopeSize services (none is a scope too), of which Services
	// holds the first MaxScopeNames, sorted.
	AllServices bool     `json:"allServices"`
	Services    []string `json:"services,omitempty"`
	ScopeSize   int      `json:"scopeSize"`
	// Since is when the stream opened.
	Since time.Time `json:"since"`
	// Lag is how many versions the watcher is behind the snapshot: the
	// registrar's version minus the last version it has been sent. Snapshot is
	// true while it takes its first full snapshot, when its lag is not known yet.
	Lag      uint64 `json:"lag"`
	Snapshot bool   `json:"snapshot"`
	// SendingSince is when the send under way to the watcher began, at the
	// latest (to within a tenth of a second); zero when none is: a send that
	// has been under way for long is a client that does not read, whether in
	// its snapshot or not.
	SendingSince time.Time `json:"sendingSince"`
	// Resumed is true when the stream continued from the client's resume token
	// instead of a full snapshot; Resumes counts such streams of its node.
	Resumed bool `json:"resumed"`
	Resumes int  `json:"resumes"`
}

// MaxScopeNames bounds the service names a Watcher lists.
const MaxScopeNames = 10

// Backend is what the registrar knows of its registry backend.
type Backend struct {
	// Kind is the backend's name ("etcd", "memory", …).
	Kind string `json:"kind"`
	// Feed is true while the backend's change feed is live: the registrar then
	// lists the whole backend only every BackstopInterval. Otherwise it polls
	// every SyncInterval; NoFeed says the backend has no change feed at all.
	Feed             bool          `json:"feed"`
	NoFeed           bool          `json:"noFeed"`
	SyncInterval     time.Duration `json:"syncInterval"`
	BackstopInterval time.Duration `json:"backstopInterval"`
	// LastSync is when the last full read of the backend ended; zero before one.
	LastSync time.Time `json:"lastSync"`
	// LastError is the last failed read's error, at LastErrorAt; Errors counts
	// the failed reads.
	LastError   string    `json:"lastError,omitempty"`
	LastErrorAt time.Time `json:"lastErrorAt"`
	Errors      uint64    `json:"errors"`
	// QueueDepth is the accepted writes not yet persisted.
	QueueDepth int `json:"queueDepth"`
	// Batches and FailedBatches count the write batches sent to the backend.
	Batches       uint64 `json:"batches"`
	FailedBatches uint64 `json:"failedBatches"`
}
