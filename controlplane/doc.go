// Package controlplane is the control plane's model and decision logic, without network
// transport (docs/controlplane.md, "How it converges"): topology, node lifecycle, link
// and route management.
//
// Service (the spec's route service) turns events into link and route records in a
// store.Store and answers, for each event, which nodes the link and route reconcilers
// must visit (Result):
//
//   - NodeRegistered: link state sync against the connections the node reports,
//     ensure_links_for_node, wildcard expansion.
//   - NodeDeregistered / NodeDisconnected: gateway failover to a random connected
//     sibling (outgoing links move, incoming links are replaced), or soft-deleting the
//     group's links when the last node leaves; route cleanup; the record is deleted or,
//     after a crash, kept.
//   - ClaimLink: the destination node of a link reports the connection it received.
//   - AddWildcardRoute / DeleteWildcardRoute: announcements expanded over a shortest
//     path tree per segment, rooted at the first announcer's group.
//   - AddSegment, RemoveSegment, AddSegmentLink, RemoveSegmentLink: API mode topology;
//     in config mode they fail with ErrConfigMode.
//
// Topology rules come from the config file (config mode) or the stored segments (API
// mode) and are resolved against the registered groups by Resolve: "*" is every group,
// a "$group" segment is instantiated once per group, and segments replace the top-level
// links.
//
// Where the spec is silent or loose, this package decides:
//   - Expansion is a diff: the wanted routes are recomputed from scratch (deterministic
//     BFS, ties broken by group name) and the stored routes are brought to that set, so
//     a departure that re-roots a tree or a claim that moves a gateway converges.
//   - A segment graph that falls apart gets one tree per connected component, rooted at
//     the first announcer in that component.
//   - A route leads to its announcer (DestNodeID); one subscription per node, link and
//     name serves every announcer behind it.
//   - NodeDisconnected and NodeDeregistered take the session NodeRegistered returned, so
//     the end of a replaced stream cannot tear down its successor.
//   - Nodes without a group register but take part in no link or route.
//   - Every event is one store transaction (store.Store.Atomically): a store failure
//     half-way through a departure, registration, claim, announcement or topology
//     change leaves nothing half-applied, and the event can simply be retried.
package controlplane
