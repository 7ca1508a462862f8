package jetstream

import (
	"strings"
	"testing"
)

// An error about a URL with credentials never shows the password.
func TestRedactURLs(t *testing.T) {
	got := redactURLs("nats://sb-writer:s3cr3t@127.0.0.1:4222, nats://127.0.0.1:4223,tls://u:p2@h:1")
	if strings.Contains(got, "s3cr3t") || strings.Contains(got, "p2") || !strings.Contains(got, "sb-writer") || !strings.Contains(got, "127.0.0.1:4223") {
		t.Fatalf("redactURLs = %q", got)
	}
}
