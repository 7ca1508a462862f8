package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// ErrWriteOnly is returned by Publisher.List: the best-effort destination has nothing
// to read back.
var ErrWriteOnly = errors.New("the nats registry backend is write-only (fire-and-forget publish); read with the jetstream backend")

// Publisher is the best-effort `nats` destination's driver. Registrations are plain
// core-NATS publishes of the endpoint JSON to the entry's subject, with no headers: no
// TTL, no rollup, no expected stream, no ack. A stream capturing the subjects stores
// them (and its MaxAge then expires them); without one they reach only live
// subscribers. Unregistrations carry just the removal marker headers, the one thing a
// reader needs to tell them from an entry.
//
// Apply returns once the server has received the batch (a flush), which is all core
// NATS can confirm. List fails with ErrWriteOnly; it has no Watch, so the Front's
// fails with registry.ErrNoWatch.
type Publisher struct {
	nc      *nats.Conn
	ownConn bool
	subj    Subjects
}

var _ registry.Driver = (*Publisher)(nil)

// NewPublisher returns the nats backend over nc, which stays the caller's.
func NewPublisher(nc *nats.Conn, prefix string) (*registry.Front, error) {
	return registry.Wrap("nats")(newPublisher(nc, prefix))
}

func newPublisher(nc *nats.Conn, prefix string) (*Publisher, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	subj, err := NewSubjects(prefix)
	if err != nil {
		return nil, err
	}
	return &Publisher{nc: nc, subj: subj}, nil
}

// openPublisher opens the nats backend from its parameters; the Publisher owns the
// connection.
func openPublisher(cfg registry.Config) (*Publisher, error) {
	cfg = withDefaults(cfg, connParams())
	nc, err := Connect(cfg)
	if err != nil {
		return nil, err
	}
	p, err := newPublisher(nc, cfg.String(ParamPrefix))
	if err != nil {
		nc.Close()
		return nil, err
	}
	p.ownConn = true
	return p, nil
}

// Apply publishes the batch, then flushes. Core NATS cannot say which messages
// arrived, so a failure names every op of the batch.
func (p *Publisher) Apply(ctx context.Context, ops []registry.Op) error {
	err := p.publish(ctx, ops)
	if err == nil {
		return nil
	}
	keys := make([]endpoint.Key, len(ops))
	for i, op := range ops {
		keys[i] = op.Endpoint.Key()
	}
	return &registry.ApplyError{Failed: keys, Err: unavailable(err)}
}

func (p *Publisher) publish(ctx context.Context, ops []registry.Op) error {
	before := p.nc.LastError()
	for _, op := range ops {
		k := op.Endpoint.Key()
		m := &nats.Msg{Subject: p.subj.For(k)}
		if op.Kind == registry.OpUnregister {
			m.Header = nats.Header{}
			m.Header.Set(jetstream.MarkerReasonHeader, markerReasonRemove)
			m.Header.Set(OpHeader, OpUnregister)
			m.Data = appendJSON(nil, k.Endpoint())
		} else {
			// The jetstream backend's payload: region, zone and health as reserved
			// annotations, as CCM's readers and ours expect on these subjects.
			m.Data = appendJSON(nil, op.Endpoint)
		}
		if err := p.nc.PublishMsg(m); err != nil {
			return fmt.Errorf("publish %s: %w", m.Subject, err)
		}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	if err := p.nc.FlushWithContext(ctx); err != nil {
		return deniedSince(p.nc, before, fmt.Errorf("flush: %w", err))
	}
	// The server answers the flush after refusing any of the publishes before it.
	if refused := refusedSince(p.nc, before); refused != nil {
		return fmt.Errorf("publish: %w", refused)
	}
	return nil
}

// List fails: see ErrWriteOnly.
func (p *Publisher) List(context.Context, endpoint.Filter) ([]endpoint.Endpoint, error) {
	return nil, ErrWriteOnly
}

// Close closes the connection if the Publisher opened it.
func (p *Publisher) Close() error {
	if p.ownConn {
		p.nc.Close()
	}
	return nil
}
