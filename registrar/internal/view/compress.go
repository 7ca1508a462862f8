package view

import (
	"slices"
	"sync"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/switchboard-mesh/switchboard/internal/wire"
	"github.com/switchboard-mesh/switchboard/registrar/token"
)

// A watcher that set accept_compressed takes a full snapshot compressed: the same
// FULL_SNAPSHOT messages, their endpoints in zstd frames (field compressed),
// without their instance ids (withoutInstanceIDs). Endpoints compress about
// fourfold so (their cluster, service, protocol and annotations repeat), and a
// reconnect storm is bytes: ten thousand agents taking a 100,000-endpoint
// snapshot are tens of gigabytes uncompressed.
//
// Compression is not per watcher, nor per version. A frame holds a group of
// consecutive buckets, about one message's worth (64 KiB): frames of single
// buckets would compress a fifth worse and take twice as long to decompress. The
// partition's zipCache keeps each group's frame with the bucket encodings it was
// made of, so after a change only the changed bucket's group is compressed again
// (about 0.3 ms), and every watcher of a version shares its messages. gRPC's own
// per-message compression would compress every message for every watcher instead.

// zstdEncoder compresses groups; EncodeAll is safe for concurrent use.
var zstdEncoder = mustEncoder()

func mustEncoder() *zstd.Encoder {
	// The fastest level: on snapshot items it compresses as well as the default
	// one (about 4.7x), in two thirds of the time.
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		panic(err) // only for invalid options
	}
	return enc
}

// zipCache keeps the compressed frame of each group of buckets.
type zipCache struct {
	wrap   func([]byte) any // Config.WrapPart
	mu     sync.Mutex
	groups []zipGroup
}

type zipGroup struct {
	encs []*chunker // the bucket encodings it was compressed from
	// frame is the compressed field (tag, length, zstd frame), as the one part
	// of an encoding of its own, with the group's number of endpoints.
	frame *chunker
}

// Compressed returns the snapshot as a compressed watcher takes it: the same
// version and endpoints, in messages of compressed frames. It is built on the
// first call and shared by every compressed watcher of this version. Only a full
// snapshot (partition.snapshot) has a compressed form.
func (s *Snapshot) Compressed() *Snapshot {
	s.zipOnce.Do(func() {
		s.zip = s.zips.compress(s.At, s.encs, s.groupSize)
		if s.zip.wrap = s.wrap; s.wrap != nil {
			s.zip.Out = s.wrap(s.zip)
		}
	})
	return s.zip
}

// compress returns the snapshot at version at of the bucket encodings encs, in
// groups of size, compressing the groups whose encodings changed.
func (c *zipCache) compress(at token.Version, encs []*chunker, size int) *Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := (len(encs) + size - 1) / size
	if len(c.groups) != n { // the buckets were redistributed
		c.groups = make([]zipGroup, n)
	}
	frames := make([]*chunker, 0, n)
	for i := range c.groups {
		g, group := &c.groups[i], encs[i*size:min(len(encs), (i+1)*size)]
		if !slices.Equal(g.encs, group) {
			*g = compressGroup(group, c.wrap)
		}
		if g.frame != nil {
			frames = append(frames, g.frame)
		}
	}
	return packed(at, frames)
}

// compressGroup compresses the endpoints of a group of bucket encodings into one
// compressed field of a FULL_SNAPSHOT message.
func compressGroup(encs []*chunker, wrap func([]byte) any) zipGroup {
	g := zipGroup{encs: slices.Clone(encs)}
	var items []byte
	n := 0
	for _, enc := range encs {
		for i, part := range enc.parts {
			items = append(items, part.Data...)
			n += enc.items[i]
		}
	}
	if n == 0 {
		return g
	}
	frame := zstdEncoder.EncodeAll(withoutInstanceIDs(items), nil)
	out := protowire.AppendTag(make([]byte, 0, len(frame)+8), wire.EventFieldCompressed, protowire.BytesType)
	// Its own encoding: a group compressed again replaces g, not the part that
	// snapshots still being sent hold.
	g.frame = &chunker{parts: []Part{sealPart(protowire.AppendBytes(out, frame), wrap)}, items: []int{n}}
	return g
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
		out = protowire.AppendTag(out, wire.EventFieldEndpoints, protowire.BytesType)
		out = protowire.AppendBytes(out, wire.DropField(ep, wire.EndpointFieldInstanceID))
	}
	return out
}
