// Package cpharness runs the control plane end to end: real dataplane.Controllers over
// in-memory datapaths (memdp) talking to a real control plane over loopback gRPC — in
// the test process, or as the switchboard binary in a process of its own (its restart
// tests). docs/controlplane.md describes what it checks.
//
// Fabric is the harness, also used by bench/controlplane. It plays the network between
// the in-memory datapaths: when a node's datapath dials another node's external
// endpoint, the far node accepts the connection and its controller claims the link, as
// a real datapath would report it; closing a connection closes the far end, and handing
// it over to another link relabels and claims it there. Nodes can
// crash (their connections vanish on both ends), drop their CP stream while their
// datapath keeps running, deregister, and have faults injected such as a connection
// that disappears just before a subscribe (the reconciler's TOCTOU race).
//
// Check compares the control plane's store with what every datapath holds.
package cpharness
