package client

import (
	"errors"
	"fmt"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
)

// The client asks for compressed snapshots (accept_compressed): a registrar sends
// a full snapshot's parts as zstd frames, about a sixth of the bytes, and one that
// predates the field sends them as they are. inflate restores a part.

// maxInflated bounds what one frame may decompress to. The registrar's frames
// hold about 64 KiB of endpoints each (a group of its snapshot's buckets), so
// anything near this is not a snapshot part.
const maxInflated = 64 << 20

var zstdDecoder = mustDecoder()

func mustDecoder() *zstd.Decoder {
	// DecodeAll is safe for concurrent use; concurrency 0 is one per core.
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(maxInflated))
	if err != nil {
		panic(err) // only for invalid options
	}
	return d
}

var errSmuggled = errors.New("a compressed part holds fields other than endpoints")

// inflate decompresses a FULL_SNAPSHOT part's compressed frames into its endpoints:
// each frame's content is more fields of the same message, merged as protobuf
// merges them. A frame that does not decompress, or that holds anything but
// endpoints, is an error: the stream ends and the client resyncs.
func inflate(ev *registrarv1.EndpointEvent) error {
	frames := ev.GetCompressed()
	if len(frames) == 0 {
		return nil
	}
	ev.Compressed = nil
	var buf []byte
	for i, f := range frames {
		b, err := zstdDecoder.DecodeAll(f, buf[:0])
		if err != nil {
			return fmt.Errorf("compressed part %d: %w", i, err)
		}
		if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(b, ev); err != nil {
			return fmt.Errorf("compressed part %d: %w", i, err)
		}
		buf = b // Unmarshal copied what it kept
	}
	return onlyEndpoints(ev)
}

// onlyEndpoints fails unless the only field ev holds is endpoints (a FULL_SNAPSHOT's
// type is the zero value, which protobuf does not hold): whatever else a frame
// merged in, a type, a version, more frames, is not a snapshot part's.
func onlyEndpoints(ev *registrarv1.EndpointEvent) error {
	var err error
	ev.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		if fd.Name() != "endpoints" {
			err = errSmuggled
		}
		return err == nil
	})
	return err
}
