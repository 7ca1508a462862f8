package client

import (
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registrar/token"
	"github.com/switchboard-mesh/switchboard/registry"
)

// A write accepted by replica A that A's stream had not yet shown: the cache's token
// does not count it, so a replica B without it has the token's digest and resumes
// the stream. The write must still be sent again, exactly as after a full snapshot
// in a new epoch; a write A's stream did show and B has is forgotten.
func TestResumeInANewEpochResendsLostWrites(t *testing.T) {
	e := func(addr string) endpoint.Endpoint {
		return endpoint.Endpoint{Cluster: "east", Service: "web", Protocol: "http", Address: addr, Port: 80, Priority: 1}
	}
	kept, lost := e("10.0.0.1"), e("10.0.0.2")
	c := newCache(time.Now)
	at := token.Version{Epoch: 1, Seq: 5, Digest: 7, HasDigest: true}
	c.replace(map[endpoint.Key]endpoint.Endpoint{}, at, token.Version{Epoch: 1}, 0)
	c.wrote([]registry.Op{registry.Register(kept)}, token.Version{Epoch: 1, Seq: 6})
	c.change(registry.Added, kept, token.Version{Epoch: 1, Seq: 6, Digest: 8, HasDigest: true}, token.Version{Epoch: 1})
	c.wrote([]registry.Op{registry.Register(lost)}, token.Version{Epoch: 1, Seq: 7})

	resend := c.resumed(token.Version{Epoch: 2, Seq: 1, Digest: 8, HasDigest: true}, token.Version{Epoch: 2}, 0)
	if len(resend) != 1 || resend[0].key != lost.Key() {
		t.Fatalf("resumed in a new epoch returns %v to re-send, want only %s", resend, lost.Key())
	}
	if _, ok := c.own[kept.Key()]; ok {
		t.Fatal("a write the new replica holds is still remembered")
	}
	if got, ok := c.visible(lost.Key()); !ok || !endpoint.Equal(got, lost) {
		t.Fatal("the lost write is no longer shown while it is re-sent")
	}
	if again := c.resumed(token.Version{Epoch: 2, Seq: 1, Digest: 8, HasDigest: true}, token.Version{Epoch: 2}, 0); len(again) != 0 {
		t.Fatalf("a resume in the same epoch returns %v to re-send", again)
	}
}
