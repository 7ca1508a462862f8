package ui

import (
	"sync"
	"time"
)

// Source is what the page shows: the agent satisfies it, and tests fake it.
type Source interface {
	// State returns what the page shows, as of now; the page does not modify it.
	// It lists every entry, which the page counts, but only the first q.Limit
	// entries q matches (all of them when q.Limit is 0) need their Checks: the
	// page shows no others, so a Source may leave the others' Checks nil.
	State(q Query) State
	// Changes returns the version of what State shows and a channel closed when
	// it next changes (Changes.Version).
	Changes() (version uint64, next <-chan struct{})
}

// Query is what one rendering asks of the Source: the entries it shows.
type Query struct {
	// Filter keeps the entries whose key or source contains it, ignoring case;
	// "" keeps every entry (Matches).
	Filter string
	// Limit is how many of the entries kept are shown (MaxEntries for the page);
	// 0 means all of them (state.json).
	Limit int
}

// Matches reports whether the query's filter keeps e.
func (q Query) Matches(e Entry) bool { return matches(e, q.Filter) }

// State is everything the page shows, also served as /ui/state.json.
type State struct {
	Generated time.Time `json:"generated"`
	// Node is the host name the agent runs on.
	Node string `json:"node,omitempty"`
	// Backend names the registry backend; empty with none (a no-op publisher).
	Backend string `json:"backend,omitempty"`
	// Ready is /readyz's answer; NotReady says what the agent waits for.
	Ready    bool    `json:"ready"`
	NotReady string  `json:"notReady,omitempty"`
	Entries  []Entry `json:"entries"`
	// Files are the rendered templates and file_sd files.
	Files []File `json:"files"`
	// XDS, DNS and Registrar are nil when the agent runs without them.
	XDS       *XDS       `json:"xds,omitempty"`
	DNS       *DNS       `json:"dns,omitempty"`
	Registrar *Registrar `json:"registrar,omitempty"`
}

// Entry states: where an entry stands with the registry.
const (
	StatePublished  = "published"  // the agent's last write registered it
	StatePublishing = "publishing" // the gate is open; the write has not succeeded yet
	StateWaiting    = "waiting"    // its checks have not passed yet, and none failed
	StateWithdrawn  = "withdrawn"  // the gate is closed: not in the registry
	StateHeld       = "held"       // its source holds it back (a pod not Ready)
	StateDryRun     = "dry-run"    // the agent writes nothing
)

// Entry is one entry of the manifest or of another source.
type Entry struct {
	// Key is cluster/service/protocol/address:port.
	Key      string `json:"key"`
	Cluster  string `json:"cluster"`
	Service  string `json:"service"`
	Protocol string `json:"protocol"`
	// Address is address:port, IPv6 in brackets.
	Address string `json:"address"`
	// Source is "manifest", or the name of the source that feeds it (pods).
	Source string `json:"source"`
	State  string `json:"state"`
	// GateOpen is the publish gate's answer for the entry; Reason says why it is
	// closed, and Since is when the answer last changed.
	GateOpen bool      `json:"gateOpen"`
	Reason   string    `json:"reason,omitempty"`
	Since    time.Time `json:"since,omitzero"`
	// WriteError is the last registry write's error while writes fail.
	WriteError string `json:"writeError,omitempty"`
	// Region and Zone place the entry; Health is its health as the agent publishes
	// it ("healthy", "draining" or "unhealthy").
	Region string  `json:"region,omitempty"`
	Zone   string  `json:"zone,omitempty"`
	Health string  `json:"health"`
	Checks []Check `json:"checks"`
}

// Check is one health check of an entry.
type Check struct {
	// Name describes the check: "http http://127.0.0.1:8080/healthz".
	Name    string `json:"name"`
	Healthy bool   `json:"healthy"`
	// Pending: unhealthy only for want of passes, none having failed since the
	// check started or was last healthy.
	Pending bool `json:"pending"`
	// Rise and Fall are the thresholds; Passes and Failures the results in a row.
	Rise     int `json:"rise"`
	Fall     int `json:"fall"`
	Passes   int `json:"passes"`
	Failures int `json:"failures"`
	// Results counts the results so far.
	Results uint64 `json:"results"`
	// Output is the last result's output (an error's text), cut short.
	Output string `json:"output,omitempty"`
	// Changed is when the check last turned healthy or unhealthy.
	Changed time.Time `json:"changed,omitzero"`
	// History holds the last results, oldest first.
	History []Result `json:"history"`
}

// Result is one check run.
type Result struct {
	At time.Time `json:"at"`
	OK bool      `json:"ok"`
}

// File is a rendered template or a Prometheus file_sd file.
type File struct {
	// Kind is "template" or "file_sd".
	Kind string `json:"kind"`
	Path string `json:"path"`
	// Updated is the last update without error (the file written, or already
	// current); Written the last time its content changed.
	Updated time.Time `json:"updated,omitzero"`
	Written time.Time `json:"written,omitzero"`
	// Error is the last update's error, at ErrorAt; empty once one succeeds.
	Error   string    `json:"error,omitempty"`
	ErrorAt time.Time `json:"errorAt,omitzero"`
}

// XDS is the agent's xDS server.
type XDS struct {
	Addr    string      `json:"addr"`
	Clients []XDSClient `json:"clients"`
}

// XDSClient is one open xDS stream.
type XDSClient struct {
	Node string `json:"node"`
	// Delta says the stream is incremental (delta xDS), not state of the world;
	// Stream is its number among the streams of its kind.
	Delta  bool      `json:"delta"`
	Stream int64     `json:"stream"`
	Since  time.Time `json:"since"`
	Types  []XDSType `json:"types"`
	// Region and Zone are the locality the client's node named, if any.
	Region string `json:"region,omitempty"`
	Zone   string `json:"zone,omitempty"`
}

// XDSType is one resource type a stream subscribed to.
type XDSType struct {
	Type     string `json:"type"`
	Wildcard bool   `json:"wildcard"`
	Names    int    `json:"names"`
	// Version is what the stream was last sent of the type.
	Version string `json:"version"`
}

// DNS is the agent's DNS server.
type DNS struct {
	Addr   string `json:"addr"`
	Domain string `json:"domain"`
	// Queries counts the queries answered; PerSecond is their rate over the last
	// OverSeconds (zero until measured).
	Queries     uint64  `json:"queries"`
	PerSecond   float64 `json:"perSecond"`
	OverSeconds float64 `json:"overSeconds"`
}

// Registrar is the agent's connection to the registrar.
type Registrar struct {
	Target string `json:"target"`
	// Channel is the gRPC channel's state (READY, CONNECTING, …).
	Channel string `json:"channel"`
	// Connected: the watch stream is up and caught up; Since is when that last
	// changed.
	Connected   bool      `json:"connected"`
	Since       time.Time `json:"since"`
	LastError   string    `json:"lastError,omitempty"`
	LastErrorAt time.Time `json:"lastErrorAt,omitzero"`
	// Version is the last registrar version the agent's copy applied.
	Version string `json:"version,omitempty"`
}

// Changes is a version counter that wakes whoever waits for its next change: the
// agent bumps it whenever what its page shows changes. The zero value is ready to
// use, and Bump on a nil *Changes does nothing.
type Changes struct {
	mu   sync.Mutex
	v    uint64
	next chan struct{} // closed by the next Bump; made only when someone waits
}

// Bump records a change and wakes the waiters.
func (c *Changes) Bump() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.v++
	if c.next != nil {
		close(c.next)
		c.next = nil
	}
	c.mu.Unlock()
}

// Version returns the current version and a channel closed by the next Bump.
func (c *Changes) Version() (uint64, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.next == nil {
		c.next = make(chan struct{})
	}
	return c.v, c.next
}
