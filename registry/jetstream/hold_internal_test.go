package jetstream

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// TestHeldRemovalRaceLeavesEntry: a held unregister whose subject was written between
// its read and its removal (the server refuses the removal's expected sequence) leaves
// the entry and succeeds, where an unheld one is sized and sent again.
func TestHeldRemovalRaceLeavesEntry(t *testing.T) {
	r := &driver{}
	e := endpoint.Endpoint{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.1", Port: 80, Priority: 1}
	ops := []registry.Op{{Kind: registry.OpUnregister, Endpoint: e, Hold: "0123456789abcdef0123456789abcdef"}}
	b := newBatch(context.Background(), nil, len(ops))
	defer b.timer.Stop()
	b.fail(0, &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence})
	r.retryRemovals(b, ops, &headers{r: r})
	if err := b.result(ops, func(err error) error { return err }); err != nil {
		t.Fatalf("held unregister after a concurrent write = %v, want success, the entry left", err)
	}
}
