package jetstream

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-mesh/switchboard/internal/embednats"
)

// A page of batched direct get by sequence ends with an end-of-batch status whose
// counts say where the next page starts. One that does not say (or says a sequence
// the read has already passed) fails the read, naming it: taken as sequence 0, it made
// --lookup direct ask for the same page again and again until its deadline.
func TestReadDirectBadEndOfBatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := embednats.Start(ctx, embednats.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, c := range []struct {
		name string
		eob  nats.Header
		want string
	}{
		{"no last sequence", nats.Header{"Status": {"204"}, "Nats-Num-Pending": {"5"}}, "end of batch"},
		{"last sequence behind the request", nats.Header{"Status": {"204"}, "Nats-Num-Pending": {"5"}, "Nats-Last-Sequence": {"0"}}, "end of batch"},
	} {
		t.Run(c.name, func(t *testing.T) {
			stream := "FAKE" + strings.ReplaceAll(c.name, " ", "")
			// A responder in place of a stream: one message, then the end of batch.
			sub, err := nc.Subscribe(jetstream.DefaultAPIPrefix+"DIRECT.GET."+stream, func(m *nats.Msg) {
				_ = nc.PublishMsg(&nats.Msg{Subject: m.Reply, Data: []byte("{}"), Header: nats.Header{
					jetstream.SubjectHeader: {"sb.c.s.p.a.1"}, jetstream.SequenceHeader: {"1"}}})
				_ = nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: c.eob})
			})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = sub.Unsubscribe() }()
			r := &driver{nc: nc, cfg: StreamConfig{Name: stream}}
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			defer rcancel()
			visits := 0
			err = r.readDirect(rctx, ">", func(string, uint64, nats.Header, []byte) { visits++ })
			if err == nil || !strings.Contains(err.Error(), c.want) || visits != 1 {
				t.Fatalf("readDirect = %v after %d messages; want an error naming the %s after 1", err, visits, c.want)
			}
		})
	}
}
