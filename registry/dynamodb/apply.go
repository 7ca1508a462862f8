package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// DynamoDB's limits on one TransactWriteItems call: 100 items and 4 MB. The byte
// budget leaves room for the error in itemSize's estimate.
const (
	maxTxnItems = 100
	maxTxnBytes = 4_000_000
)

// Apply writes the batch (one op per key) in transactions of at most 100 items; see
// the package documentation.
func (r *driver) Apply(ctx context.Context, ops []registry.Op) error {
	chunks, err := r.chunks(ops, r.now())
	if err != nil {
		failed := make([]endpoint.Key, len(ops))
		for i, op := range ops {
			failed[i] = op.Endpoint.Key()
		}
		return &registry.ApplyError{Failed: failed, Err: err}
	}
	for i, c := range chunks {
		if err := r.write(ctx, c); err != nil {
			var failed []endpoint.Key
			for _, c := range chunks[i:] {
				failed = append(failed, c.keys...)
			}
			err = fmt.Errorf("transaction %d of %d on table %s: %w", i+1, len(chunks), r.table, err)
			return &registry.ApplyError{Failed: failed, Err: err}
		}
	}
	return nil
}

// chunk is one transaction's items and the keys they write, in the same order.
type chunk struct {
	items []types.TransactWriteItem
	keys  []endpoint.Key
}

// chunks turns coalesced ops into transactions within DynamoDB's limits. It fails,
// before anything is written, if an op names a hold this driver does not know.
func (r *driver) chunks(ops []registry.Op, now time.Time) ([]chunk, error) {
	var (
		out   []chunk
		cur   chunk
		bytes int
	)
	for _, op := range ops {
		item, size, err := r.txnItem(op, now)
		if err != nil {
			return nil, err
		}
		if len(cur.items) == maxTxnItems || (len(cur.items) > 0 && bytes+size > maxTxnBytes) {
			out = append(out, cur)
			cur, bytes = chunk{}, 0
		}
		cur.items = append(cur.items, item)
		cur.keys = append(cur.keys, op.Endpoint.Key())
		bytes += size
	}
	if len(cur.items) > 0 {
		out = append(out, cur)
	}
	return out, nil
}

// txnItem is op's transaction item and its estimated size: a Put or a Delete, and
// under a hold a Put naming the owner or a Delete only while the item still names it.
func (r *driver) txnItem(op registry.Op, now time.Time) (types.TransactWriteItem, int, error) {
	var owner string
	if op.Hold != "" {
		var err error
		if owner, err = r.heldOwner(op.Hold); err != nil {
			return types.TransactWriteItem{}, 0, err
		}
	}
	if op.Kind == registry.OpRegister {
		attrs := encode(op.Endpoint, now)
		if owner != "" {
			attrs = encodeHeld(op.Endpoint, owner, now)
		}
		return types.TransactWriteItem{Put: &types.Put{TableName: aws.String(r.table), Item: attrs}}, itemSize(attrs), nil
	}
	key := itemKey(op.Endpoint.Key())
	del := &types.Delete{TableName: aws.String(r.table), Key: key}
	if owner != "" {
		del.ConditionExpression = aws.String("#owner = :owner")
		del.ExpressionAttributeNames = map[string]string{"#owner": attrOwner}
		del.ExpressionAttributeValues = map[string]types.AttributeValue{":owner": str(owner)}
	}
	return types.TransactWriteItem{Delete: del}, itemSize(key) + len(owner), nil
}

// write runs one transaction; the SDK's retryer retries what is transient. A held
// removal whose entry another hold has taken over (or that is gone) cancels the
// transaction: that is its intended outcome, not a failure, so the transaction is
// written again without it.
func (r *driver) write(ctx context.Context, c chunk) error {
	for len(c.items) > 0 {
		_, err := r.client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: c.items})
		if err == nil {
			return nil
		}
		var tce *types.TransactionCanceledException
		if errors.As(err, &tce) {
			if rest, ok := withoutTakenOver(tce, c); ok {
				r.log.Debug("dynamodb: held removals left entries another hold took over",
					"table", r.table, "left", len(c.items)-len(rest.items))
				c = rest
				continue
			}
			err = fmt.Errorf("%s: %w", cancelReasons(tce, c.keys), err)
		}
		if unavailable(err) {
			return fmt.Errorf("%w: %w", registry.ErrUnavailable, err)
		}
		return err
	}
	return nil
}

// withoutTakenOver returns c without its held removals whose condition failed, when
// those are all that cancelled it.
func withoutTakenOver(tce *types.TransactionCanceledException, c chunk) (chunk, bool) {
	drop := map[int]bool{}
	for i, reason := range tce.CancellationReasons {
		switch code := aws.ToString(reason.Code); {
		case code == "" || code == "None":
		case code == "ConditionalCheckFailed" && i < len(c.items) && isHeldDelete(c.items[i]):
			drop[i] = true
		default:
			return chunk{}, false
		}
	}
	if len(drop) == 0 {
		return chunk{}, false
	}
	var rest chunk
	for i := range c.items {
		if !drop[i] {
			rest.items = append(rest.items, c.items[i])
			rest.keys = append(rest.keys, c.keys[i])
		}
	}
	return rest, true
}

func isHeldDelete(item types.TransactWriteItem) bool {
	return item.Delete != nil && item.Delete.ConditionExpression != nil
}

// cancelReasons names each key whose item cancelled the transaction, and why.
func cancelReasons(tce *types.TransactionCanceledException, keys []endpoint.Key) string {
	var parts []string
	for i, reason := range tce.CancellationReasons {
		code := aws.ToString(reason.Code)
		if code == "" || code == "None" || i >= len(keys) {
			continue
		}
		part := keys[i].String() + ": " + code
		if msg := aws.ToString(reason.Message); msg != "" {
			part += " (" + msg + ")"
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return "transaction cancelled"
	}
	return "transaction cancelled by " + strings.Join(parts, "; ")
}
