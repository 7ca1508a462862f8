package dynamodb

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// defaultReapAfter is how long past its heartbeat's expiry a dead owner's entry is
// left before a reader that holds deletes it. Readers already hide it; the margin
// keeps a reader whose clock runs ahead from deleting the entries of a writer that is
// still renewing.
const defaultReapAfter = time.Minute

// reapQueue bounds the deletions waiting: what does not fit is found again by a
// later read.
const reapQueue = 1024

// A reaper deletes the entries of dead owners that reads come across, so that they
// do not stay in the table (and in every Scan) forever. Only a driver that holds
// runs one: a registrar replica, not every agent that reads. Each deletion is
// conditional on the entry still naming the dead owner, so an entry another hold
// has taken over meanwhile stays.
type reaper struct {
	once    sync.Once
	mu      sync.Mutex
	pending map[endpoint.Key]bool // queued and not yet attempted
	queue   chan reapItem
}

type reapItem struct {
	key   endpoint.Key
	owner string
}

// startReaper starts the reaper the first time this driver holds; it ends at Close.
func (r *driver) startReaper() {
	r.reaper.once.Do(func() {
		r.reaper.mu.Lock()
		r.reaper.pending = map[endpoint.Key]bool{}
		r.reaper.queue = make(chan reapItem, reapQueue)
		r.reaper.mu.Unlock()
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.reap()
		}()
	})
}

// toReap queues a dead owner's entry for deletion, if this driver reaps and it is not
// queued already; it never blocks a read.
func (r *driver) toReap(k endpoint.Key, owner string) {
	q := &r.reaper
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.queue == nil || q.pending[k] {
		return
	}
	select {
	case q.queue <- reapItem{key: k, owner: owner}:
		q.pending[k] = true
	default:
	}
}

func (r *driver) reap() {
	for {
		select {
		case <-r.stop.Done():
			return
		case it := <-r.reaper.queue:
			r.reapOne(r.stop, it)
			r.reaper.mu.Lock()
			delete(r.reaper.pending, it.key)
			r.reaper.mu.Unlock()
		}
	}
}

// reapOne deletes an entry only while it still names the dead owner. A failure is
// logged and forgotten: the next read that meets the entry queues it again.
func (r *driver) reapOne(ctx context.Context, it reapItem) {
	_, err := r.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(r.table),
		Key:                       itemKey(it.key),
		ConditionExpression:       aws.String("#owner = :owner"),
		ExpressionAttributeNames:  map[string]string{"#owner": attrOwner},
		ExpressionAttributeValues: map[string]types.AttributeValue{":owner": str(it.owner)},
	})
	var taken *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		r.log.Debug("dynamodb: deleted an entry of a dead hold", "table", r.table, "key", it.key, "owner", it.owner)
	case errors.As(err, &taken), ctx.Err() != nil:
	default:
		r.log.Warn("dynamodb: deleting an entry of a dead hold failed", "table", r.table, "key", it.key, "err", err)
	}
}
