package jetstream

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// benchMessages is what a full lookup of the benchmark's 10,000 entries receives: each
// payload in its own buffer, with the rollup header every registration carries.
func benchMessages(tb testing.TB, subj Subjects, n int) []rawMsg {
	tb.Helper()
	msgs := make([]rawMsg, n)
	for i := range msgs {
		e := endpoint.Endpoint{
			Cluster: "prod", Service: fmt.Sprintf("svc%03d", i%100), Protocol: "http",
			Address: fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff), Port: 8080,
			Node: fmt.Sprintf("node-%d", i%500), Priority: 1, Weight: 10,
			Annotations: map[string]string{"pad": strings.Repeat("x", 40)},
		}
		h := nats.Header{jetstream.MsgRollup: {jetstream.MsgRollupSubject}}
		msgs[i] = rawMsg{subject: subj.For(e.Key()), seq: uint64(i + 1), h: h, data: appendJSON(nil, e)}
	}
	return msgs
}

// BenchmarkCollect10k is a full lookup's client-side work without the server:
// decoding, checking, detaching and sorting 10,000 messages in chunks as the feed
// hands them over. first: a driver's first List (every payload decoded, nothing
// cached); cold: a later List with the cache emptied (every payload decoded and
// cached); repeated: from the payload cache.
func BenchmarkCollect10k(b *testing.B) {
	subj, _ := NewSubjects("sb")
	msgs := benchMessages(b, subj, 10000)
	for _, name := range []string{"first", "cold", "repeated"} {
		b.Run(name, func(b *testing.B) {
			r := &driver{subj: subj}
			r.listed.Store(name != "first")
			var ru0, ru1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			for b.Loop() {
				switch name {
				case "first":
					r.listed.Store(false)
				case "cold":
					r.cache.m = nil
				}
				c := newCollector(r, nil)
				c.expect(uint64(len(msgs)))
				for _, m := range msgs {
					c.add(m.subject, m.seq, m.h, m.data)
				}
				if got := c.finish(); len(got) != len(msgs) {
					b.Fatalf("collected %d entries, want %d", len(got), len(msgs))
				}
			}
			// CPU moves less than wall time with the load of a shared machine.
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// TestCollectorSortsAndKeepsLatest: whatever order and chunking the messages come in,
// and whatever count the read expected, the collector returns what sorting all entries and keeping each key's latest would.
func TestCollectorSortsAndKeepsLatest(t *testing.T) {
	subj, _ := NewSubjects("sb")
	addrs := []string{"10.0.0.1", "10.0.0.10", "10.0.0.2", "::1", "2001:db8::1", "192.168.1.1", "::ffff:10.0.0.1"}
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 20 {
		n := 1 + rng.IntN(3*collectChunk)
		var msgs []rawMsg
		latest := map[endpoint.Key]endpoint.Endpoint{}
		latestSeq := map[endpoint.Key]uint64{}
		for i := range n {
			e := endpoint.Endpoint{Cluster: "prod", Service: fmt.Sprintf("s%d", rng.IntN(3)), Protocol: "http",
				Address: addrs[rng.IntN(len(addrs))], Port: 1 + rng.IntN(3), Priority: 1 + rng.IntN(9)}
			seq := uint64(i + 1)
			subject := subj.For(e.Key())
			if rng.IntN(5) == 0 { // the same key on a second subject (another id token)
				subject = subject[:strings.LastIndexByte(subject, '.')+1] + "other"
			}
			msgs = append(msgs, rawMsg{subject: subject, seq: seq, data: appendJSON(nil, e)})
			if seq > latestSeq[e.Key()] {
				latest[e.Key()], latestSeq[e.Key()] = e, seq
			}
		}
		rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
		var want []endpoint.Endpoint
		for _, e := range latest {
			want = append(want, e)
		}
		endpoint.Sort(want)

		c := newCollector(&driver{subj: subj}, nil)
		// The count a consumer gives (expect) may be right, short or long, or absent.
		switch round % 4 {
		case 1:
			c.expect(uint64(n))
		case 2:
			c.expect(uint64(n / 2))
		case 3:
			c.expect(uint64(n + 10))
		}
		for _, m := range msgs {
			c.add(m.subject, m.seq, m.h, m.data)
		}
		got := c.finish()
		if len(got) != len(want) {
			t.Fatalf("round %d: %d entries, want %d", round, len(got), len(want))
		}
		for i := range want {
			if !endpoint.Equal(got[i], want[i]) {
				t.Fatalf("round %d: entry %d = %+v, want %+v", round, i, got[i], want[i])
			}
		}
	}
}
