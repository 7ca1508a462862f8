package jetstream

import (
	"context"

	"github.com/nats-io/nats.go"
)

// replies receives the answers to batched direct gets on an inbox of its own. nats.go's
// SubscribeSync gives every subscription a channel of Options.SubChanLen messages
// (64k: 512 KiB allocated and cleared), about a seventh of a 2 ms one-service lookup;
// a batch is answered with at most its batch size of messages and one status, and the
// readers ask for the next batch only once one is read through, so a channel of that
// size never fills.
type replies struct {
	inbox string
	sub   *nats.Subscription
	ch    chan *nats.Msg
}

// subscribeReplies subscribes a new inbox for the answers to batches of up to batch
// messages.
func (r *driver) subscribeReplies(batch int) (*replies, error) {
	p := &replies{inbox: r.nc.NewRespInbox(), ch: make(chan *nats.Msg, batch+2)}
	var err error
	if p.sub, err = r.nc.ChanSubscribe(p.inbox, p.ch); err != nil {
		return nil, err
	}
	return p, nil
}

// next returns the next answer, or nats.ErrNoResponders for the status saying that
// no server answers (as a subscription's NextMsg does).
func (p *replies) next(ctx context.Context) (*nats.Msg, error) {
	select {
	case m := <-p.ch:
		if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
			return nil, nats.ErrNoResponders
		}
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *replies) close() { _ = p.sub.Unsubscribe() }
