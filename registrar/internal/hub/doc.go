// Package hub is the registrar's fan-out: it owns the watchers (watcher.go),
// each one agent's stream and its cursor in the view's history ring; what each
// is sent next (the view's snapshot, its events, a resumed replay's end, a
// scoped watcher's PROGRESS), and the resync of one that fell out of the ring;
// the pacing and batching of a slow watcher's events (batch.go); the set of open
// watchers that the view's changes are signalled to, the senders that run them
// (the pool), the run state of each watcher (transitions.go), and the clock by
// which sends that stall are noticed and their senders replaced.
//
// A watch stream's handler goroutine only waits: the receiving of its first
// request and all sending are done by sender goroutines, for the watchers that
// have something to do. gRPC's receive and send paths are deep enough that a
// goroutine that has run them keeps an 8 KiB stack; one that only waits keeps 4
// KiB. So an idle watcher costs a 4 KiB stack, and the 8 KiB ones are the
// senders', which exist only while there is work: a sender runs queued watchers
// until the queue is empty, then ends.
//
// A watcher is scheduled when it may have something to do: its stream
// opened, an event was appended, its set of services changed, a PROGRESS fell
// due, its stream or the registrar ended. A sender runs it until it is current or
// its stream has ended; one sender at a time runs a watcher. A sender starts when
// a watcher is queued while every sender is busy, up to BusySenders: a few
// senders keep two cores busy, and each one started and ended leaves stack slots
// and a goroutine record behind. A send to a client that does not read blocks its
// sender; every StuckAfter (Tick) the hub counts the sends blocked longer than
// that and starts a sender for each, up to MaxSenders, so stalled clients hold
// up only their own watchers.
//
// What a stream's request asks for (its scope, its token, whether it may read)
// is the registrar's to decide (Config.Open), and so are the forms the server's
// codec sends (Config.Encoded, Message, Raw). The hub must never import the
// registrar's top package, nor a registry backend.
package hub
