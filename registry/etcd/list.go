package etcd

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// defaultPageSize bounds one range response, keeping it far below gRPC's message
// limits even with large annotations.
const defaultPageSize = 2000

// List reads the filter's key range (see doc.go) and returns the endpoints in it;
// the registry.Front keeps those the filter matches and sorts them.
func (r *driver) List(ctx context.Context, f endpoint.Filter) ([]endpoint.Endpoint, error) {
	start, end := r.layout.span(f)
	out := []endpoint.Endpoint{}
	_, err := r.scan(ctx, start, end, func(kv *mvccpb.KeyValue) {
		if ep, ok := r.decode(kv.Key, kv.Value); ok {
			out = append(out, ep)
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// snapshot reads [start, end) at one revision and returns the endpoints f matches,
// in endpoint order (a watcher's first events), with that revision.
func (r *driver) snapshot(ctx context.Context, f endpoint.Filter, start, end string) ([]endpoint.Endpoint, int64, error) {
	var state []endpoint.Endpoint
	rev, err := r.scan(ctx, start, end, func(kv *mvccpb.KeyValue) {
		if ep, ok := r.decode(kv.Key, kv.Value); ok && f.Match(ep) {
			state = append(state, ep)
		}
	})
	endpoint.Sort(state)
	return state, rev, err
}

// scan visits every key in [start, end) at one revision, a page at a time, and
// returns the revision. Pages after the first are read at the first page's
// revision; if that is compacted meanwhile, the scan starts over.
func (r *driver) scan(ctx context.Context, start, end string, visit func(*mvccpb.KeyValue)) (int64, error) {
	for {
		rev, err := r.scanAt(ctx, start, end, visit)
		if !errors.Is(err, rpctypes.ErrCompacted) {
			return rev, classify(ctx, err)
		}
	}
}

func (r *driver) scanAt(ctx context.Context, start, end string, visit func(*mvccpb.KeyValue)) (int64, error) {
	var rev int64
	var seen []*mvccpb.KeyValue
	for key := start; ; {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(r.pageSize))}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := r.client.Get(ctx, key, opts...)
		if err != nil {
			return 0, err
		}
		if rev == 0 {
			// Later pages report the store's current revision, not the one read.
			rev = resp.Header.Revision
		}
		seen = append(seen, resp.Kvs...)
		if h := r.hooks.page; h != nil {
			h(rev)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	// Visit only once the whole range is read, so a restarted scan never visits a
	// key twice.
	for _, kv := range seen {
		visit(kv)
	}
	return rev, nil
}

// decode turns a stored pair into an endpoint, warning about (and skipping) pairs
// that are not valid endpoints.
func (r *driver) decode(key, value []byte) (endpoint.Endpoint, bool) {
	ep, err := r.layout.decode(key, value)
	if err != nil {
		r.log.Warn("skipping etcd key that is not a valid endpoint", "err", err)
		return endpoint.Endpoint{}, false
	}
	return ep, true
}
