package view

import (
	"fmt"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// An agent refreshes its endpoints every few seconds whatever the backend does. A
// key that cannot be persisted keeps the others company in the pending set, and
// every refresh of a pending key must overwrite its record, not add one: the
// bookkeeping stays proportional to the keys, not to the writes.
func TestPendingBookkeepingIsBoundedByKeys(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flush bool // a batch runs each round, persisting all but one key
	}{{"backend down", false}, {"one key unpersistable", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Config{Epoch: 1, History: 64, MaxQueue: 1000})
			stuck := ep("east", "web", "10.9.9.9", 80)
			if _, err := s.Accept([]registry.Op{registry.Register(stuck)}, nil, nil); err != nil {
				t.Fatal(err)
			}
			keys := make([]registry.Op, 100)
			for i := range keys {
				keys[i] = registry.Register(ep("east", "web", fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), 80))
			}
			for range 1000 {
				if _, err := s.Accept(keys, nil, nil); err != nil {
					t.Fatal(err)
				}
				if tc.flush {
					s.BatchDone(s.TakeBatch(0), map[endpoint.Key]bool{stuck.Key(): true}, false)
				}
			}
			if limit := 2*len(s.pending) + 64; len(s.accepted) > limit {
				t.Fatalf("%d acceptance records for %d pending keys, want at most %d", len(s.accepted), len(s.pending), limit)
			}
		})
	}
}
