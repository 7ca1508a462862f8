package memdp

import "time"

// FailConnect makes connects to endpoint ("" for any) fail with err; nil clears.
func (d *Datapath) FailConnect(endpoint string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err == nil {
		delete(d.failConnect, endpoint)
		return
	}
	d.failConnect[endpoint] = err
}

// FailSubscribe makes Subscribe fail synchronously with err; nil clears.
func (d *Datapath) FailSubscribe(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failSubscribe = err
}

// RejectAcks makes subscription acks report err (the subscription is not
// installed); nil restores successful acks.
func (d *Datapath) RejectAcks(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ackErr = err
}

// DelayAcks delivers each ack after delay; 0 restores synchronous acks.
func (d *Datapath) DelayAcks(delay time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ackDelay = delay
}

// HoldAcks keeps acks back until ReleaseAcks (or forever: a lost ack).
func (d *Datapath) HoldAcks(hold bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.holdAcks = hold
}

// ReleaseAcks delivers every held ack, in order, and returns how many there were.
func (d *Datapath) ReleaseAcks() int {
	d.mu.Lock()
	held := d.held
	d.held = nil
	d.mu.Unlock()
	for _, ack := range held {
		ack()
	}
	return len(held)
}
