package dataplane

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
)

// What a standby control-plane replica answers a stream with: Unavailable, carrying
// an ErrorInfo of this reason whose metadata names the leader's southbound address.
const (
	NotLeaderReason = "NOT_LEADER"
	LeaderHintKey   = "leader_southbound"
)

// targets are the control-plane replicas a controller dials, one connection each,
// made when first used. Only the leader accepts a node; a session that a standby
// refused goes to the leader it names, any other failure to the next address.
type targets struct {
	addrs []string
	dial  func(addr string) (*grpc.ClientConn, error)

	mu    sync.Mutex
	cur   string
	conns map[string]*grpc.ClientConn
	// hinted: the current address is a standby's hint, followed at once.
	hinted bool
	// standbyAt is when a replica last answered as a standby.
	standbyAt time.Time
}

// While a replica answered as a standby within standbyWindow, the control plane is
// up and electing a leader (a lease runs out, typically within 10 s): sessions are
// retried at least every standbyRetry instead of backing off to Backoff.Max, so the
// fleet is back soon after the election rather than up to Backoff.Max later.
const (
	standbyWindow = time.Minute
	standbyRetry  = time.Second
)

// afterSession picks the address for the next session and returns the wait before
// it, from the backoff's wait and how the last session ended. A standby's hint is
// followed at once, but only once in a row: a hint that leads nowhere (a leader that
// just died) waits like any failure.
func (t *targets) afterSession(err error, wait time.Duration, now time.Time) time.Duration {
	if IsNotLeader(err) {
		t.mu.Lock()
		t.standbyAt = now
		t.mu.Unlock()
	}
	followed := t.after(err)
	t.mu.Lock()
	defer t.mu.Unlock()
	if followed && !t.hinted {
		t.hinted = true
		return 0
	}
	t.hinted = false
	if !t.standbyAt.IsZero() && now.Sub(t.standbyAt) < standbyWindow {
		return min(wait, standbyRetry)
	}
	return wait
}

func newTargets(addrs []string, dial func(string) (*grpc.ClientConn, error)) *targets {
	return &targets{addrs: addrs, dial: dial, cur: addrs[0], conns: map[string]*grpc.ClientConn{}}
}

// client returns the client of the current address.
func (t *targets) client() (controllerv1.ControllerServiceClient, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cc, ok := t.conns[t.cur]
	if !ok {
		var err error
		if cc, err = t.dial(t.cur); err != nil {
			return nil, fmt.Errorf("dataplane: dial %q: %w", t.cur, err)
		}
		t.conns[t.cur] = cc
	}
	return controllerv1.NewControllerServiceClient(cc), nil
}

// after picks the address for the next session from how the last one ended, and
// reports whether it follows a standby's hint (worth trying at once).
func (t *targets) after(err error) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if hint := LeaderHint(err); hint != "" && hint != t.cur {
		t.cur = hint
		return true
	}
	if len(t.addrs) > 1 {
		i := slices.Index(t.addrs, t.cur) // -1 for a hinted address: start over
		t.cur = t.addrs[(i+1)%len(t.addrs)]
	}
	return false
}

func (t *targets) current() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cur
}

func (t *targets) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, cc := range t.conns {
		_ = cc.Close()
	}
	clear(t.conns)
}

// LeaderHint returns the leader's southbound address a standby named in err, or "".
func LeaderHint(err error) string {
	if info := notLeaderInfo(err); info != nil {
		return info.Metadata[LeaderHintKey]
	}
	return ""
}

// IsNotLeader reports whether err is a standby's answer (with a hint or, while no
// leader is elected, without one).
func IsNotLeader(err error) bool { return notLeaderInfo(err) != nil }

func notLeaderInfo(err error) *errdetails.ErrorInfo {
	var se interface{ GRPCStatus() *status.Status }
	if err == nil || !errors.As(err, &se) {
		return nil
	}
	st := se.GRPCStatus()
	if st.Code() != codes.Unavailable {
		return nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Reason == NotLeaderReason {
			return info
		}
	}
	return nil
}
