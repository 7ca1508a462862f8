package registrar

import (
	"google.golang.org/grpc/mem"

	"github.com/switchboard-mesh/switchboard/registrar/internal/view"
)

// The view holds events and snapshots as plain bytes; what the codec sends is
// made of them once, as the view creates them (view.Config's hooks), and shared
// by every watcher sent them: a send wraps nothing.

// wrapEvent is an event as every watcher is sent it: its buffer list, made once.
func wrapEvent(msg []byte) any { return share(msg) }

// wrapPart is a sealed part of snapshot messages as the transport takes it.
func wrapPart(part []byte) any { return mem.Buffer(mem.SliceBuffer(part)) }

// snapMessages are a snapshot's FULL_SNAPSHOT messages as the codec sends them:
// each a run of its parts' buffers, without a copy.
type snapMessages []shared

// wrapSnapshot makes a snapshot's messages, once per snapshot: one buffer list
// for all of its parts, of which each message is a run.
func wrapSnapshot(snap *view.Snapshot) any {
	bufs := make(mem.BufferSlice, 0, snap.PartCount())
	msgs := make(snapMessages, snap.Len())
	for i := range msgs {
		start := len(bufs)
		snap.Parts(i, func(p *view.Part) { bufs = append(bufs, p.Out.(mem.Buffer)) })
		msgs[i].data = bufs[start:len(bufs):len(bufs)]
	}
	return msgs
}

// message returns snap's i-th message as the codec sends it.
func message(snap *view.Snapshot, i int) any { return &snap.Out.(snapMessages)[i] }

// eventBytes is the bytes of an event's message (wrapEvent's), for a paced
// watcher's tracked send of them (hub's batch.go).
func eventBytes(event any) *[]byte { return &event.(*shared).raw }
