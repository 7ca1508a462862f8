package view

import (
	"testing"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/switchboard-mesh/switchboard/internal/wire"
)

// checkCompressed is checkSnapshot of a compressed snapshot: every message of at
// most ChunkBytes holds compressed fields only, which decompress to the items.
// (snapDriver.check runs it on every snapshot of the random-change tests, so a
// bucket compressed before a change and sent after it fails them.)
func checkCompressed(t testing.TB, snap *Snapshot, want map[string]bool) {
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
