package jetstream

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// TestAckMeta reads the reply subjects servers put on deliveries, both forms, and
// refuses what is not one.
func TestAckMeta(t *testing.T) {
	for _, c := range []struct {
		reply               string
		cseq, sseq, pending uint64
		tm                  int64
		ok                  bool
	}{
		{reply: "$JS.ACK.S.C.1.42.7.1700000000000000000.9", cseq: 7, sseq: 42, pending: 9, tm: 1700000000000000000, ok: true},
		{reply: "$JS.ACK.S.C.1.42.7.soon.9", cseq: 7, sseq: 42, pending: 9, ok: true}, // a time that is not one: unknown
		{reply: "$JS.ACK._.ACCHASH.S.C.1.42.7.1700000000000000000.0.RANDOM", cseq: 7, sseq: 42, tm: 1700000000000000000, ok: true},
		{reply: "$JS.ACK.hub.ACCHASH.S.C.1.42.7.1700000000000000000.3", cseq: 7, sseq: 42, pending: 3, tm: 1700000000000000000, ok: true},
		{reply: "$JS.ACK.hub.ACCHASH.S.C.1.42.7.1700000000000000000.3.R.MORE", cseq: 7, sseq: 42, pending: 3, tm: 1700000000000000000, ok: true},
		{reply: "$JS.ACK.S.C.1.42.7.1700000000000000000"},     // 8 tokens
		{reply: "$JS.ACK.D.H.S.C.1.42.7.1700000000000000000"}, // 10 tokens
		{reply: "$JS.ACK.S.C.1.42.x.1700000000000000000.9"},   // not a number
		{reply: "$JS.ACK.S.C.1..7.1700000000000000000.9"},     // empty
		{reply: "$JS.NAK.S.C.1.42.7.1700000000000000000.9"},   // not an ack subject
		{reply: "_INBOX.abc"},
		{reply: ""},
	} {
		cseq, sseq, pending, tm, ok := ackMeta(c.reply)
		if ok != c.ok || cseq != c.cseq || sseq != c.sseq || pending != c.pending || tm != c.tm {
			t.Errorf("ackMeta(%q) = %d, %d, %d, %d, %v; want %d, %d, %d, %d, %v", c.reply, cseq, sseq, pending, tm, ok, c.cseq, c.sseq, c.pending, c.tm, c.ok)
		}
	}
}

// FuzzAckMeta holds ackMeta to nats.go's reading of the same subject: whatever it
// accepts, nats.go reads the same numbers from.
func FuzzAckMeta(f *testing.F) {
	f.Add("$JS.ACK.S.C.1.42.7.1700000000000000000.9")
	f.Add("$JS.ACK._.ACCHASH.S.C.1.42.7.1700000000000000000.0.RANDOM")
	f.Add("$JS.ACK.hub.ACCHASH.S.C.1.42.7.1700000000000000000.3")
	f.Fuzz(func(t *testing.T, reply string) {
		cseq, sseq, pending, tm, ok := ackMeta(reply)
		if !ok {
			return
		}
		m := &nats.Msg{Reply: reply, Sub: &nats.Subscription{}}
		meta, err := m.Metadata()
		if err != nil {
			t.Fatalf("ackMeta(%q) accepted what nats.go refuses: %v", reply, err)
		}
		if tm != 0 && meta.Timestamp.UnixNano() != tm {
			t.Fatalf("ackMeta(%q) reads the time %d; nats.go reads %d", reply, tm, meta.Timestamp.UnixNano())
		}
		if meta.Sequence.Consumer != cseq || meta.Sequence.Stream != sseq || meta.NumPending != pending {
			t.Fatalf("ackMeta(%q) = %d, %d, %d; nats.go reads %d, %d, %d", reply, cseq, sseq, pending,
				meta.Sequence.Consumer, meta.Sequence.Stream, meta.NumPending)
		}
	})
}
