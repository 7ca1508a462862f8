package dataplane

import (
	"sort"
	"time"

	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
)

// subKey identifies a subscription as the CP sees it: a name on a connection.
type subKey struct {
	name Name
	conn ConnID
}

// sessionState is the controller's per-session bookkeeping, guarded by
// Controller.mu. links and subs are caches over the datapath; pending is the spec's
// message-id map.
type sessionState struct {
	links map[string]ConnID // link id -> connection (several links may share one)
	// hidden holds deleted links whose connection lives on for another link: the
	// datapath still labels the connection with them, but they are gone for the CP.
	hidden  map[string]ConnID
	subs    map[subKey]SubID // (name, connection) -> datapath subscription id
	pending map[uint64]*pendingSub
	nextAck uint64
}

func newSessionState() sessionState {
	return sessionState{
		links:   make(map[string]ConnID),
		hidden:  make(map[string]ConnID),
		subs:    make(map[subKey]SubID),
		pending: make(map[uint64]*pendingSub),
	}
}

// pendingSub is one subscription awaiting the datapath's ack.
type pendingSub struct {
	cmd      *pendingCmd
	status   *controllerv1.SubscriptionStatus
	key      subKey
	sub      SubID
	hasSub   bool
	timer    *time.Timer
	resolved bool
	err      error
}

// pendingCmd is a ConfigCommand whose ack is not sent yet.
type pendingCmd struct {
	sess        *session
	msgID       string
	ack         *controllerv1.ConfigCommandAck
	outstanding int
	sectionsOK  bool // all four sections ran
	sent        bool
}

// drainPending stops every ack timer and forgets the waiters: their stream is gone,
// so no ack can be delivered, and a late datapath ack must find nothing to resolve.
func (st *sessionState) drainPending() {
	for id, p := range st.pending {
		if p.timer != nil {
			p.timer.Stop()
		}
		p.resolved = true
		delete(st.pending, id)
	}
}

// resetState starts a session from scratch, as the spec's connect() does: the
// message-id map is drained and the caches are cleared. The subscriptions are then
// re-seeded from the datapath, which outlives sessions: what it still holds is
// exactly what the registration reports as live, so a later delete from the CP must
// still find it.
func (c *Controller) resetState() {
	subs := c.dp.Subscriptions()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state.drainPending()
	// links is not seeded: view() reads the datapath's labels anyway, and a copy of
	// them here would outlive a relabelling (Relinker) as a stale alias.
	c.state.links = make(map[string]ConnID)
	c.state.hidden = make(map[string]ConnID)
	c.state.subs = make(map[subKey]SubID, len(subs))
	for _, si := range subs {
		c.state.subs[subKey{si.Name, si.Conn}] = si.ID
	}
}

// linkView is a snapshot of the datapath's connections plus the link aliases the
// controller added by reusing a connection for another link.
type linkView struct {
	byID       map[ConnID]ConnInfo
	byLink     map[string]ConnID
	byEndpoint map[string]ConnID // outgoing connections only
	// handed are connections whose link this command deleted to have them handed over
	// to a link it creates to the same endpoint (see handovers).
	handed map[ConnID]bool
}

func (c *Controller) view() *linkView {
	conns := c.dp.Connections()
	v := &linkView{
		byID:       make(map[ConnID]ConnInfo, len(conns)),
		byLink:     make(map[string]ConnID, len(conns)),
		byEndpoint: make(map[string]ConnID),
		handed:     make(map[ConnID]bool),
	}
	for _, ci := range conns {
		v.add(ci)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for link, id := range c.state.hidden {
		if v.byLink[link] == id {
			delete(v.byLink, link)
		} else {
			delete(c.state.hidden, link)
		}
	}
	for link, id := range c.state.links {
		if _, live := v.byID[id]; live {
			v.byLink[link] = id
		} else {
			// Gone; forget it so a reused connection id cannot inherit the link.
			delete(c.state.links, link)
		}
	}
	return v
}

func (v *linkView) add(ci ConnInfo) {
	v.byID[ci.ID] = ci
	if ci.LinkID != "" {
		v.byLink[ci.LinkID] = ci.ID
	}
	if !ci.Inbound && ci.Endpoint != "" {
		v.byEndpoint[ci.Endpoint] = ci.ID
	}
}

func (v *linkView) remove(id ConnID) {
	ci := v.byID[id]
	delete(v.byID, id)
	if v.byEndpoint[ci.Endpoint] == id {
		delete(v.byEndpoint, ci.Endpoint)
	}
	for link, cid := range v.byLink {
		if cid == id {
			delete(v.byLink, link)
		}
	}
}

// linksOf groups link ids by connection, sorted.
func (v *linkView) linksOf() map[ConnID][]string {
	out := make(map[ConnID][]string, len(v.byID))
	for link, id := range v.byLink {
		out[id] = append(out[id], link)
	}
	for _, ls := range out {
		sort.Strings(ls)
	}
	return out
}

// liveLinkIDs lists, sorted, the link ids of every live connection (dialed or
// accepted): the RegisterNodeRequest's connections field.
func (c *Controller) liveLinkIDs() []string {
	v := c.view()
	out := make([]string, 0, len(v.byLink))
	for link := range v.byLink {
		out = append(out, link)
	}
	sort.Strings(out)
	return out
}
