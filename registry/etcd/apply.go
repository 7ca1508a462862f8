package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Apply writes the batch as one Txn per chunk of at most MaxTxnOps operations. A
// failure after some chunks were written returns an *registry.ApplyError naming the
// keys of the unwritten chunks.
func (r *driver) Apply(ctx context.Context, ops []registry.Op) error {
	for len(ops) > 0 {
		n := min(len(ops), int(r.maxOps.Load()))
		err := r.commit(ctx, ops[:n])
		if shrunk := r.shrink(n, err); shrunk {
			continue // nothing of this chunk was applied: retry it smaller
		}
		if err != nil {
			return &registry.ApplyError{Failed: opKeys(ops), Err: err}
		}
		ops = ops[n:]
	}
	return nil
}

// shrink lowers the chunk size when the server refused a Txn for carrying too many
// operations or bytes, and reports whether the chunk should be retried.
func (r *driver) shrink(n int, err error) bool {
	if n <= 1 || !(errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrRequestTooLarge)) {
		return false
	}
	half := int64(n / 2)
	if r.maxOps.Load() > half {
		r.maxOps.Store(half)
		r.log.Warn("etcd refused a transaction; writing smaller ones (match --etcd-max-txn-ops to the server's --max-txn-ops)",
			"ops", n, "now", half, "err", err)
	}
	return true
}

// commit writes one chunk in one Txn. A lease the server no longer knows is
// replaced and the chunk retried once.
func (r *driver) commit(ctx context.Context, ops []registry.Op) error {
	for attempt := 0; ; attempt++ {
		txnOps, err := r.txnOps(ctx, ops)
		if err != nil {
			return classify(ctx, err)
		}
		_, err = r.client.Txn(ctx).Then(txnOps...).Commit()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt == 0 {
			r.leases.reset()
			continue
		}
		return classify(ctx, err)
	}
}

// txnOps builds the Txn's operations, attaching each TTL'd key to its lease and each
// held one to its hold's (hold.go).
func (r *driver) txnOps(ctx context.Context, ops []registry.Op) ([]clientv3.Op, error) {
	out := make([]clientv3.Op, 0, len(ops))
	for _, op := range ops {
		key := r.layout.key(op.Endpoint.Key())
		if op.Kind == registry.OpUnregister && op.Hold == "" {
			out = append(out, clientv3.OpDelete(key))
			continue
		}
		var value []byte
		if op.Kind == registry.OpRegister {
			var err error
			if value, err = json.Marshal(op.Endpoint); err != nil {
				return nil, fmt.Errorf("encode %s: %w", op.Endpoint.Key(), err)
			}
		}
		if op.Hold != "" {
			o, err := r.heldOp(key, string(value), op)
			if err != nil {
				return nil, err
			}
			out = append(out, o)
			continue
		}
		var opts []clientv3.OpOption
		if d := op.Endpoint.TTL.Duration(); d > 0 {
			id, err := r.leases.get(ctx, d)
			if err != nil {
				return nil, err
			}
			opts = append(opts, clientv3.WithLease(id))
		}
		out = append(out, clientv3.OpPut(key, string(value), opts...))
	}
	return out, nil
}

func opKeys(ops []registry.Op) []endpoint.Key {
	keys := make([]endpoint.Key, len(ops))
	for i, op := range ops {
		keys[i] = op.Endpoint.Key()
	}
	return keys
}
