package registrar

import (
	"sync"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// A watcher that set accept_compressed takes a full snapshot compressed: the same
// FULL_SNAPSHOT parts, each part's endpoints in one zstd frame (field compressed).
// Endpoints compress about threefold (their cluster, service, protocol and
// annotations repeat), and a reconnect storm is bytes: ten thousand agents taking
// a 100,000-endpoint snapshot are tens of gigabytes uncompressed.
//
// Compression happens once per bucket encoding, not per watcher nor per
// version: a bucket's parts are compressed the first time a compressed snapshot
// holds them and kept with them until one of the bucket's endpoints changes, so
// after a change only that bucket is compressed again. gRPC's own per-message
// compression would compress every message for every watcher instead.

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

// compressPart encodes items (a part's FULL_SNAPSHOT fields) as one compressed field.
func compressPart(items []byte) []byte {
	frame := zstdEncoder.EncodeAll(items, nil)
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
