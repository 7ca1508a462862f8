package dns_test

import (
	"testing"

	"github.com/switchboard-mesh/switchboard/agent/dns"
)

// TestStatsCountsAnsweredQueries: Stats names the server's address and domain and
// counts every query it answered.
func TestStatsCountsAnsweredQueries(t *testing.T) {
	s := startServer(t, dns.Options{}, ep("prod", "web", "http", "10.0.0.1", 80, 1, 0))
	before := s.Stats()
	if before.Addr != s.Addr() || before.Domain != dns.DefaultDomain || before.Queries != 0 {
		t.Fatalf("stats before any query: %+v", before)
	}
	if _, err := resolver(s).LookupHost(lookupCtx(t), "web.prod.switchboard"); err != nil {
		t.Fatal(err)
	}
	// Go's resolver asks for A and AAAA.
	if got := s.Stats().Queries; got < 2 {
		t.Fatalf("answered %d queries, want at least 2", got)
	}
}
