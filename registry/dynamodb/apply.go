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
	chunks := r.chunks(ops, r.now())
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

// chunks turns coalesced ops into transactions within DynamoDB's limits.
func (r *driver) chunks(ops []registry.Op, now time.Time) []chunk {
	var (
		out   []chunk
		cur   chunk
		bytes int
	)
	for _, op := range ops {
		k := op.Endpoint.Key()
		var (
			item types.TransactWriteItem
			size int
		)
		if op.Kind == registry.OpRegister {
			attrs := encode(op.Endpoint, now)
			item.Put = &types.Put{TableName: aws.String(r.table), Item: attrs}
			size = itemSize(attrs)
		} else {
			key := itemKey(k)
			item.Delete = &types.Delete{TableName: aws.String(r.table), Key: key}
			size = itemSize(key)
		}
		if len(cur.items) == maxTxnItems || (len(cur.items) > 0 && bytes+size > maxTxnBytes) {
			out = append(out, cur)
			cur, bytes = chunk{}, 0
		}
		cur.items = append(cur.items, item)
		cur.keys = append(cur.keys, k)
		bytes += size
	}
	if len(cur.items) > 0 {
		out = append(out, cur)
	}
	return out
}

// write runs one transaction; the SDK's retryer retries what is transient.
func (r *driver) write(ctx context.Context, c chunk) error {
	_, err := r.client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: c.items})
	if err == nil {
		return nil
	}
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		err = fmt.Errorf("%s: %w", cancelReasons(tce, c.keys), err)
	}
	if unavailable(err) {
		return fmt.Errorf("%w: %w", registry.ErrUnavailable, err)
	}
	return err
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
