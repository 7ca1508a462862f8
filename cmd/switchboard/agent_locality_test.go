package main

import (
	"context"
	"net"
	"testing"
	"time"
)

// TestAgentDNSPrefersItsZone: --region and --zone reach the agent's DNS server, whose
// SRV answers put the endpoint in the agent's zone first; the entry without a zone of
// its own takes the node's.
func TestAgentDNSPrefersItsZone(t *testing.T) {
	const m = `entries:
  - {cluster: prod, service: api, protocol: http, address: 10.0.0.1, port: 80}
  - {cluster: prod, service: api, protocol: http, address: 10.0.0.2, port: 80, zone: eu-b}
`
	dnsAddr := freeAddr(t)
	logs, stop := startAgent(t, "--manifest", writeFile(t, t.TempDir(), "m.yaml", m), "--registry-backend", "memory",
		"--debounce", "20ms", "--region", "eu", "--zone", "eu-a",
		"--dns-listen", dnsAddr, "--dns-domain", "sb.test", "--dns-ttl", "1s")
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, dnsAddr)
	}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, srvs, err := r.LookupSRV(ctx, "", "", "_api._http.prod.sb.test.")
		cancel()
		prio := map[string]uint16{}
		for _, s := range srvs {
			ips, _ := r.LookupHost(context.Background(), s.Target)
			for _, ip := range ips {
				prio[ip] = s.Priority
			}
		}
		if err == nil && len(prio) == 2 && prio["10.0.0.1"] < prio["10.0.0.2"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SRV priorities %v, %v; want 10.0.0.1 (the agent's zone) before 10.0.0.2\n%s", prio, err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatalf("agent exited with %v", err)
	}
}
