package nodeauth

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestReplayCacheSharesPerOwner: one identity that presents token after token (a
// compromised node asking its SPIRE agent for fresh SVIDs) uses up its own share of
// the replay cache, never the others': they still register.
func TestReplayCacheSharesPerOwner(t *testing.T) {
	now := time.Now()
	c := newReplayCache(1000)
	var err error
	for i := 0; err == nil && i < 1000; i++ {
		err = c.add("spiffe://cloud/node/bad", fmt.Sprintf("k%d", i), now.Add(time.Minute), now)
	}
	if !errors.Is(err, ErrReplayCacheFull) {
		t.Fatalf("one identity added 1000 live tokens without a refusal (last error %v)", err)
	}
	if err := c.add("spiffe://cloud/node/good", "g1", now.Add(time.Minute), now); err != nil {
		t.Fatalf("another identity was refused after the first filled its share: %v", err)
	}
	// Its share comes back as its tokens expire.
	if err := c.add("spiffe://cloud/node/bad", "later", now.Add(2*time.Minute), now.Add(61*time.Second)); err != nil {
		t.Fatalf("after its tokens expired: %v", err)
	}
}
