package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/switchboard-mesh/switchboard/registry"
)

// Hold keeps entries registered under it alive until ttl after ctx ends (the
// process's liveness is the hold's: nothing outside it can renew one). See
// registry.Holder.
func (r *store) Hold(ctx context.Context, ttl time.Duration) (registry.HoldID, error) {
	r.mu.Lock()
	r.holdSeq++
	id := registry.HoldID(fmt.Sprintf("memory-hold-%d", r.holdSeq))
	r.holds[id] = true
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		select {
		case <-r.done:
			return
		case <-ctx.Done():
		}
		t := time.NewTimer(ttl)
		defer t.Stop()
		select {
		case <-r.done:
		case <-t.C:
			r.release(id)
		}
	}()
	return id, nil
}

// release ends a hold: the entries it kept alive are removed, as an etcd lease's are
// when it runs out.
func (r *store) release(id registry.HoldID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.holds, id)
	for k, e := range r.entries {
		if e.hold == id {
			r.remove(k)
		}
	}
}

func unknownHold(id registry.HoldID) error {
	return fmt.Errorf("memory: %w: unknown or ended hold %q", registry.ErrNoHold, id)
}
