package dataplane

import (
	"context"
	"errors"
	"fmt"
	"time"

	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
)

// setSubscription: section 3. The status is filled now on a local error, or later by
// the datapath's ack or the ack timer.
func (c *Controller) setSubscription(ctx context.Context, v *linkView, pc *pendingCmd, sub *controllerv1.Subscription) {
	st := &controllerv1.SubscriptionStatus{Subscription: sub}
	pc.ack.SubscriptionsStatus = append(pc.ack.SubscriptionsStatus, st)
	name, err := nameOf(sub)
	if err == nil && sub.GetLinkId() == "" {
		err = errors.New("subscription has no link_id")
	}
	if err != nil {
		st.Error = err.Error()
		return
	}
	id, ok := v.byLink[sub.GetLinkId()]
	if !ok {
		st.Error = StatusConnectionNotFound
		return
	}
	c.subscribe(ctx, pc, st, id, name)
}

// subscribe registers the waiter in the message-id map before calling the datapath,
// because the datapath may ack synchronously, then arms the ack timer.
func (c *Controller) subscribe(ctx context.Context, pc *pendingCmd, st *controllerv1.SubscriptionStatus, id ConnID, name Name) {
	p := &pendingSub{cmd: pc, status: st, key: subKey{name, id}}
	c.mu.Lock()
	c.state.nextAck++
	ackID := c.state.nextAck
	c.state.pending[ackID] = p
	pc.outstanding++
	c.mu.Unlock()

	subID, err := c.dp.Subscribe(ctx, id, name, func(err error) { c.resolveAck(ackID, err) })
	if err != nil {
		c.resolveAck(ackID, err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p.sub, p.hasSub = subID, true
	if p.resolved {
		if p.err == nil {
			c.state.subs[p.key] = subID
		}
		return
	}
	c.state.subs[p.key] = subID
	p.timer = time.AfterFunc(c.cfg.AckTimeout, func() {
		c.resolveAck(ackID, fmt.Errorf("%w after %s", errAckTimeout, c.cfg.AckTimeout))
	})
}

// resolveAck records the outcome of one subscription; the first outcome wins and
// anything for an entry already drained (old session) is dropped.
func (c *Controller) resolveAck(ackID uint64, err error) {
	c.mu.Lock()
	p, ok := c.state.pending[ackID]
	if !ok {
		c.mu.Unlock()
		return
	}
	delete(c.state.pending, ackID)
	p.resolved, p.err = true, err
	if p.timer != nil {
		p.timer.Stop()
	}
	if err != nil {
		p.status.Error = err.Error()
		if errors.Is(err, ErrConnNotFound) {
			p.status.Error = StatusConnectionNotFound
		}
		// A rejected subscribe is not installed; a timed-out one may still be.
		if p.hasSub && !errors.Is(err, errAckTimeout) && c.state.subs[p.key] == p.sub {
			delete(c.state.subs, p.key)
		}
	} else {
		p.status.Success = true
	}
	p.cmd.outstanding--
	done := c.completeLocked(p.cmd)
	c.mu.Unlock()
	if done {
		c.sendAck(p.cmd)
	}
}

// completeLocked reports, once, that pc's ack can go out.
func (c *Controller) completeLocked(pc *pendingCmd) bool {
	if pc.sent || !pc.sectionsOK || pc.outstanding > 0 {
		return false
	}
	pc.sent = true
	return true
}

func (c *Controller) sendAck(pc *pendingCmd) {
	c.sendOrLog(pc.sess, &controllerv1.ControlMessage{
		MessageId: c.newMsgID(),
		ReplyTo:   pc.msgID,
		Payload:   &controllerv1.ControlMessage_ConfigCommandAck{ConfigCommandAck: pc.ack},
	})
}
