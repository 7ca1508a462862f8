package node_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/dataplane/node"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
	"github.com/switchboard-mesh/switchboard/internal/fabric"
)

// TestAnycastDeliversOnce: two subscribers of a name in another group share the
// messages: every message reaches exactly one of them.
func TestAnycastDeliversOnce(t *testing.T) {
	f := startFabric(t, star, 2, "cloud", "a")
	subs := map[string]*sub{
		"cloud/n1": clientOf(t, f, "cloud/n1").subscribe("org/ns/svc"),
		"cloud/n2": clientOf(t, f, "cloud/n2").subscribe("org/ns/svc"),
	}
	pub := clientOf(t, f, "a/n1")
	ctx := deadline(t, 30*time.Second)
	waitAllReached(t, ctx, pub, subs, "org/ns/svc")
	const total = 40
	for i := range total {
		if _, err := pub.publish(ctx, "org/ns/svc", fmt.Sprint(i), false); err != nil {
			t.Fatal(err)
		}
	}
	got := collect(subs, time.Second)
	seen := map[string]int{}
	for _, ms := range got {
		for _, m := range ms {
			seen[m]++
		}
	}
	for i := range total {
		if seen[fmt.Sprint(i)] != 1 {
			t.Fatalf("message %d delivered %d times, want once (got %v)", i, seen[fmt.Sprint(i)], got)
		}
	}
}

// TestAnycastPrefersLocal: with a subscriber on the publishing node and another in a
// far group, every message stays local.
func TestAnycastPrefersLocal(t *testing.T) {
	f := startFabric(t, star, 1, "cloud", "a")
	far := clientOf(t, f, "cloud/n1").subscribe("org/ns/svc")
	pub := clientOf(t, f, "a/n1")
	ctx := deadline(t, 30*time.Second)
	waitReached(t, ctx, pub, far, "org/ns/svc")
	near := pub.subscribe("org/ns/svc")
	for i := range 10 {
		if _, err := pub.publish(ctx, "org/ns/svc", fmt.Sprint(i), false); err != nil {
			t.Fatal(err)
		}
		if _, err := near.next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if m := far.quiet(300 * time.Millisecond); m != nil {
		t.Fatalf("far subscriber got %q although one on the publishing node subscribes", m.GetPayload())
	}
}

// TestInstanceDelivery: a name with an id reaches that instance only; without an id,
// one of the instances.
func TestInstanceDelivery(t *testing.T) {
	f := startFabric(t, star, 1, "cloud", "a", "b")
	one := clientOf(t, f, "a/n1").subscribe("org/ns/svc/1")
	two := clientOf(t, f, "b/n1").subscribe("org/ns/svc/2")
	pub := clientOf(t, f, "cloud/n1")
	ctx := deadline(t, 30*time.Second)
	waitReached(t, ctx, pub, two, "org/ns/svc/2")
	waitReached(t, ctx, pub, one, "org/ns/svc/1")
	// Routes for the service name (without id) lead to both groups once both announced.
	waitAllReached(t, ctx, pub, map[string]*sub{"one": one, "two": two}, "org/ns/svc")
	for range 5 {
		if _, err := pub.publish(ctx, "org/ns/svc/2", "for two", false); err != nil {
			t.Fatal(err)
		}
	}
	if m := one.quiet(300 * time.Millisecond); m != nil {
		t.Fatalf("instance 1 got %q sent to instance 2", m.GetPayload())
	}
	// Without an id: one instance or the other, once.
	if _, err := pub.publish(ctx, "org/ns/svc", "any", false); err != nil {
		t.Fatal(err)
	}
	got := collect(map[string]*sub{"one": one, "two": two}, 500*time.Millisecond)
	anys := 0
	for _, ms := range got {
		for _, m := range ms {
			if m == "any" {
				anys++
			}
		}
	}
	if anys != 1 {
		t.Fatalf("a message to any instance arrived %d times: %v", anys, got)
	}
	// Publishing to an instance nobody is: refused.
	if _, err := pub.publish(ctx, "org/ns/svc/3", "nobody", false); status.Code(err) != codes.NotFound {
		t.Fatalf("publish to instance 3: %v, want NotFound", err)
	}
}

// TestBadInput: malformed names and oversized messages are refused naming what is
// wrong; a name nobody subscribes to is refused as NotFound and counted.
func TestBadInput(t *testing.T) {
	f := startFabricWith(t, fabric.Options{Node: func(c *node.Config) {
		c.MaxMessageBytes = 1000
		if c.NodeID == "n1" && c.Group == "a" {
			c.HealthListen = "127.0.0.1:0"
		}
	}}, 1, "a")
	c := clientOf(t, f, "a/n1")
	ctx := deadline(t, 10*time.Second)
	for _, tc := range []struct {
		name *nodev1.Name
		want string
	}{
		{nil, "name is missing"},
		{&nodev1.Name{Org: "org", Namespace: "", Service: "svc"}, "namespace is empty"},
		{&nodev1.Name{Org: "o/x", Namespace: "ns", Service: "svc"}, `org "o/x" has '/'`},
		{&nodev1.Name{Org: "org", Namespace: "ns", Service: strings.Repeat("s", 200)}, "service is 200 bytes"},
	} {
		_, err := c.Publish(ctx, &nodev1.PublishRequest{Name: tc.name, Payload: []byte("x")})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("publish to %v: %v, want InvalidArgument with %q", tc.name, err, tc.want)
		}
	}
	c.subscribe("org/ns/svc")
	_, err := c.publish(ctx, "org/ns/svc", strings.Repeat("x", 1001), false)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "payload is 1001 bytes; the limit is 1000 bytes") {
		t.Errorf("oversized publish: %v", err)
	}
	if _, err := c.publish(ctx, "org/ns/svc", strings.Repeat("x", 1000), false); err != nil {
		t.Errorf("publish at the limit: %v", err)
	}
	_, err = c.publish(ctx, "org/ns/nobody", "x", false)
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "org/ns/nobody") {
		t.Errorf("publish to a name nobody subscribes: %v, want NotFound naming it", err)
	}
	if got := metric(t, f.Node("a/n1").HealthAddr(), "switchboard_node_unroutable_total"); got != "1" {
		t.Errorf("unroutable_total = %q, want 1", got)
	}
}

// metric scrapes one unlabelled series from a node's /metrics.
func metric(t *testing.T, addr, series string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// TestUnsubscribeWithdraws: once the only subscriber leaves, the name's routes go and a
// publisher in another group is told nobody subscribes.
func TestUnsubscribeWithdraws(t *testing.T) {
	f := startFabric(t, star, 1, "cloud", "a")
	sc := clientOf(t, f, "cloud/n1")
	s := sc.subscribe("org/ns/svc")
	pub := clientOf(t, f, "a/n1")
	ctx := deadline(t, 30*time.Second)
	waitReached(t, ctx, pub, s, "org/ns/svc")
	if _, err := sc.Unsubscribe(ctx, &nodev1.UnsubscribeRequest{SubscriptionId: s.id}); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Unsubscribe(ctx, &nodev1.UnsubscribeRequest{SubscriptionId: s.id}); status.Code(err) != codes.NotFound {
		t.Fatalf("second unsubscribe: %v, want NotFound", err)
	}
	for {
		_, err := pub.publish(ctx, "org/ns/svc", "x", false)
		if status.Code(err) == codes.NotFound {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("routes never withdrawn: last publish %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
