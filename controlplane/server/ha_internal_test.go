package server

import (
	"net"
	"os"
	"testing"
)

// TestAdvertised: a wildcard listen host is advertised as what the machine's name
// resolves to; a concrete one as it is.
func TestAdvertised(t *testing.T) {
	if got := advertised("127.0.0.1:50052", "ignored"); got != "127.0.0.1:50052" {
		t.Errorf("concrete host advertised as %s", got)
	}
	host, _ := os.Hostname()
	got := advertised("0.0.0.0:50052", host)
	h, port, err := net.SplitHostPort(got)
	if err != nil || port != "50052" {
		t.Fatalf("advertised %q", got)
	}
	ips, err := net.LookupHost(host)
	if err != nil || !net.ParseIP(h).IsUnspecified() {
		return
	}
	for _, ip := range ips {
		if !net.ParseIP(ip).IsLoopback() {
			t.Fatalf("0.0.0.0 advertised as %s although %s resolves to %v", got, host, ips)
		}
	}
}
