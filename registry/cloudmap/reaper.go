package cloudmap

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	"github.com/aws/aws-sdk-go-v2/service/servicediscovery/types"
)

// reapBacklog bounds the queue of expired instances awaiting deregistration. A full
// queue drops the item: the next List that sees the instance queues it again.
const reapBacklog = 1024

type reapItem struct{ svcID, instanceID string }

// reapQueue holds expired instances seen by List, each at most once.
type reapQueue struct {
	ch     chan reapItem
	mu     sync.Mutex
	queued map[reapItem]bool
}

func newReapQueue() reapQueue {
	return reapQueue{ch: make(chan reapItem, reapBacklog), queued: map[reapItem]bool{}}
}

func (r *driver) enqueueReap(svcID, instanceID string) {
	it := reapItem{svcID, instanceID}
	q := &r.reap
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.queued[it] {
		return
	}
	select {
	case q.ch <- it:
		q.queued[it] = true
	default:
	}
}

// reapLoop deregisters expired instances one at a time until Close.
func (r *driver) reapLoop() {
	defer r.wg.Done()
	for {
		select {
		case <-r.life.Done():
			return
		case it := <-r.reap.ch:
			if err := r.reapOne(r.life, it); err != nil && r.life.Err() == nil {
				r.log.Warn("deregistering an expired Cloud Map instance failed", "service", it.svcID, "instance", it.instanceID, "err", err)
			}
			r.reap.mu.Lock()
			delete(r.reap.queued, it)
			r.reap.mu.Unlock()
		}
	}
}

// reapOne deregisters an instance if it is still expired. It re-reads the instance
// first, so a registration refreshed since List saw it survives, and it leaves alone
// instances this process is writing at the moment.
func (r *driver) reapOne(ctx context.Context, it reapItem) error {
	if r.busy.has(it.instanceID) {
		return nil
	}
	out, err := call(ctx, r, func(ctx context.Context) (*sd.GetInstanceOutput, error) {
		return r.client.GetInstance(ctx, &sd.GetInstanceInput{ServiceId: aws.String(it.svcID), InstanceId: aws.String(it.instanceID)})
	})
	var noInstance *types.InstanceNotFound
	var noService *types.ServiceNotFound
	switch {
	case errors.As(err, &noInstance) || errors.As(err, &noService):
		return nil
	case err != nil:
		return err
	}
	d, err := decode(it.instanceID, out.Instance.Attributes)
	if err != nil {
		return fmt.Errorf("left alone, it no longer decodes: %w", err)
	}
	if !d.expired(r.opts.Now()) || r.busy.has(it.instanceID) {
		return nil
	}
	opID, err := r.submitDeregister(ctx, it.svcID, it.instanceID)
	if err != nil || opID == "" {
		return err
	}
	if _, err := r.await(ctx, opID); err != nil {
		return err
	}
	r.log.Debug("deregistered expired Cloud Map instance", "service", it.svcID, "instance", it.instanceID, "endpoint", d.ep.Key().String())
	return nil
}
