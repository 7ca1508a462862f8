package cpharness

import (
	"context"
	"errors"
	"fmt"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/dataplane"
)

// Converged reports (nil) whether the control plane's desired state is in force: no
// link or route is Pending, Connecting, Failed or waiting for its hard delete; every
// link is claimed and up on both ends; every route's subscription is installed on its
// node over its link. A deleted link whose source node is down is expected: only
// that node can delete it, once it returns. With strict, no datapath may hold a labelled connection or a
// subscription the store does not want either.
func Converged(ctx context.Context, st store.Store, f *Fabric, strict bool) error {
	links, err := st.ListLinks(ctx, store.LinkFilter{Deleted: store.IncludeDeleted})
	if err != nil {
		return err
	}
	routes, err := st.ListRoutes(ctx, store.RouteFilter{Deleted: store.IncludeDeleted})
	if err != nil {
		return err
	}
	return ConvergedTo(links, routes, f, strict)
}

// ConvergedTo is Converged for links and routes (deleted ones included) read some other
// way, such as through the northbound API of a control plane in another process.
func ConvergedTo(links []store.Link, routes []store.Route, f *Fabric, strict bool) error {
	snaps := snapshot(f)
	var errs []error
	for _, l := range links {
		if l.Deleted && snaps[l.SourceNodeID] == nil {
			continue // its source is down: the delete waits for it to come back
		}
		errs = append(errs, checkLink(l, snaps))
	}
	for _, r := range routes {
		if !r.IsTemplate() {
			errs = append(errs, checkRoute(r, snaps))
		}
	}
	if strict {
		errs = append(errs, checkNoStrays(links, routes, snaps))
	}
	return errors.Join(errs...)
}

// nodeSnap is what one running node's datapath holds.
type nodeSnap struct {
	out  map[string]string // outgoing link id -> endpoint
	in   map[string]string // accepted link id -> dialing node
	subs map[subscription]bool
}

type subscription struct {
	name dataplane.Name
	link string
}

func snapshot(f *Fabric) map[string]*nodeSnap {
	out := map[string]*nodeSnap{}
	for _, n := range f.Nodes() {
		if !n.Up() {
			continue
		}
		dp := n.Datapath()
		s := &nodeSnap{out: map[string]string{}, in: map[string]string{}, subs: map[subscription]bool{}}
		links := map[dataplane.ConnID]string{}
		for _, c := range dp.Connections() {
			links[c.ID] = c.LinkID
			switch {
			case c.LinkID == "":
			case c.Inbound:
				s.in[c.LinkID] = c.Endpoint
			default:
				s.out[c.LinkID] = c.Endpoint
			}
		}
		for _, si := range dp.Subscriptions() {
			s.subs[subscription{si.Name, links[si.Conn]}] = true
		}
		out[n.ID()] = s
	}
	return out
}

func checkLink(l store.Link, snaps map[string]*nodeSnap) error {
	switch {
	case l.Deleted || l.Status != store.LinkApplied:
		return fmt.Errorf("link %s %s -> %s is %s (%s)", l.ID, l.SourceNodeID, l.DestGroup, l.Status, l.StatusMessage)
	case l.DestNodeID == "":
		return fmt.Errorf("link %s %s -> %s is not claimed", l.ID, l.SourceNodeID, l.DestGroup)
	}
	src, dst := snaps[l.SourceNodeID], snaps[l.DestNodeID]
	switch {
	case src == nil || src.out[l.ID] != l.DestEndpoint:
		return fmt.Errorf("link %s: source %s does not dial %s", l.ID, l.SourceNodeID, l.DestEndpoint)
	case dst == nil || dst.in[l.ID] != l.SourceNodeID:
		return fmt.Errorf("link %s: destination %s has not accepted it from %s", l.ID, l.DestNodeID, l.SourceNodeID)
	}
	return nil
}

func checkRoute(r store.Route, snaps map[string]*nodeSnap) error {
	if r.Deleted || r.Status != store.RouteApplied {
		return fmt.Errorf("route %d %s on %s over %s is %s (%s)", r.ID, r.Name, r.SourceNodeID, r.LinkID, r.Status, r.StatusMessage)
	}
	s := snaps[r.SourceNodeID]
	if s == nil || !s.subs[subscription{DataplaneName(r.Name), r.LinkID}] {
		return fmt.Errorf("route %d %s: not subscribed on %s over %s", r.ID, r.Name, r.SourceNodeID, r.LinkID)
	}
	return nil
}

// checkNoStrays finds what datapaths hold beyond the store's wishes.
func checkNoStrays(links []store.Link, routes []store.Route, snaps map[string]*nodeSnap) error {
	byID := map[string]store.Link{}
	for _, l := range links {
		byID[l.ID] = l
	}
	wanted := map[string]map[subscription]bool{}
	for _, r := range routes {
		if !r.IsTemplate() {
			if wanted[r.SourceNodeID] == nil {
				wanted[r.SourceNodeID] = map[subscription]bool{}
			}
			wanted[r.SourceNodeID][subscription{DataplaneName(r.Name), r.LinkID}] = true
		}
	}
	var errs []error
	for node, s := range snaps {
		for id := range s.out {
			if byID[id].SourceNodeID != node {
				errs = append(errs, fmt.Errorf("%s holds stray outgoing connection %s", node, id))
			}
		}
		for id := range s.in {
			if byID[id].DestNodeID != node {
				errs = append(errs, fmt.Errorf("%s holds stray accepted connection %s", node, id))
			}
		}
		for sub := range s.subs {
			if !wanted[node][sub] {
				errs = append(errs, fmt.Errorf("%s holds stray subscription %s over %s", node, sub.name, sub.link))
			}
		}
	}
	return errors.Join(errs...)
}

// DataplaneName converts a stored name to the datapath's form.
func DataplaneName(n store.Name) dataplane.Name {
	d := dataplane.NewName(n.Components[0], n.Components[1], n.Components[2])
	if n.HasID {
		d = d.WithID(n.ID)
	}
	return d
}
