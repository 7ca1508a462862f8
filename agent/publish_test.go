package agent

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/agent/check"
	"github.com/switchboard-mesh/switchboard/endpoint"
)

// benchLoop is a loop holding n entries of one HTTP check each, every check with
// a dozen results behind it (a third of them failing) fed in as the loop feeds
// them (observe).
func benchLoop(b *testing.B, n int) *loop {
	b.Helper()
	a := New(manifestOf(), Options{Publisher: NoopPublisher{}})
	l := &loop{Agent: a, byKey: map[endpoint.Key]*entry{}}
	fail := errors.New("status 503, want 2xx")
	for i := range n {
		e := newEntry(mentry(ep(fmt.Sprintf("svc%d", i), "10.0.0.1", 1000+i, 0),
			check.Spec{Kind: check.HTTP, Target: "http://127.0.0.1:1/healthz", Interval: time.Second}))
		l.entries = append(l.entries, e)
		l.byKey[e.m.Endpoint.Key()] = e
		for j := range 12 {
			var err error
			if j%3 == 0 {
				err = fail
			}
			l.observe(result{e: e, i: 0, err: err})
		}
	}
	return l
}

// BenchmarkPublishStatus is what the loop does after every check result at 5,000
// entries: publish every entry's status (Status, Ready, the page's version).
func BenchmarkPublishStatus(b *testing.B) {
	l := benchLoop(b, 5000)
	b.ReportAllocs()
	for b.Loop() {
		l.publishStatus()
	}
}

// BenchmarkResultStep is one whole step of the loop on a check result at 5,000
// entries, but the gate and the write: the result recorded, then every status
// published.
func BenchmarkResultStep(b *testing.B) {
	l := benchLoop(b, 5000)
	fail := errors.New("status 503, want 2xx")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		var err error
		if i%3 == 0 {
			err = fail
		}
		l.observe(result{e: l.entries[i%len(l.entries)], i: 0, err: err})
		l.publishStatus()
		i++
	}
}

// TestPublishedStatusesStayAsTheyWere: publishing writes over the arrays of earlier
// steps and a check's result replaces its published state, yet what Status
// returned is not changed by later steps.
func TestPublishedStatusesStayAsTheyWere(t *testing.T) {
	a := New(manifestOf(), Options{Publisher: NoopPublisher{}})
	l := &loop{Agent: a, byKey: map[endpoint.Key]*entry{}}
	for i := range 3 {
		e := newEntry(mentry(ep(fmt.Sprintf("svc%d", i), "10.0.0.1", 80, 0),
			check.Spec{Kind: check.HTTP, Target: "http://127.0.0.1:1/healthz", Interval: time.Second}))
		l.entries = append(l.entries, e)
		l.byKey[e.m.Endpoint.Key()] = e
	}
	l.observe(result{e: l.entries[0], i: 0})
	l.publishStatus()
	before := a.Status()

	l.observe(result{e: l.entries[0], i: 0, err: errors.New("status 503, want 2xx")})
	l.entries[1].reason = ReasonUnhealthy
	l.entries = l.entries[:2]
	for range 3 {
		l.publishStatus()
	}
	after := a.Status()

	if len(before) != 3 || before[1].Reason != "starting" || before[0].Checks[0].State.Results != 1 || !before[0].Checks[0].Healthy ||
		before[0].Checks[0].LastError != "" {
		t.Fatalf("the statuses returned before changed: %+v", before)
	}
	c := after[0].Checks[0]
	if len(after) != 2 || after[1].Reason != ReasonUnhealthy || c.State.Results != 2 || c.State.Failures != 1 ||
		c.LastError != "status 503, want 2xx" || c.State.Output != c.LastError {
		t.Fatalf("the statuses after: %+v", after)
	}
}
