package registrar

import (
	"fmt"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
	"github.com/switchboard-mesh/switchboard/internal/wire"
)

// checkCompressed is checkSnapshot of a compressed snapshot: every message of at
// most chunkBytes holds compressed fields only, which decompress to the items.
// (snapDriver.check runs it on every snapshot of the random-change tests, so a
// bucket compressed before a change and sent after it fails them.)
func checkCompressed(t testing.TB, snap *snapshot, want map[string]bool) {
	t.Helper()
	// Compressed parts leave the instance ids out (TestCompressedSnapshotOverTheWire
	// checks that against protobuf's decoding).
	stripped := make(map[string]bool, len(want))
	for w := range want {
		stripped[string(wire.DropField([]byte(w), wire.EndpointFieldInstanceID))] = true
	}
	checkMessages(t, snap, stripped, func(msg []byte) []byte { return inflateItems(t, msg) })
}

var testDecoder, _ = zstd.NewReader(nil)

// inflateItems decompresses a compressed FULL_SNAPSHOT message into its items.
func inflateItems(t testing.TB, msg []byte) []byte {
	t.Helper()
	var items []byte
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		frame, m := protowire.ConsumeBytes(msg[max(n, 0):])
		if n < 0 || m < 0 || num != wire.EventFieldCompressed || typ != protowire.BytesType {
			t.Fatalf("compressed message: malformed, or a field other than compressed (%d)", num)
		}
		msg = msg[n+m:]
		raw, err := testDecoder.DecodeAll(frame, nil)
		if err != nil {
			t.Fatalf("compressed message: %v", err)
		}
		items = append(items, raw...)
	}
	return items
}

// inflateEvent merges a compressed part into ev, as the field's documentation
// tells a client to.
func inflateEvent(t *testing.T, ev *registrarv1.EndpointEvent) {
	t.Helper()
	for _, f := range ev.GetCompressed() {
		raw, err := testDecoder.DecodeAll(f, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(raw, ev); err != nil {
			t.Fatal(err)
		}
	}
	ev.Compressed = nil
}

// Over the wire, a watcher that accepts compressed snapshots gets the very
// endpoints an ordinary one gets (but their instance ids), in under half the
// bytes, before and after a change; a scoped snapshot comes uncompressed either
// way.
func TestCompressedSnapshotOverTheWire(t *testing.T) {
	ts := startServer(t, Config{BatchInterval: 5 * time.Millisecond})
	ctx := testCtx(t)
	var eps []endpoint.Endpoint
	for i := range 3000 {
		e := ep("east", []string{"web", "db", "cache"}[i%3], fmt.Sprintf("10.1.%d.%d", i/250, i%250), 8080)
		e.Annotations = map[string]string{"zone": "eu-west-1" + string(rune('a'+i%3)), "team": "platform"}
		eps = append(eps, e)
	}
	if _, err := ts.client.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: protos(eps...)}); err != nil {
		t.Fatal(err)
	}
	compare := func(removed endpoint.Endpoint) {
		t.Helper()
		plain, plainDone := openWatchReq(t, ts.client, &registrarv1.WatchEndpointsRequest{}).untilComplete(t)
		zipped, zippedDone := openWatchReq(t, ts.client, &registrarv1.WatchEndpointsRequest{AcceptCompressed: true}).untilComplete(t)
		plainBytes, zippedBytes := 0, 0
		for _, ev := range plain {
			plainBytes += proto.Size(ev)
		}
		for _, ev := range zipped {
			zippedBytes += proto.Size(ev)
			if len(ev.GetCompressed()) == 0 || len(ev.GetEndpoints()) > 0 {
				t.Fatalf("a compressed watcher's part has %d frames and %d plain endpoints", len(ev.GetCompressed()), len(ev.GetEndpoints()))
			}
			inflateEvent(t, ev)
		}
		// Of the same state (a PROGRESS between them may move the sequence).
		if p, z := mustToken(t, plainDone.GetVersion()), mustToken(t, zippedDone.GetVersion()); !p.HasDigest || p.Digest != z.Digest {
			t.Fatalf("snapshots at %s and %s", plainDone.GetVersion(), zippedDone.GetVersion())
		}
		want, got := snapshotEndpoints(plain), snapshotEndpoints(zipped)
		if len(want) != len(got) || len(got) != len(eps)-1 {
			t.Fatalf("compressed snapshot holds %d endpoints, the plain one %d, want %d", len(got), len(want), len(eps)-1)
		}
		for k, p := range want {
			if got[k].GetInstanceId() != "" {
				t.Fatalf("%v: a compressed part holds its instance id", k)
			}
			p.InstanceId = "" // left out of compressed parts: the receiver computes it
			if !proto.Equal(p, got[k]) {
				t.Fatalf("%v: compressed %v, plain %v", k, got[k], p)
			}
		}
		if _, ok := got[removed.Key()]; ok {
			t.Fatalf("the compressed snapshot still holds %v", removed.Key())
		}
		if zippedBytes*3 > plainBytes {
			t.Fatalf("compressed snapshot is %d bytes, the plain one %d", zippedBytes, plainBytes)
		}
	}
	gone := eps[7]
	if _, err := ts.client.UnregisterEndpoint(ctx, &registrarv1.UnregisterEndpointRequest{Endpoints: protos(gone)}); err != nil {
		t.Fatal(err)
	}
	compare(gone)
	// A change after the first compressed snapshot: only its bucket is compressed
	// again, and the new snapshot must hold it.
	changed := eps[11]
	changed.Weight = 77
	if _, err := ts.client.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: protos(changed)}); err != nil {
		t.Fatal(err)
	}
	gone2 := eps[12]
	if _, err := ts.client.UnregisterEndpoint(ctx, &registrarv1.UnregisterEndpointRequest{Endpoints: protos(gone2)}); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.client.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: protos(gone)}); err != nil {
		t.Fatal(err)
	}
	compare(gone2)
	zipped, _ := openWatchReq(t, ts.client, &registrarv1.WatchEndpointsRequest{AcceptCompressed: true}).untilComplete(t)
	for _, ev := range zipped {
		inflateEvent(t, ev)
	}
	if got := snapshotEndpoints(zipped)[changed.Key()]; got.GetWeight() != 77 {
		t.Fatalf("compressed snapshot holds %v after the update", got)
	}

	scoped, _ := openWatchReq(t, ts.client, &registrarv1.WatchEndpointsRequest{Services: []string{"db"}, AcceptCompressed: true}).untilComplete(t)
	n := 0
	for _, ev := range scoped {
		if len(ev.GetCompressed()) > 0 {
			t.Fatal("a scoped snapshot came compressed")
		}
		n += len(ev.GetEndpoints())
	}
	if n != 1000 {
		t.Fatalf("scoped snapshot of db holds %d endpoints, want 1000", n)
	}
}

// snapshotEndpoints is the endpoints of snapshot parts, by key.
func snapshotEndpoints(evs []*registrarv1.EndpointEvent) map[endpoint.Key]*registryv1.Endpoint {
	out := map[endpoint.Key]*registryv1.Endpoint{}
	for _, ev := range evs {
		for _, p := range ev.GetEndpoints() {
			out[keyOf(p)] = p
		}
	}
	return out
}
