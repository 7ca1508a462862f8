package registrar

import (
	"sync"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// A watcher that set accept_compressed takes a full snapshot compressed: the same
// FULL_SNAPSHOT parts, each part's endpoints in one zstd frame (field compressed),
// without their instance ids (withoutInstanceIDs). Endpoints compress about
// fourfold so (their cluster, service, protocol and annotations repeat), and a
// reconnect storm is bytes: ten thousand agents taking a 100,000-endpoint
// snapshot are tens of gigabytes uncompressed.
//
// Compression happens once per bucket encoding, not per watcher nor per
// version: a bucket's parts are compressed the first time a compressed snapshot
// holds them and kept with them until one of the bucket's endpoints changes, so
// after a change only that bucket is compressed again. gRPC's own per-message
// compression would compress every message for every watcher instead.

// epInstanceID is registryv1.Endpoint's instance_id field.
const epInstanceID = 12

// zstdEncoder compresses bucket parts; EncodeAll is safe for concurrent use.
var zstdEncoder = mustEncoder()

func mustEncoder() *zstd.Encoder {
	// Default level: compression is paid once per change of a bucket of a few KiB,
	// and every byte saved is saved for every watcher sent it.
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(2))
	if err != nil {
		panic(err) // only for invalid options
	}
	return enc
}

// zipped is the bucket's parts compressed, each as one field of a FULL_SNAPSHOT
// message: the compressed field's tag and length, then the frame.
type zipped struct {
	once  sync.Once
	parts mem.BufferSlice
}

// zipped returns c's parts compressed, compressing them on the first call.
func (c *chunker) zipped() mem.BufferSlice {
	c.zip.once.Do(func() {
		c.zip.parts = make(mem.BufferSlice, len(c.parts))
		for i, part := range c.parts {
			c.zip.parts[i] = mem.SliceBuffer(compressPart(part.ReadOnlyData()))
		}
	})
	return c.zip.parts
}

// compressPart encodes items (a part's FULL_SNAPSHOT fields) as one compressed
// field, without the endpoints' instance ids.
func compressPart(items []byte) []byte {
	frame := zstdEncoder.EncodeAll(withoutInstanceIDs(items), nil)
	out := protowire.AppendTag(make([]byte, 0, len(frame)+8), fieldZipped, protowire.BytesType)
	return protowire.AppendBytes(out, frame)
}

// compressed returns the snapshot as a compressed watcher takes it: the same
// version and endpoints, in messages of compressed parts. It is built on the first
// call and shared by every compressed watcher of this version.
func (s *snapshot) compressed() *snapshot {
	s.zipOnce.Do(func() {
		var all chunker
		for _, enc := range s.encs {
			all.parts = append(all.parts, enc.zipped()...)
			all.items = append(all.items, enc.items...)
		}
		s.zip = packed(s.at, &all)
	})
	return s.zip
}

// withoutInstanceIDs returns snapshot items with the endpoints' instance_id left
// out. An instance id is a hash of the endpoint's key, so it does not compress:
// it would be half of a compressed snapshot's bytes, and a receiver that needs it
// computes it from the key (as the registrar's client does for every endpoint).
func withoutInstanceIDs(items []byte) []byte {
	out := make([]byte, 0, len(items))
	for len(items) > 0 {
		_, _, n := protowire.ConsumeTag(items) // our own encoding: well formed
		ep, m := protowire.ConsumeBytes(items[n:])
		items = items[n+m:]
		out = protowire.AppendTag(out, fieldEndpoints, protowire.BytesType)
		out = protowire.AppendBytes(out, dropField(ep, epInstanceID))
	}
	return out
}

// dropField returns the encoded message b without its fields numbered num (b
// itself when it has none).
func dropField(b []byte, num protowire.Number) []byte {
	var out []byte
	for i := 0; i < len(b); {
		got, typ, n := protowire.ConsumeTag(b[i:])
		if n < 0 {
			return b // not ours to judge: sent as it is
		}
		m := protowire.ConsumeFieldValue(got, typ, b[i+n:])
		if m < 0 {
			return b
		}
		if got == num && out == nil {
			out = append(make([]byte, 0, len(b)), b[:i]...)
		} else if got != num && out != nil {
			out = append(out, b[i:i+n+m]...)
		}
		i += n + m
	}
	if out == nil {
		return b
	}
	return out
}
