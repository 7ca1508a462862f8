package dataplane

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func notLeader(t *testing.T, code codes.Code, hint string) error {
	t.Helper()
	st, err := status.New(code, "standby").WithDetails(&errdetails.ErrorInfo{Reason: NotLeaderReason, Metadata: map[string]string{LeaderHintKey: hint}})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Errorf("session: %w", st.Err())
}

// TestTargetsFollowHintElseRotate: a standby's hint is followed (even to an address
// not listed); any other failure moves to the next listed address, and from a hinted
// address back to the first.
func TestTargetsFollowHintElseRotate(t *testing.T) {
	tg := newTargets([]string{"a:1", "b:1", "c:1"}, func(string) (*grpc.ClientConn, error) { return nil, nil })
	steps := []struct {
		err        error
		want       string
		wantHinted bool
	}{
		{errors.New("refused"), "b:1", false},
		{notLeader(t, codes.Unavailable, "c:1"), "c:1", true},
		{notLeader(t, codes.Unavailable, "c:1"), "a:1", false}, // a hint to itself: rotate
		{notLeader(t, codes.Unavailable, "d:9"), "d:9", true},
		{status.Error(codes.Unavailable, "connection refused"), "a:1", false},
		{notLeader(t, codes.FailedPrecondition, "c:1"), "b:1", false}, // only Unavailable carries a hint
	}
	for i, s := range steps {
		hinted := tg.after(s.err)
		if got := tg.current(); got != s.want || hinted != s.wantHinted {
			t.Fatalf("step %d (%v): now %s hinted %v, want %s hinted %v", i, s.err, got, hinted, s.want, s.wantHinted)
		}
	}
}

func TestConfigTargetsChecked(t *testing.T) {
	for _, c := range []Config{
		{NodeID: "n", Datapath: nopDatapath{}},
		{NodeID: "n", Datapath: nopDatapath{}, Targets: []string{"a:1", ""}},
	} {
		if err := c.validate(); err == nil {
			t.Errorf("validate(%+v) accepted", c)
		}
	}
}

type nopDatapath struct{ Datapath }

// TestAfterSessionWaits: a standby's hint is tried at once, but not twice in a row;
// while a standby answered within the window, waits are capped at standbyRetry (the
// control plane is electing, not down); after it, the backoff's wait stands.
func TestAfterSessionWaits(t *testing.T) {
	tg := newTargets([]string{"a:1", "b:1"}, func(string) (*grpc.ClientConn, error) { return nil, nil })
	t0 := time.Unix(1000, 0)
	long := 20 * time.Second
	steps := []struct {
		err  error
		at   time.Time
		want time.Duration
	}{
		{errors.New("refused"), t0, long},                                            // no standby seen yet
		{notLeader(t, codes.Unavailable, "c:1"), t0, 0},                              // hint followed at once
		{errors.New("refused"), t0.Add(time.Second), standbyRetry},                   // the hint led nowhere
		{notLeader(t, codes.Unavailable, "c:1"), t0.Add(2 * time.Second), 0},         // a hint again, after a failure
		{notLeader(t, codes.Unavailable, ""), t0.Add(3 * time.Second), standbyRetry}, // electing, no hint
		{errors.New("refused"), t0.Add(3*time.Second + standbyWindow), long},         // long after the standby
	}
	for i, s := range steps {
		if got := tg.afterSession(s.err, long, s.at); got != s.want {
			t.Fatalf("step %d (%v): wait %s, want %s", i, s.err, got, s.want)
		}
	}
}
