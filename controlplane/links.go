package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// LinkSettings are the settings the CP injects into every inter-group link's client
// configuration (spec: "backoff, keepalive, SPIRE socket path").
type LinkSettings struct {
	SpireSocketPath   string
	BackoffInitial    time.Duration
	BackoffMax        time.Duration
	KeepaliveInterval time.Duration
	KeepaliveTimeout  time.Duration
}

// ClientConfig is the JSON a source node receives to dial a link (Link.ConnConfig).
type ClientConfig struct {
	Endpoint string    `json:"endpoint"`
	LinkID   string    `json:"link_id"`
	TLS      ClientTLS `json:"tls"`
	// Durations are Go duration strings, omitted when zero.
	BackoffInitial    string `json:"backoff_initial,omitempty"`
	BackoffMax        string `json:"backoff_max,omitempty"`
	KeepaliveInterval string `json:"keepalive_interval,omitempty"`
	KeepaliveTimeout  string `json:"keepalive_timeout,omitempty"`
	// Segments are the segments the link's group pair is in. A data plane forwards a
	// message that came in over the link only over links of one of them, so a hub
	// shared by several segments does not carry traffic from one into another.
	Segments []string `json:"segments,omitempty"`
}

// ClientTLS says how the source node secures the connection: mTLS from SPIRE when the
// destination requires it.
type ClientTLS struct {
	Insecure        bool   `json:"insecure"`
	SpireSocketPath string `json:"spire_socket_path,omitempty"`
}

func durationString(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// clientConfig builds the JSON for a link to target's external endpoint, in segments.
func (s *Service) clientConfig(linkID string, target store.Node, segments []string) string {
	c := ClientConfig{
		Endpoint: target.ExternalEndpoint(), LinkID: linkID, TLS: ClientTLS{Insecure: true}, Segments: segments,
		BackoffInitial: durationString(s.links.BackoffInitial), BackoffMax: durationString(s.links.BackoffMax),
		KeepaliveInterval: durationString(s.links.KeepaliveInterval),
		KeepaliveTimeout:  durationString(s.links.KeepaliveTimeout),
	}
	for _, cd := range target.ConnDetails {
		if cd.ExternalEndpoint == c.Endpoint && cd.MTLSRequired {
			c.TLS = ClientTLS{SpireSocketPath: s.links.SpireSocketPath}
		}
	}
	data, _ := json.Marshal(c) // plain strings and bools: cannot fail
	return string(data)
}

// segmentsIn reads the segments back from a link's client config.
func segmentsIn(connConfig string) []string {
	var c ClientConfig
	_ = json.Unmarshal([]byte(connConfig), &c) // written by clientConfig
	return c.Segments
}

// ensureLinks is the spec's ensure_links_for_node: for every group the topology lets
// n's group reach and that has connected nodes but no live link to n's group yet, it
// creates one link. n dials a random node of the remote group that has an external
// endpoint; if none has, a random remote node dials n (or a random sibling of n with
// an external endpoint); if neither side has one, the pair is reported as a problem.
func (s *Service) ensureLinks(ctx context.Context, n store.Node, w *work) error {
	if n.Group == "" || !n.Connected {
		return nil
	}
	topo, err := s.topoNow(ctx)
	if err != nil {
		return err
	}
	_, peers := topo.pairs()
	existing, err := s.liveLinksOf(ctx, w, topo, n.Group)
	if err != nil {
		return fmt.Errorf("list links of group %s: %w", n.Group, err)
	}
	linked := map[string]bool{}
	for _, l := range existing {
		linked[l.Peer(n.Group)] = true
	}
	for _, peer := range peers[n.Group] {
		if linked[peer] {
			continue
		}
		if err := s.createLink(ctx, n, peer, topo.segmentsOf(n.Group, peer), w); err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) createLink(ctx context.Context, n store.Node, peer string, segments []string, w *work) error {
	remote, err := s.store.ListNodes(ctx, store.NodeFilter{Group: peer, ConnectedOnly: true})
	if err != nil {
		return fmt.Errorf("list nodes of group %s: %w", peer, err)
	}
	if len(remote) == 0 {
		return nil
	}
	src, target, err := s.chooseEnds(ctx, n, remote)
	if err != nil {
		w.problems = append(w.problems, err)
		s.log.Error("cannot link groups", "group", n.Group, "peer", peer, "err", err)
		return nil
	}
	l := store.Link{
		ID: s.newID(), SourceNodeID: src.ID, SourceGroup: src.Group, DestGroup: target.Group,
		TargetNodeID: target.ID, DestEndpoint: target.ExternalEndpoint(), Status: store.LinkPending,
	}
	l.ConnConfig = s.clientConfig(l.ID, target, segments)
	if err := s.store.CreateLink(ctx, l); err != nil {
		return fmt.Errorf("create link %s -> %s: %w", src.ID, target.ID, err)
	}
	s.log.Info("link created", "link", l.ID, "source", src.ID, "target", target.ID, "endpoint", l.DestEndpoint)
	w.link(src.ID)
	w.relinked(l.ID)
	return nil
}

// chooseEnds picks the link's source and target; the target always has an external
// endpoint.
func (s *Service) chooseEnds(ctx context.Context, n store.Node, remote []store.Node) (src, target store.Node, err error) {
	if withExt := withExternal(remote); len(withExt) > 0 {
		return n, withExt[s.pick(len(withExt))], nil
	}
	local := []store.Node{n}
	if n.ExternalEndpoint() == "" {
		siblings, err := s.store.ListNodes(ctx, store.NodeFilter{Group: n.Group, ConnectedOnly: true})
		if err != nil {
			return src, target, fmt.Errorf("list nodes of group %s: %w", n.Group, err)
		}
		local = withExternal(siblings)
	}
	if len(local) == 0 {
		return src, target, fmt.Errorf("%w: groups %q and %q must be linked, but no connected node in either has an external endpoint",
			ErrNoExternalEndpoint, n.Group, remote[0].Group)
	}
	return remote[s.pick(len(remote))], local[s.pick(len(local))], nil
}

func withExternal(nodes []store.Node) []store.Node {
	var out []store.Node
	for _, n := range nodes {
		if n.ExternalEndpoint() != "" {
			out = append(out, n)
		}
	}
	return out
}

// ClaimLink records that nodeID received the connection of link linkID: the node must be
// in the link's destination group. The link becomes Applied with its destination node
// known, and the wildcard routes are expanded over it.
func (s *Service) ClaimLink(ctx context.Context, nodeID, linkID string) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := newWork()
	claimed := false
	err := s.atomically(ctx, func(ctx context.Context) error {
		n, err := s.store.GetNode(ctx, nodeID)
		if err != nil {
			return fmt.Errorf("claim link %s: %w", linkID, err)
		}
		l, err := s.store.GetLink(ctx, linkID)
		if err != nil {
			return fmt.Errorf("claim link %s: %w", linkID, err)
		}
		switch {
		case l.Deleted:
			return fmt.Errorf("%w: link %s is deleted", ErrClaimRejected, linkID)
		case n.Group != l.DestGroup:
			return fmt.Errorf("%w: link %s leads to group %q, node %s is in %q", ErrClaimRejected, linkID,
				l.DestGroup, nodeID, n.Group)
		case l.DestNodeID == nodeID && l.Status == store.LinkApplied:
			return nil // a repeated claim changes nothing
		}
		if _, err := s.store.UpdateLink(ctx, linkID, store.LinkUpdate{
			DestNodeID: &nodeID, Status: store.Ptr(store.LinkApplied), StatusMessage: store.Ptr(""),
		}); err != nil {
			return fmt.Errorf("claim link %s: %w", linkID, err)
		}
		claimed = true
		w.route(nodeID)
		w.route(l.SourceNodeID)
		w.relinked(linkID)
		return s.replan(ctx, w)
	})
	if err != nil {
		return Result{}, err
	}
	if claimed {
		s.log.Info("link claimed", "link", linkID, "node", nodeID)
	}
	return w.result(), nil
}
