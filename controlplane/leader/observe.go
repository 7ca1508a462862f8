package leader

import (
	"context"
	"encoding/json"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// observe keeps Leader current until ctx ends: the leader is the holder of the
// oldest key under the prefix, as concurrency.Election decides. It re-reads on
// every change, which a campaign makes rarely, and at least once a lease TTL: a
// watch response lost on a shared stream would otherwise leave it wrong until the
// next change.
func (e *Elector) observe(ctx context.Context) {
	for ctx.Err() == nil {
		resp, err := e.o.Client.Get(ctx, e.o.Prefix+"/", clientv3.WithFirstCreate()...)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		var info Info
		ok := len(resp.Kvs) > 0 && json.Unmarshal(resp.Kvs[0].Value, &info) == nil
		key := ""
		if len(resp.Kvs) > 0 {
			key = string(resp.Kvs[0].Key)
		}
		e.setLeader(info, ok, key, resp.Header.Revision)
		wctx, cancel := context.WithCancel(ctx)
		wch := e.o.Client.Watch(clientv3.WithRequireLeader(wctx), e.o.Prefix+"/",
			clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		e.awaitChange(ctx, wch)
		cancel()
	}
}

// setLeader records the observed leader. A leader that sees another key lead (its
// own was deleted) ends its term — if the observation was made after it was elected
// (rev), not before.
func (e *Elector) setLeader(info Info, ok bool, key string, rev int64) {
	e.mu.Lock()
	changed := e.known != ok || e.leader != info
	e.leader, e.known = info, ok
	if e.endTerm != nil && key != e.self && rev >= e.selfRev {
		e.log.Warn("leader election: this replica's key no longer leads", "key", e.self, "leader", key)
		e.endTerm()
	}
	e.mu.Unlock()
	if changed {
		e.log.Info("leader observed", "leader", info.ID, "known", ok)
		if e.o.OnLeader != nil {
			e.o.OnLeader(info, ok)
		}
	}
}

// awaitChange returns at the watch's next response, after a lease TTL, or when ctx
// ends.
func (e *Elector) awaitChange(ctx context.Context, wch clientv3.WatchChan) {
	reread := time.NewTimer(e.o.TTL)
	defer reread.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-reread.C:
			return
		case <-wch:
			if e.dropWatch.Load() > 0 {
				e.dropWatch.Add(-1)
				continue
			}
			return
		}
	}
}
