// Package memdp is an in-memory dataplane.Datapath for tests and benchmarks, with
// fault injection: failing connects and subscribes, rejected, held, delayed or
// dropped subscription acks, and connections that drop as if the peer went away.
// Every mutating call is appended to an operation log so tests can check order.
package memdp

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/switchboard-mesh/switchboard/dataplane"
)

type subKey struct {
	conn dataplane.ConnID
	name dataplane.Name
}

// Datapath is the in-memory datapath. The zero value is not usable; call New.
type Datapath struct {
	mu       sync.Mutex
	nextConn dataplane.ConnID
	nextSub  dataplane.SubID
	conns    map[dataplane.ConnID]dataplane.ConnInfo
	configs  map[dataplane.ConnID]json.RawMessage
	subs     map[dataplane.SubID]dataplane.SubInfo
	byKey    map[subKey]dataplane.SubID
	ops      []string
	noLog    bool

	failConnect   map[string]error // by endpoint; "" matches any
	failSubscribe error
	ackErr        error
	ackDelay      time.Duration
	holdAcks      bool
	held          []func()
	timers        map[*time.Timer]struct{}
	closed        bool
	inflight      sync.WaitGroup
}

var (
	_ dataplane.Datapath = (*Datapath)(nil)
	_ dataplane.Relinker = (*Datapath)(nil)
)

// New returns an empty datapath whose subscribes ack synchronously with success.
func New() *Datapath {
	return &Datapath{
		conns:       make(map[dataplane.ConnID]dataplane.ConnInfo),
		configs:     make(map[dataplane.ConnID]json.RawMessage),
		subs:        make(map[dataplane.SubID]dataplane.SubInfo),
		byKey:       make(map[subKey]dataplane.SubID),
		failConnect: make(map[string]error),
		timers:      make(map[*time.Timer]struct{}),
	}
}

// Connect dials (pretends to) endpoint for linkID.
func (d *Datapath) Connect(ctx context.Context, linkID, endpoint string, config json.RawMessage) (dataplane.ConnID, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.logf("connect %s %s", linkID, endpoint)
	if err := d.connectFault(endpoint); err != nil {
		return 0, err
	}
	return d.addConn(dataplane.ConnInfo{LinkID: linkID, Endpoint: endpoint}, config), nil
}

func (d *Datapath) connectFault(endpoint string) error {
	if err, ok := d.failConnect[endpoint]; ok {
		return err
	}
	return d.failConnect[""]
}

func (d *Datapath) addConn(ci dataplane.ConnInfo, config json.RawMessage) dataplane.ConnID {
	d.nextConn++
	ci.ID = d.nextConn
	d.conns[ci.ID] = ci
	d.configs[ci.ID] = append(json.RawMessage(nil), config...)
	return ci.ID
}

// Accept adds an inbound connection for linkID, as if a peer had dialed this node.
func (d *Datapath) Accept(linkID, remote string) dataplane.ConnID {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.logf("accept %s %s", linkID, remote)
	return d.addConn(dataplane.ConnInfo{LinkID: linkID, Endpoint: remote, Inbound: true}, nil)
}

// Disconnect closes conn and its subscriptions.
func (d *Datapath) Disconnect(_ context.Context, conn dataplane.ConnID) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	ci, ok := d.conns[conn]
	d.logf("disconnect %s", ci.LinkID)
	if !ok {
		return fmt.Errorf("memdp: conn %d: %w", conn, dataplane.ErrConnNotFound)
	}
	d.removeConn(conn)
	return nil
}

// Relink labels conn with link (dataplane.Relinker). The in-memory datapath has no far
// end to tell; a harness playing the network does that.
func (d *Datapath) Relink(_ context.Context, conn dataplane.ConnID, link string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	ci, ok := d.conns[conn]
	d.logf("relink %s %s", ci.LinkID, link)
	if !ok {
		return fmt.Errorf("memdp: conn %d: %w", conn, dataplane.ErrConnNotFound)
	}
	ci.LinkID = link
	d.conns[conn] = ci
	return nil
}

// Drop loses conn as if the peer went away (no log entry: the controller did not ask).
func (d *Datapath) Drop(conn dataplane.ConnID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.conns[conn]
	d.removeConn(conn)
	return ok
}

func (d *Datapath) removeConn(conn dataplane.ConnID) {
	delete(d.conns, conn)
	delete(d.configs, conn)
	for id, si := range d.subs {
		if si.Conn == conn {
			d.removeSub(id)
		}
	}
}

func (d *Datapath) removeSub(id dataplane.SubID) {
	si := d.subs[id]
	delete(d.subs, id)
	delete(d.byKey, subKey{si.Conn, si.Name})
}

// Subscribe installs name on conn and acks through done according to the faults set.
// Subscribing an installed (conn, name) returns its existing id.
func (d *Datapath) Subscribe(ctx context.Context, conn dataplane.ConnID, name dataplane.Name, done func(error)) (dataplane.SubID, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	d.mu.Lock()
	ci, ok := d.conns[conn]
	d.logf("subscribe %s %s", ci.LinkID, name)
	if !ok {
		d.mu.Unlock()
		return 0, fmt.Errorf("memdp: conn %d: %w", conn, dataplane.ErrConnNotFound)
	}
	if d.failSubscribe != nil {
		err := d.failSubscribe
		d.mu.Unlock()
		return 0, err
	}
	id, ok := d.byKey[subKey{conn, name}]
	if !ok {
		d.nextSub++
		id = d.nextSub
		d.subs[id] = dataplane.SubInfo{ID: id, Conn: conn, Name: name}
		d.byKey[subKey{conn, name}] = id
	}
	ack := d.ackFunc(id, done)
	deliverNow := d.scheduleAck(ack)
	d.mu.Unlock()
	if deliverNow {
		ack()
	}
	return id, nil
}

// ackFunc builds the ack delivery; a rejected ack uninstalls the subscription.
func (d *Datapath) ackFunc(id dataplane.SubID, done func(error)) func() {
	err := d.ackErr
	return func() {
		if err != nil {
			d.mu.Lock()
			d.removeSub(id)
			d.mu.Unlock()
		}
		done(err)
	}
}

// scheduleAck holds, delays or (returning true) asks for immediate delivery.
func (d *Datapath) scheduleAck(ack func()) bool {
	switch {
	case d.closed:
		return false
	case d.holdAcks:
		d.held = append(d.held, ack)
		return false
	case d.ackDelay > 0:
		var t *time.Timer
		d.inflight.Add(1)
		t = time.AfterFunc(d.ackDelay, func() {
			defer d.inflight.Done()
			d.mu.Lock()
			_, live := d.timers[t]
			delete(d.timers, t)
			d.mu.Unlock()
			if live {
				ack()
			}
		})
		d.timers[t] = struct{}{}
		return false
	}
	return true
}

// Unsubscribe removes sub from conn.
func (d *Datapath) Unsubscribe(_ context.Context, conn dataplane.ConnID, sub dataplane.SubID) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	ci, ok := d.conns[conn]
	si, found := d.subs[sub]
	d.logf("unsubscribe %s %s", ci.LinkID, si.Name)
	if !ok {
		return fmt.Errorf("memdp: conn %d: %w", conn, dataplane.ErrConnNotFound)
	}
	if !found || si.Conn != conn {
		return fmt.Errorf("memdp: subscription %d: %w", sub, dataplane.ErrSubNotFound)
	}
	d.removeSub(sub)
	return nil
}

// Connections lists live connections ordered by id.
func (d *Datapath) Connections() []dataplane.ConnInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]dataplane.ConnInfo, 0, len(d.conns))
	for _, ci := range d.conns {
		out = append(out, ci)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Subscriptions lists installed subscriptions ordered by id.
func (d *Datapath) Subscriptions() []dataplane.SubInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]dataplane.SubInfo, 0, len(d.subs))
	for _, si := range d.subs {
		out = append(out, si)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Config returns the JSON a connection was created with.
func (d *Datapath) Config(conn dataplane.ConnID) json.RawMessage {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.configs[conn]
}

func (d *Datapath) logf(format string, args ...any) {
	if !d.noLog {
		d.ops = append(d.ops, fmt.Sprintf(format, args...))
	}
}

// DisableLog stops the operation log (Ops then returns what was logged before). A
// benchmark's thousands of datapaths would otherwise keep a string per operation, a
// million of them at a million routes, for the collector to scan.
func (d *Datapath) DisableLog() {
	d.mu.Lock()
	d.noLog = true
	d.mu.Unlock()
}

// Ops returns the operation log: "connect LINK ENDPOINT", "accept LINK REMOTE",
// "relink OLD NEW", "disconnect LINK", "subscribe LINK NAME", "unsubscribe LINK NAME".
func (d *Datapath) Ops() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.ops...)
}

// Close stops delayed acks (they are never delivered) and waits for any running.
func (d *Datapath) Close() {
	d.mu.Lock()
	d.closed = true
	for t := range d.timers {
		if t.Stop() {
			d.inflight.Done()
		}
		delete(d.timers, t)
	}
	d.held = nil
	d.mu.Unlock()
	d.inflight.Wait()
}
