// Package wire is Switchboard's hand-assembled protobuf wire form of the messages on
// its hot paths: the registrar's events, encoded once and shared by every watcher.
// Field numbers and enum values live here once; a test holds each of them to the
// generated descriptors, so a .proto change the codec misses fails.
//
// It must import neither gRPC nor a generated package that carries gRPC stubs: the
// registrar's versioned view, which has no gRPC in it, encodes through it.
package wire
