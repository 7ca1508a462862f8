// Package wire is Switchboard's one protobuf codec for the messages on its hot
// paths: hand-written where a benchmark showed that neither protobuf's generated
// code nor vtprotobuf's (gen/…/*_vtproto.pb.go) is as fast, vtprotobuf's where it
// is (vt_bench_test.go and the node's wire_vt_bench_test.go hold the comparison).
//
// It owns:
//   - the field numbers and enum values of every message encoded or decoded by
//     hand, each declared once: events (event.go), endpoints (endpoint.go),
//     listings (listing.go), watch requests (request.go) and the data-plane
//     node's frames, messages and batches (frame.go);
//   - the registrar's encoders: an endpoint (MarshalEndpoint, through
//     vtprotobuf's MarshalVT where that is deterministic), its events, snapshot
//     chunks and batches, each encoded once and shared by every watcher;
//   - the decoders: a watch request (DecodeWatchRequest) and a listing into
//     endpoint.Endpoint values (DecodeListing), the client's;
//   - the data-plane node's forwarding codec (frame.go): a Message kept in its
//     wire form and read only for what forwarding needs (DecodeMessage,
//     Message.AppendField), names, published messages, publish and respond
//     requests, and a RequestStream's answers;
//   - the primitives they and the node's codec walk messages with (field.go):
//     ConsumeTag, NextField, EachField, CountFields, FindField, DropField and
//     google.protobuf.Duration's decoding.
//
// fields_test.go holds every field number here to the generated descriptors
// (internal/wirecheck), completely for each message a codec reads or writes
// whole, and the enums it mirrors (event types, health) value by value, so a
// .proto change the codec misses fails; fuzz targets hold each decoder, and
// MarshalEndpoint, to protobuf.
//
// It imports no gRPC (not even google.golang.org/grpc/mem), nor a generated
// package that carries gRPC stubs (gen/switchboard/registrar/v1,
// gen/switchboard/node/v1): the registrar's versioned view, which has no gRPC in
// it, encodes through it. The gRPC-facing adapters — the registrar's server codec
// and shared buffers, the client's and the node's mem.Buffer handling — stay in
// their packages and call this one.
package wire
