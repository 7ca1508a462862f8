package aether

import (
	"fmt"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-mesh/switchboard/endpoint"
	aetherregistrarv1 "github.com/switchboard-mesh/switchboard/gen/aether/registrar/v1"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
)

// recorder is a translator whose sends are recorded as short strings:
// "TYPE service/ip@version".
type recorder struct {
	*translator
	got     []string
	catalog map[string]int // Catalog's answer to a resumed replay; nil: cannot tell
}

func newRecorder(filter ...string) *recorder {
	r := &recorder{}
	var set map[string]struct{}
	if filter != nil {
		set = map[string]struct{}{}
		for _, f := range filter {
			if f != "" {
				set[f] = struct{}{}
			}
		}
	}
	catalog := func(version string, vis func(string) bool) (map[string]int, bool) {
		if r.catalog == nil || !vis("http") || vis("tcp") {
			return nil, false
		}
		return r.catalog, true
	}
	r.translator = newTranslator(set, catalog, func(ev *aetherregistrarv1.WatchEndpointsResponse) error {
		s := strings.TrimPrefix(ev.GetType().String(), "EVENT_TYPE_") + " " + ev.GetServiceName()
		if ev.GetEndpoint() != nil {
			s += "/" + ev.GetEndpoint().GetIp()
		}
		if ev.GetVersion() != "" {
			s += "@" + ev.GetVersion()
		}
		r.got = append(r.got, s)
		return nil
	})
	return r
}

func (r *recorder) feed(t *testing.T, evs ...*registrarv1.EndpointEvent) error {
	t.Helper()
	for _, ev := range evs {
		b, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.handle(b); err != nil {
			return err
		}
	}
	return nil
}

func (r *recorder) want(t *testing.T, want ...string) {
	t.Helper()
	if strings.Join(r.got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("sent\n  %s\nwant\n  %s", strings.Join(r.got, "\n  "), strings.Join(want, "\n  "))
	}
	r.got = nil
}

func ep(svc, protocol, ip string) *registryv1.Endpoint {
	return endpoint.Endpoint{Cluster: "east", Service: svc, Protocol: protocol, Address: ip, Port: 80, Priority: 1}.ToProto()
}

func part(eps ...*registryv1.Endpoint) *registrarv1.EndpointEvent {
	return &registrarv1.EndpointEvent{Type: registrarv1.EndpointEvent_FULL_SNAPSHOT, Endpoints: eps}
}

func complete(v string, resumed bool) *registrarv1.EndpointEvent {
	return &registrarv1.EndpointEvent{Type: registrarv1.EndpointEvent_SNAPSHOT_COMPLETE, Version: v, Resumed: resumed}
}

func change(typ registrarv1.EndpointEvent_EventType, e *registryv1.Endpoint, v string) *registrarv1.EndpointEvent {
	return &registrarv1.EndpointEvent{Type: typ, Endpoint: e, Version: v}
}

const (
	added   = registrarv1.EndpointEvent_ENDPOINT_ADDED
	updated = registrarv1.EndpointEvent_ENDPOINT_UPDATED
	removed = registrarv1.EndpointEvent_ENDPOINT_REMOVED
)

// The snapshot's endpoints one per event, then the catalog, then
// SNAPSHOT_COMPLETE with the version; endpoints of other protocols are left out,
// from the catalog too.
func TestTranslateSnapshot(t *testing.T) {
	r := newRecorder()
	if err := r.feed(t, part(ep("web", "http", "10.0.0.1"), ep("db", "tcp", "10.0.0.9")), part(ep("web", "http", "10.0.0.2"), ep("api", "http", "10.0.0.3")), complete("v5", false)); err != nil {
		t.Fatal(err)
	}
	r.want(t, "FULL_SNAPSHOT web/10.0.0.1", "FULL_SNAPSHOT web/10.0.0.2", "FULL_SNAPSHOT api/10.0.0.3",
		"SERVICE_ADDED api", "SERVICE_ADDED web", "SNAPSHOT_COMPLETE @v5")
}

// An empty state: no endpoints, no catalog, SNAPSHOT_COMPLETE.
func TestTranslateEmptySnapshot(t *testing.T) {
	r := newRecorder()
	if err := r.feed(t, complete("v1", false), change(added, ep("web", "http", "10.0.0.1"), "v2")); err != nil {
		t.Fatal(err)
	}
	r.want(t, "SNAPSHOT_COMPLETE @v1", "ENDPOINT_ADDED web/10.0.0.1", "SERVICE_ADDED web@v2")
}

// A filter scopes the endpoint events, never the catalog's; an empty one lets
// no endpoint through.
func TestTranslateFilterLetsTheCatalogThrough(t *testing.T) {
	for _, tc := range []struct {
		filter []string
		snap   []string
		live   []string
	}{
		{[]string{"web"}, []string{"FULL_SNAPSHOT web/10.0.0.1"},
			[]string{"SERVICE_ADDED cache@v6", "ENDPOINT_UPDATED web/10.0.0.1@v7", "SERVICE_REMOVED api@v8"}},
		{[]string{""}, nil, []string{"SERVICE_ADDED cache@v6", "SERVICE_REMOVED api@v8"}},
	} {
		t.Run(fmt.Sprint(tc.filter), func(t *testing.T) {
			r := newRecorder(tc.filter...)
			if err := r.feed(t, part(ep("web", "http", "10.0.0.1"), ep("api", "http", "10.0.0.3")), complete("v5", false)); err != nil {
				t.Fatal(err)
			}
			r.want(t, append(tc.snap, "SERVICE_ADDED api", "SERVICE_ADDED web", "SNAPSHOT_COMPLETE @v5")...)
			if err := r.feed(t, change(added, ep("cache", "http", "10.0.0.4"), "v6"), change(updated, ep("web", "http", "10.0.0.1"), "v7"),
				change(removed, ep("api", "http", "10.0.0.3"), "v8")); err != nil {
				t.Fatal(err)
			}
			r.want(t, tc.live...)
		})
	}
}

// A service appears with its first endpoint and disappears with its last; the
// catalog event follows the endpoint's and carries the version (the last message
// of the change: a stream cut between the two leaves the client's token behind
// its catalog, never ahead); other protocols change nothing.
func TestTranslateCatalogTransitions(t *testing.T) {
	r := newRecorder()
	err := r.feed(t, complete("v1", false),
		change(added, ep("web", "http", "10.0.0.1"), "v2"),
		change(added, ep("web", "http", "10.0.0.2"), "v3"),
		change(added, ep("web", "tcp", "10.0.0.1"), "v4"),
		change(removed, ep("web", "http", "10.0.0.1"), "v5"),
		&registrarv1.EndpointEvent{Type: registrarv1.EndpointEvent_PROGRESS, Version: "v6"},
		change(removed, ep("web", "http", "10.0.0.2"), "v7"))
	if err != nil {
		t.Fatal(err)
	}
	r.want(t, "SNAPSHOT_COMPLETE @v1", "ENDPOINT_ADDED web/10.0.0.1", "SERVICE_ADDED web@v2", "ENDPOINT_ADDED web/10.0.0.2@v3",
		"ENDPOINT_REMOVED web/10.0.0.1@v5", "ENDPOINT_REMOVED web/10.0.0.2", "SERVICE_REMOVED web@v7")
}

// A BATCH's events are translated in order, as if each came alone.
func TestTranslateBatch(t *testing.T) {
	r := newRecorder()
	batch := &registrarv1.EndpointEvent{Type: registrarv1.EndpointEvent_BATCH, Events: []*registrarv1.EndpointEvent{
		change(added, ep("web", "http", "10.0.0.1"), "v2"), change(removed, ep("web", "http", "10.0.0.1"), "v3")}}
	if err := r.feed(t, complete("v1", false), batch); err != nil {
		t.Fatal(err)
	}
	r.want(t, "SNAPSHOT_COMPLETE @v1", "ENDPOINT_ADDED web/10.0.0.1", "SERVICE_ADDED web@v2", "ENDPOINT_REMOVED web/10.0.0.1", "SERVICE_REMOVED web@v3")
}

// A resumed replay: its changes, unversioned (only SNAPSHOT_COMPLETE moves the
// client's token, after the catalog), then the registrar's catalog at its
// version, then SNAPSHOT_COMPLETE; later changes keep that catalog.
func TestTranslateResume(t *testing.T) {
	r := newRecorder()
	r.catalog = map[string]int{"web": 2, "api": 1}
	if err := r.feed(t, change(added, ep("web", "http", "10.0.0.2"), "v8"), complete("v8", true), change(removed, ep("api", "http", "10.0.0.3"), "v9")); err != nil {
		t.Fatal(err)
	}
	r.want(t, "ENDPOINT_ADDED web/10.0.0.2", "SERVICE_ADDED api", "SERVICE_ADDED web", "SNAPSHOT_COMPLETE @v8",
		"ENDPOINT_REMOVED api/10.0.0.3", "SERVICE_REMOVED api@v9")

	// When the registrar cannot tell the catalog, the stream ends with DataLoss.
	r = newRecorder()
	if err := r.feed(t, complete("v8", true)); status.Code(err) != codes.DataLoss {
		t.Fatalf("resume without a catalog: %v, want DataLoss", err)
	}
}

// A snapshot after changes is the registrar's resync of a slow watcher, which
// Aether's protocol cannot say: DataLoss, so the agent reconnects afresh.
func TestTranslateResyncIsDataLoss(t *testing.T) {
	r := newRecorder()
	if err := r.feed(t, complete("v1", false), part(ep("web", "http", "10.0.0.1"))); status.Code(err) != codes.DataLoss {
		t.Fatalf("a snapshot after SNAPSHOT_COMPLETE: %v, want DataLoss", err)
	}
	r = newRecorder()
	r.catalog = map[string]int{}
	if err := r.feed(t, change(added, ep("web", "http", "10.0.0.1"), "v2"), part(ep("web", "http", "10.0.0.1"))); status.Code(err) != codes.DataLoss {
		t.Fatalf("a snapshot in a resumed replay: %v, want DataLoss", err)
	}
}

// A compressed snapshot part is restored; one holding anything but endpoints is
// refused.
func TestTranslateCompressedPart(t *testing.T) {
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	frame := func(fields []byte) []byte { return enc.EncodeAll(fields, nil) }
	item, _ := proto.Marshal(ep("web", "http", "10.0.0.1"))
	items := protowire.AppendBytes(protowire.AppendTag(nil, 6, protowire.BytesType), item)
	r := newRecorder()
	if err := r.feed(t, &registrarv1.EndpointEvent{Compressed: [][]byte{frame(items)}}, complete("v1", false)); err != nil {
		t.Fatal(err)
	}
	r.want(t, "FULL_SNAPSHOT web/10.0.0.1", "SERVICE_ADDED web", "SNAPSHOT_COMPLETE @v1")

	smuggled := protowire.AppendString(protowire.AppendTag(nil, 5, protowire.BytesType), "v9")
	if err := newRecorder().feed(t, &registrarv1.EndpointEvent{Compressed: [][]byte{frame(smuggled)}}); status.Code(err) != codes.Internal {
		t.Fatalf("a compressed part with a version: %v, want Internal", err)
	}
}

// Our NAME__NS services are Aether's NS/NAME in endpoint and catalog events; a
// filter of Aether's names scopes our services.
func TestTranslateServiceNames(t *testing.T) {
	set, err := filterOf(&aetherregistrarv1.ServiceFilter{Services: []string{"shop/web"}})
	if err != nil {
		t.Fatal(err)
	}
	r := newRecorder()
	r.filter = set
	if err := r.feed(t, part(ep("web__shop", "http", "10.0.0.1"), ep("api", "http", "10.0.0.2")), complete("v1", false),
		change(added, ep("web__shop", "http", "10.0.0.3"), "v2"), change(added, ep("cart__shop", "http", "10.0.0.4"), "v3"),
		change(removed, ep("cart__shop", "http", "10.0.0.4"), "v4")); err != nil {
		t.Fatal(err)
	}
	r.want(t, "FULL_SNAPSHOT shop/web/10.0.0.1", "SERVICE_ADDED api", "SERVICE_ADDED shop/web", "SNAPSHOT_COMPLETE @v1",
		"ENDPOINT_ADDED shop/web/10.0.0.3@v2", "SERVICE_ADDED shop/cart@v3", "SERVICE_REMOVED shop/cart@v4")
}
