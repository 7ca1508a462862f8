package jetstream

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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

// A consumer create that no server answers — the request lost with the server it
// went to, as when a stream's leader is stopped — fails within the feed's own bound,
// not at the caller's deadline: a watch re-opening its feed after a failover passes
// its whole life's context, and waited on one lost request until the end of it (seen
// in TestThreeNodeCluster under load: no event for 20 s after the leader stopped).
func TestOpenFeedUnanswered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A server without JetStream, where something swallows the API's requests.
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Subscribe(jetstream.DefaultAPIPrefix+"CONSUMER.CREATE.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	r := &driver{nc: nc, js: js, cfg: StreamConfig{Name: "S"}}
	start := time.Now()
	_, err = r.openFeed(ctx, []string{"sb.>"}, false)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("openFeed = %v after %s (context: %v); want its own timeout's error well before the caller's deadline", err, time.Since(start), ctx.Err())
	}
}
