package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/ccmref"
	"github.com/switchboard-mesh/switchboard/registry"
	sbjs "github.com/switchboard-mesh/switchboard/registry/jetstream"
)

func (b *bench) publishOurs(ctx context.Context, r *registry.Front) (float64, error) {
	ops := make([]registry.Op, len(b.eps))
	for i, e := range b.eps {
		ops[i] = registry.Register(e)
	}
	start := time.Now()
	if err := r.Apply(ctx, ops); err != nil {
		return 0, err
	}
	return rate(len(ops), time.Since(start)), nil
}

// kvKey is the entry's subject below the prefix: the same key space for both stores.
func kvKey(e endpoint.Endpoint) string {
	return strings.Join([]string{e.Cluster, e.Protocol, e.Service, sbjs.AddressToken(e.Address), e.InstanceID()}, ".")
}

func (b *bench) bucket(ctx context.Context, name string) (jetstream.KeyValue, error) {
	st := jetstream.FileStorage
	if b.c.memory {
		st = jetstream.MemoryStorage
	}
	return b.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, History: 1, Storage: st})
}

func (b *bench) publishKVPut(ctx context.Context, bucket string) (float64, error) {
	kv, err := b.bucket(ctx, bucket)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	for _, e := range b.eps {
		data, _ := e.MarshalJSON()
		if _, err := kv.Put(ctx, kvKey(e), data); err != nil {
			return 0, err
		}
	}
	return rate(len(b.eps), time.Since(start)), nil
}

// publishKVAsync writes a bucket the fast way: async publishes to its subjects. With
// pre, the payloads are encoded before the clock starts: KV's bare publish rate. With
// headers, each message also carries the rollup header the spec puts on ours, which
// shows what it costs the server.
func (b *bench) publishKVAsync(ctx context.Context, bucket string, pre, headers bool) (float64, error) {
	var payloads [][]byte
	if pre {
		for _, e := range b.eps {
			data, _ := e.MarshalJSON()
			payloads = append(payloads, data)
		}
	}
	start := time.Now()
	futures := make([]jetstream.PubAckFuture, 0, len(b.eps))
	acked := 0 // futures before acked have been awaited
	await := func(f jetstream.PubAckFuture) error {
		select {
		case <-f.Ok():
			return nil
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for i, e := range b.eps {
		var data []byte
		if pre {
			data = payloads[i]
		} else {
			data, _ = e.MarshalJSON()
		}
		m := &nats.Msg{Subject: "$KV." + bucket + "." + kvKey(e), Data: data}
		if headers {
			m.Header = nats.Header{jetstream.MsgRollup: {jetstream.MsgRollupSubject}}
		}
		f, err := b.js.PublishMsgAsync(m)
		// A loaded server acks slowly enough for the connection's budget of
		// outstanding publishes to fill, and nats.go then gives up after a short
		// stall wait: wait for the oldest ack and try again, as the backend's Apply
		// does, so both writers meet the same back-pressure.
		for errors.Is(err, jetstream.ErrTooManyStalledMsgs) && acked < len(futures) {
			if err := await(futures[acked]); err != nil {
				return 0, err
			}
			acked++
			f, err = b.js.PublishMsgAsync(m)
		}
		if err != nil {
			return 0, err
		}
		futures = append(futures, f)
	}
	for _, f := range futures[acked:] {
		if err := await(f); err != nil {
			return 0, err
		}
	}
	return rate(len(b.eps), time.Since(start)), nil
}

func list(ctx context.Context, r registry.Registry, f endpoint.Filter) (int, error) {
	eps, err := r.List(ctx, f)
	return len(eps), err
}

// kvListGet is the obvious KV lookup: list the keys, get each, decode it.
func kvListGet(ctx context.Context, kv jetstream.KeyValue) (int, error) {
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for k := range keys.Keys() {
		v, err := kv.Get(ctx, k)
		if err != nil {
			return 0, err
		}
		if _, err := endpoint.DecodeJSON(v.Value()); err != nil {
			return 0, err
		}
		n++
	}
	return n, nil
}

// kvWatch reads a KV watch's initial values, decoding each (as a lookup must) when
// decode is set.
func kvWatch(ctx context.Context, kv jetstream.KeyValue, keys string, decode bool) (int, error) {
	w, err := kv.Watch(ctx, keys)
	if err != nil {
		return 0, err
	}
	defer func() { _ = w.Stop() }()
	n := 0
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				return n, nil
			}
			if decode {
				if _, err := endpoint.DecodeJSON(e.Value()); err != nil {
					return 0, err
				}
			}
			n++
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

func watchInitial(ctx context.Context, r *registry.Front) (int, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := r.Watch(wctx, endpoint.Filter{})
	if err != nil {
		return 0, err
	}
	n := 0
	for ev := range ch {
		switch ev.Type {
		case registry.Synced:
			return n, nil
		case registry.Added:
			n++
		default:
			return 0, fmt.Errorf("initial state: unexpected %s", ev.Type)
		}
	}
	return 0, errors.New("watch ended before Synced")
}

// ccmLookup is CCM's own lookup of one service, the anchor of ours (internal/ccmref).
func (b *bench) ccmLookup(ctx context.Context, cfg sbjs.StreamConfig, service string) (int, error) {
	out, err := ccmref.Lookup(ctx, b.nc, cfg.Name, cfg.Prefix+".*.*."+service+".*.*", 1024)
	return len(out), err
}

func rate(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }
