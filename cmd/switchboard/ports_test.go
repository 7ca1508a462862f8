package main

import (
	"strings"
	"testing"
)

// TestHTTPPortsDefaultToLoopback: every HTTP port that serves metrics, health or the
// status page (read-only, and unauthenticated) listens on 127.0.0.1 unless told
// otherwise, as docs/security.md's table of ports promises.
func TestHTTPPortsDefaultToLoopback(t *testing.T) {
	for _, c := range []struct {
		args []string
		flag string
		def  string
	}{
		{[]string{"agent", "--help"}, "--metrics-listen", "127.0.0.1:9102"},
		{[]string{"registrar", "--help"}, "--health-listen", "127.0.0.1:8081"},
		{[]string{"controlplane", "--help"}, "--metrics-listen", "127.0.0.1:50053"},
		{[]string{"kube-sync", "--help"}, "--metrics-listen", "127.0.0.1:9106"},
		{[]string{"dev", "--help"}, "--registrar-health-listen", "127.0.0.1:8081"},
		{[]string{"dev", "--help"}, "--controlplane-metrics-listen", "127.0.0.1:50053"},
		{[]string{"dev", "--help"}, "--nats-listen", "127.0.0.1:4222"},
	} {
		out, errOut, code := run(t, c.args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, errOut)
		}
		line := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, c.flag+" ") {
				line = l
			}
		}
		if !strings.Contains(line, `(default "`+c.def+`")`) {
			t.Errorf("%v: %s help %q, want the default %s", c.args, c.flag, line, c.def)
		}
	}
}
