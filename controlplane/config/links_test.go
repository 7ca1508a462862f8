package config

import (
	"strings"
	"testing"
	"time"
)

func TestLinksSection(t *testing.T) {
	c, err := Parse([]byte("links:\n  spire_socket_path: /run/spire.sock\n  backoff_initial: 1s\n  backoff_max: 30s\n  keepalive_interval: 20s\n  keepalive_timeout: 5s\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := LinkSettings{SpireSocketPath: "/run/spire.sock", BackoffInitial: time.Second, BackoffMax: 30 * time.Second,
		KeepaliveInterval: 20 * time.Second, KeepaliveTimeout: 5 * time.Second}
	if c.Links != want {
		t.Fatalf("links = %+v, want %+v", c.Links, want)
	}
	for in, msg := range map[string]string{
		"links:\n  backoff_initial: 10s\n  backoff_max: 1s\n": "links.backoff_max: 1s is shorter than backoff_initial 10s",
		"links:\n  keepalive: 5s\n":                           "links.keepalive: unknown key",
		"links:\n  backoff_max: soon\n":                       "links.backoff_max",
	} {
		if _, err := Parse([]byte(in)); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", in, err, msg)
		}
	}
}
