// Package pods registers a Kubernetes node's pods: it owns the agent's CNI server
// and the reconciler that turns the node's pods into agent entries
// (docs/kubernetes.md).
//
// The path of a pod: the CNI plugin (`switchboard cni`, package cni) calls the
// agent's PodNetwork API (gen/switchboard/cni/v1) on a Unix socket; the Server
// validates the call and records the attachment in a Store, one fsynced file per
// attachment, and returns — it never waits on the registry backend. An ADD whose
// caller gave up (its deadline passed) before the record was on disk records
// nothing, or withdraws the record, so that a DEL that overtook it leaves nothing
// behind; a record whose file is renamed into place is in memory even when the
// directory's fsync then fails, so that a DEL removes it. The Controller's
// reconciler joins the records with the node's pods from the Kubernetes API (an
// informer on spec.nodeName=<node>), derives each managed pod's entries (Derive;
// the rules are in docs/kubernetes.md) and hands the whole set to a Sink
// (*agent.Agent.SetSource("pods", …)), whose publish loop writes the registry
// through the same gate as the manifest's entries. A pod's entries are held
// (manifest.Entry.Held) until it is Ready, and kept when the agent stops
// (KeepOnShutdown): their TTL bounds them, and a restarted agent refreshes them.
// The entries last handed to the Sink are kept in the state directory (entries.go):
// until its informer has synced, a restarted agent hands over those of them that
// have not expired since its predecessor stopped, less those whose attachment record
// is gone, so that an API server that cannot be reached does not take the node's
// pods out of the registry.
//
// The reconciler steps on every record change, informer event and resync period,
// and settles what CNI and the API disagree on (each counted in
// switchboard_agent_pod_reconcile_corrections_total{reason}): a record whose pod is
// gone from the synced informer, or is another pod now, and that is older than one
// resync period (the informer may lag the ADD) is deleted (pod_gone: a lost DEL); a
// managed pod with addresses and no record is registered from its status.podIPs
// (no_record: it was added while the agent was down); a managed pod that cannot be
// registered is logged once per reason (skipped).
//
// Bounds: an entry outlives its pod by at most one resync period plus the time the
// agent's publish loop needs to remove it (normally the informer's delete event
// removes it at once). An agent that crashes and loses a DEL leaves the entry for at
// most its TTL, or, when the restarted agent cannot list the pods yet, until it has;
// a record of the lost DEL is deleted at most one resync period after the restarted
// agent's informer has synced.
//
// This package must not import registrar/, controlplane/, dataplane/ or cni/: the
// agent reaches the registry only through its Sink, and the CNI plugin only through
// the generated API.
package pods
