package wire

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/switchboard-mesh/switchboard/registrar/token"
)

// EventType mirrors switchboard.registrar.v1.EndpointEvent.EventType.
type EventType int32

// The values of EventType, as the .proto numbers them.
const (
	FullSnapshot     EventType = 0
	EndpointAdded    EventType = 1
	EndpointRemoved  EventType = 2
	EndpointUpdated  EventType = 3
	SnapshotComplete EventType = 4
	Progress         EventType = 5
	Batch            EventType = 6
)

// Field numbers of switchboard.registrar.v1.EndpointEvent.
const (
	EventFieldType       protowire.Number = 1
	EventFieldEndpoint   protowire.Number = 4
	EventFieldVersion    protowire.Number = 5
	EventFieldEndpoints  protowire.Number = 6
	EventFieldResumed    protowire.Number = 7
	EventFieldPersisted  protowire.Number = 8
	EventFieldScopeID    protowire.Number = 9
	EventFieldEvents     protowire.Number = 10
	EventFieldCompressed protowire.Number = 11
	EventFieldTrace      protowire.Number = 12 // traceparent
)

// An event is encoded once, when it happens, and the same bytes go to every watcher;
// a snapshot is encoded once per version and shared by every watcher that takes it.
// Encoding per watcher would cost the registrar a marshal per event per agent.

// EncodeChange assembles an ADDED, UPDATED or REMOVED event, in a buffer of at
// least minCap bytes. traceparent, the W3C trace context of the event's fan-out
// span, is written only when set: with tracing off an event's bytes are what they
// always were.
func EncodeChange(t EventType, ep []byte, v token.Version, persisted uint64, traceparent string, minCap int) []byte {
	out := make([]byte, 0, max(len(ep)+80+len(traceparent)+2, minCap))
	out = protowire.AppendTag(out, EventFieldType, protowire.VarintType)
	out = protowire.AppendVarint(out, uint64(t))
	out = protowire.AppendTag(out, EventFieldEndpoint, protowire.BytesType)
	out = protowire.AppendBytes(out, ep)
	out = AppendVersion(out, EventFieldVersion, v)
	out = AppendVersion(out, EventFieldPersisted, token.Version{Epoch: v.Epoch, Seq: persisted})
	if traceparent != "" {
		out = protowire.AppendTag(out, EventFieldTrace, protowire.BytesType)
		out = protowire.AppendString(out, traceparent)
	}
	return out
}

// EncodeComplete assembles a SNAPSHOT_COMPLETE event.
func EncodeComplete(v token.Version, resumed bool, persisted, scopeID uint64) []byte {
	out := make([]byte, 0, 80)
	out = protowire.AppendTag(out, EventFieldType, protowire.VarintType)
	out = protowire.AppendVarint(out, uint64(SnapshotComplete))
	out = AppendVersion(out, EventFieldVersion, v)
	if resumed {
		out = protowire.AppendTag(out, EventFieldResumed, protowire.VarintType)
		out = protowire.AppendVarint(out, 1)
	}
	if scopeID != 0 {
		out = protowire.AppendTag(out, EventFieldScopeID, protowire.VarintType)
		out = protowire.AppendVarint(out, scopeID)
	}
	return AppendVersion(out, EventFieldPersisted, token.Version{Epoch: v.Epoch, Seq: persisted})
}

// EncodeProgress assembles a PROGRESS event: the frontier moved with no change.
func EncodeProgress(v token.Version, persisted uint64) []byte {
	out := make([]byte, 0, 80)
	out = protowire.AppendTag(out, EventFieldType, protowire.VarintType)
	out = protowire.AppendVarint(out, uint64(Progress))
	out = AppendVersion(out, EventFieldVersion, v)
	return AppendVersion(out, EventFieldPersisted, token.Version{Epoch: v.Epoch, Seq: persisted})
}

// AppendVersion appends a version token as the string field.
func AppendVersion(out []byte, field protowire.Number, v token.Version) []byte {
	out = protowire.AppendTag(out, field, protowire.BytesType)
	return protowire.AppendString(out, v.String())
}

// AppendSnapshotItem appends one endpoint to a FULL_SNAPSHOT chunk. FULL_SNAPSHOT is
// the enum's zero value, which proto3 leaves out, so a chunk is just its items.
func AppendSnapshotItem(chunk, ep []byte) []byte {
	chunk = protowire.AppendTag(chunk, EventFieldEndpoints, protowire.BytesType)
	return protowire.AppendBytes(chunk, ep)
}

// SnapshotItemSize is the encoded size of one chunk item.
func SnapshotItemSize(ep []byte) int {
	return protowire.SizeTag(EventFieldEndpoints) + protowire.SizeBytes(len(ep))
}

// BatchHeaderSize is the encoded size of a BATCH's type, which starts it.
var BatchHeaderSize = len(AppendBatchHeader(nil))

// AppendBatchHeader starts a BATCH event.
func AppendBatchHeader(out []byte) []byte {
	out = protowire.AppendTag(out, EventFieldType, protowire.VarintType)
	return protowire.AppendVarint(out, uint64(Batch))
}

// AppendBatchItem appends one encoded event to a BATCH: as a field of the BATCH,
// the event's own bytes, unchanged.
func AppendBatchItem(out, ev []byte) []byte {
	out = protowire.AppendTag(out, EventFieldEvents, protowire.BytesType)
	return protowire.AppendBytes(out, ev)
}

// BatchItemSize is the encoded size of one event in a BATCH.
func BatchItemSize(ev []byte) int {
	return protowire.SizeTag(EventFieldEvents) + protowire.SizeBytes(len(ev))
}

// EventEndpoint returns the endpoint field of an encoded event, nil if none.
func EventEndpoint(ev []byte) []byte { return FindField(ev, EventFieldEndpoint) }
