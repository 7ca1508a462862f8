package wire

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
)

// FuzzDecodeWatchRequest: the watch request, decoded by hand on the handler's shallow
// stack, reads as protobuf reads it, and is refused exactly when protobuf refuses it.
func FuzzDecodeWatchRequest(f *testing.F) {
	for _, m := range []*registrarv1.WatchEndpointsRequest{
		{NodeName: "n1", ClusterName: "east", LastVersion: "1.5", Services: []string{"web", "db"}, ScopeId: 7},
		{AllServices: true},
		{AcceptBatches: true, LastVersion: "3.9"},
		{AcceptCompressed: true, AcceptBatches: true},
		{Session: "5f1c0e9a2b7d4c38a1e6f0b29d8c7e41", AllServices: true},
		{},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := DecodeWatchRequest(data)
		var want registrarv1.WatchEndpointsRequest
		perr := proto.Unmarshal(data, &want)
		if (err == nil) != (perr == nil) {
			t.Fatalf("decode error %v, protobuf's %v", err, perr)
		}
		if err != nil {
			return
		}
		if got.GetClusterName() != want.GetClusterName() || got.GetNodeName() != want.GetNodeName() ||
			got.GetLastVersion() != want.GetLastVersion() || !slices.Equal(got.GetServices(), want.GetServices()) ||
			got.ScopeID != want.GetScopeId() || got.AllServices != want.GetAllServices() ||
			got.AcceptBatches != want.GetAcceptBatches() || got.AcceptCompressed != want.GetAcceptCompressed() ||
			got.GetSession() != want.GetSession() {
			t.Fatalf("decoded %+v, protobuf reads %v", got, &want)
		}
	})
}
