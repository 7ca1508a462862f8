package client

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/internal/wire"
)

// ListAll reads the endpoints f matches from the registrar behind cc with one
// ListAllEndpoints call, and returns them (sorted as the registrar sorts them) with
// the snapshot version they were read at. The response is decoded straight from
// gRPC's receive buffers into endpoints (wire.DecodeListing), not through generated
// messages: for a whole-registry listing that is most of the call's time. It needs no
// Client: tools and one-shot readers use it as it is; the Client uses it before its
// stream's first snapshot.
func ListAll(ctx context.Context, cc grpc.ClientConnInterface, f endpoint.Filter, opts ...grpc.CallOption) ([]endpoint.Endpoint, string, error) {
	req := &registrarv1.ListAllEndpointsRequest{Cluster: f.Cluster, Service: f.Service, Protocol: f.Protocol, Address: f.Address}
	var out listing
	opts = append(opts, grpc.ForceCodecV2(listCodec{}))
	if err := cc.Invoke(ctx, registrarv1.Registrar_ListAllEndpoints_FullMethodName, req, &out, opts...); err != nil {
		return nil, "", err
	}
	return out.endpoints, out.version, nil
}

// listing receives a decoded ListAllEndpointsResponse.
type listing struct {
	endpoints []endpoint.Endpoint
	version   string
}

// listCodec marshals requests as protobuf does and decodes the response into a
// listing while gRPC still holds its buffers (the decoded strings are copies).
type listCodec struct{}

func (listCodec) Marshal(v any) (mem.BufferSlice, error) {
	return encoding.GetCodecV2("proto").Marshal(v)
}

func (listCodec) Unmarshal(data mem.BufferSlice, v any) error {
	out, ok := v.(*listing)
	if !ok {
		return errors.New("registrar client: list codec asked to decode into a different type")
	}
	// A large response arrives in many buffers; they are copied into one from
	// gRPC's pool rather than a new allocation, which for a whole-registry listing
	// is its size again in garbage per call.
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	var err error
	out.endpoints, out.version, err = wire.DecodeListing(buf.ReadOnlyData())
	return err
}

func (listCodec) Name() string { return "proto" }
