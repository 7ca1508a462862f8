package cnitest

import (
	"context"
	"slices"
	"testing"
	"time"
)

// The harness's chain gives a namespace a real address, and DEL takes it back.
func TestBridgeChain(t *testing.T) {
	Require(t)
	for _, v := range []string{"1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) { testBridgeChain(t, v) })
	}
}

func testBridgeChain(t *testing.T, version string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := NewChain(t, version)
	p := NewPod(t, "default", "web-0", "uid-1")
	ips, _, err := c.Add(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(ips) != 1 || !c.Subnet.Contains(ips[0]) {
		t.Fatalf("ADD gave %v, want one address of %s", ips, c.Subnet)
	}
	if got := Addresses(t, p); !slices.Contains(got, ips[0].String()) {
		t.Fatalf("eth0 in the namespace has %v, want %s", got, ips[0])
	}
	if err := c.Check(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := c.Del(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := c.Del(ctx, p); err != nil {
		t.Fatalf("second DEL: %v", err)
	}
	if version == "1.1.0" {
		if err := c.Status(ctx); err != nil {
			t.Fatalf("STATUS: %v", err)
		}
		if err := c.GC(ctx); err != nil {
			t.Fatalf("GC: %v", err)
		}
	}
}
