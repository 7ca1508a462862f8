package aether

import (
	"fmt"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/switchboard-mesh/switchboard/endpoint"
	aetherregistrarv1 "github.com/switchboard-mesh/switchboard/gen/aether/registrar/v1"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
)

// An Aether watch is one of the registrar's own watchers, unscoped; a translator
// turns what that watcher sends (registrarv1.EndpointEvent in wire form) into
// Aether's events on the Aether stream:
//
//   - a full snapshot's endpoints become FULL_SNAPSHOT events, one per endpoint;
//   - its SNAPSHOT_COMPLETE (and a resumed replay's) becomes the service catalog
//     as SERVICE_ADDED events, then SNAPSHOT_COMPLETE with the version;
//   - ADDED, UPDATED and REMOVED become the same; an ADDED that gives a service
//     its first endpoint is followed by SERVICE_ADDED, a REMOVED of its last by
//     SERVICE_REMOVED;
//   - PROGRESS has no counterpart and is dropped (the registrar sends it to every
//     watcher, this one too: state.announce puts it in the history ring): Aether's
//     client has nothing to confirm with it, and its token only moves at the next
//     change.
//
// Service names are Aether's (AetherService): our NAME__NS is "NS/NAME".
//
// Only the last message of a group carries the version, so that a stream cut
// anywhere leaves the client's token no further than what it holds: Aether's
// client replaces its catalog on reconnect only when SNAPSHOT_COMPLETE's version
// differs from its token. A live change's version goes on the catalog event that
// follows its endpoint event, if one does, else on the endpoint event; a resumed
// replay's changes go out unversioned (each is idempotent per key), and its
// SNAPSHOT_COMPLETE, after the catalog, carries the version.
//
// Endpoint events of services outside the filter are dropped here; catalog events
// never are. A catalog is the number of endpoints per service (of protocols Aether
// names), counted from the snapshot, or after a resumed replay read from the
// registrar at the replay's version, and kept by the change events after it.
//
// The registrar resyncs a watcher that fell behind its history ring with a full
// snapshot on the same stream. Aether's protocol has no such thing (its agent
// takes FULL_SNAPSHOT events as upserts), so a snapshot that comes after changes
// were sent ends the stream with DataLoss, as Aether's own registrar ends a
// watcher that overflowed: the agent reconnects and is sent a full snapshot.

// translator translates one Aether watch.
type translator struct {
	filter  map[string]struct{} // nil: every service
	catalog func(version string, visible func(string) bool) (map[string]int, bool)
	send    func(*aetherregistrarv1.WatchEndpointsResponse) error
	counts  map[string]int // endpoints per service; nil until known
	changed bool           // change events were sent: a snapshot now is a resync
	live    bool           // SNAPSHOT_COMPLETE was sent: counts are kept
}

func newTranslator(filter map[string]struct{}, catalog func(string, func(string) bool) (map[string]int, bool),
	send func(*aetherregistrarv1.WatchEndpointsResponse) error) *translator {
	return &translator{filter: filter, catalog: catalog, send: send}
}

// errResync ends a stream whose watcher the registrar resynced.
var errResync = status.Error(codes.DataLoss, "watch fell behind the registrar's history; reconnect for a full snapshot")

// visible reports whether Aether's API shows endpoints of protocol p.
func visible(p string) bool { return p == protocolHTTP }

// visibleEndpoint converts one of our events' endpoints; ok is false for one
// Aether's API leaves out (or, never from our registrar, one that does not convert).
func visibleEndpoint(p *registryv1.Endpoint) (endpoint.Endpoint, bool) {
	e, err := endpoint.FromProtoUnchecked(p)
	return e, err == nil && visible(e.Protocol)
}

// handle translates one message of the registrar's watcher.
func (t *translator) handle(b []byte) error {
	var ev registrarv1.EndpointEvent
	if err := proto.Unmarshal(b, &ev); err != nil {
		return status.Errorf(codes.Internal, "aether watch: decode the registrar's event: %v", err)
	}
	return t.event(&ev)
}

// event translates one of our events.
func (t *translator) event(ev *registrarv1.EndpointEvent) error {
	switch ev.GetType() {
	case registrarv1.EndpointEvent_FULL_SNAPSHOT:
		return t.snapshotPart(ev)
	case registrarv1.EndpointEvent_SNAPSHOT_COMPLETE:
		return t.complete(ev)
	case registrarv1.EndpointEvent_ENDPOINT_ADDED, registrarv1.EndpointEvent_ENDPOINT_UPDATED, registrarv1.EndpointEvent_ENDPOINT_REMOVED:
		return t.change(ev)
	case registrarv1.EndpointEvent_BATCH:
		for _, sub := range ev.GetEvents() {
			if err := t.event(sub); err != nil {
				return err
			}
		}
	}
	return nil // PROGRESS, and types a later registrar may add
}

// snapshotPart sends a full snapshot's endpoints and counts them.
func (t *translator) snapshotPart(ev *registrarv1.EndpointEvent) error {
	if t.changed || t.live {
		return errResync
	}
	if err := inflate(ev); err != nil {
		return status.Errorf(codes.Internal, "aether watch: %v", err)
	}
	if t.counts == nil {
		t.counts = map[string]int{}
	}
	for _, p := range ev.GetEndpoints() {
		e, ok := visibleEndpoint(p)
		if !ok {
			continue
		}
		t.counts[e.Service]++
		if err := t.sendEndpoint(aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_FULL_SNAPSHOT, e, ""); err != nil {
			return err
		}
	}
	return nil
}

// complete sends the catalog, then SNAPSHOT_COMPLETE. After a resumed replay the
// catalog is the registrar's at the replay's version.
func (t *translator) complete(ev *registrarv1.EndpointEvent) error {
	if t.live {
		return errResync // only after a resync, whose snapshot already ended the stream
	}
	if ev.GetResumed() {
		counts, ok := t.catalog(ev.GetVersion(), visible)
		if !ok {
			return errResync
		}
		t.counts = counts
	}
	if t.counts == nil {
		t.counts = map[string]int{} // an empty snapshot
	}
	for _, svc := range sortedNames(t.counts) {
		if err := t.send(&aetherregistrarv1.WatchEndpointsResponse{Type: aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_SERVICE_ADDED, ServiceName: svc}); err != nil {
			return err
		}
	}
	t.live = true
	return t.send(&aetherregistrarv1.WatchEndpointsResponse{
		Type:    aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_SNAPSHOT_COMPLETE,
		Version: ev.GetVersion(),
	})
}

// change sends an ADDED, UPDATED or REMOVED, then the catalog event it caused;
// the last of them carries the version.
func (t *translator) change(ev *registrarv1.EndpointEvent) error {
	e, ok := visibleEndpoint(ev.GetEndpoint())
	if !ok {
		return nil
	}
	t.changed = true
	typ := changeTypes[ev.GetType()]
	if !t.live {
		// A resumed replay: unversioned; the catalog is read at its end, and its
		// SNAPSHOT_COMPLETE carries the version.
		return t.sendEndpoint(typ, e, "")
	}
	catalog := t.count(ev.GetType(), e.Service)
	version := ev.GetVersion()
	if catalog != aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_UNSPECIFIED {
		if err := t.sendEndpoint(typ, e, ""); err != nil {
			return err
		}
		return t.sendService(catalog, e.Service, version)
	}
	return t.sendEndpoint(typ, e, version)
}

// count keeps the catalog's count of svc through a change of type typ, and
// returns the catalog event it causes (EVENT_TYPE_UNSPECIFIED: none).
func (t *translator) count(typ registrarv1.EndpointEvent_EventType, svc string) aetherregistrarv1.WatchEndpointsResponse_EventType {
	switch typ {
	case registrarv1.EndpointEvent_ENDPOINT_ADDED:
		if t.counts[svc]++; t.counts[svc] == 1 {
			return aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_SERVICE_ADDED
		}
	case registrarv1.EndpointEvent_ENDPOINT_REMOVED:
		if t.counts[svc]--; t.counts[svc] <= 0 {
			delete(t.counts, svc)
			return aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_SERVICE_REMOVED
		}
	}
	return aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_UNSPECIFIED
}

var changeTypes = map[registrarv1.EndpointEvent_EventType]aetherregistrarv1.WatchEndpointsResponse_EventType{
	registrarv1.EndpointEvent_ENDPOINT_ADDED:   aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_ENDPOINT_ADDED,
	registrarv1.EndpointEvent_ENDPOINT_UPDATED: aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_ENDPOINT_UPDATED,
	registrarv1.EndpointEvent_ENDPOINT_REMOVED: aetherregistrarv1.WatchEndpointsResponse_EVENT_TYPE_ENDPOINT_REMOVED,
}

// sendEndpoint sends an endpoint event, if the filter lets the service through.
func (t *translator) sendEndpoint(typ aetherregistrarv1.WatchEndpointsResponse_EventType, e endpoint.Endpoint, version string) error {
	if t.filter != nil {
		if _, ok := t.filter[e.Service]; !ok {
			return nil
		}
	}
	svc, p, ep, ok := FromEndpoint(e)
	if !ok {
		return nil
	}
	return t.send(&aetherregistrarv1.WatchEndpointsResponse{Type: typ, ServiceName: svc, Protocol: p, Endpoint: ep, Version: version})
}

// sendService sends a catalog event of our service svc: service name (Aether's)
// only, whatever the filter.
func (t *translator) sendService(typ aetherregistrarv1.WatchEndpointsResponse_EventType, svc, version string) error {
	return t.send(&aetherregistrarv1.WatchEndpointsResponse{Type: typ, ServiceName: AetherService(svc), Version: version})
}

// The service does not ask for compressed snapshots, but a part that comes
// compressed is restored as the registrar's client restores it: each zstd frame
// holds more endpoints of the same message.
var zstdDecoder = mustDecoder()

// maxInflated bounds what one frame may decompress to (the registrar's hold
// about 64 KiB).
const maxInflated = 64 << 20

func mustDecoder() *zstd.Decoder {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(maxInflated))
	if err != nil {
		panic(err) // only for invalid options
	}
	return d
}

// inflate merges a snapshot part's compressed frames into its endpoints; a frame
// that holds anything else is an error.
func inflate(ev *registrarv1.EndpointEvent) error {
	frames := ev.GetCompressed()
	if len(frames) == 0 {
		return nil
	}
	ev.Compressed = nil
	for i, f := range frames {
		b, err := zstdDecoder.DecodeAll(f, nil)
		if err == nil {
			err = proto.UnmarshalOptions{Merge: true}.Unmarshal(b, ev)
		}
		if err != nil {
			return fmt.Errorf("compressed part %d: %w", i, err)
		}
	}
	var err error
	ev.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		if fd.Name() != "endpoints" {
			err = fmt.Errorf("a compressed part holds %s", fd.Name())
		}
		return err == nil
	})
	return err
}
