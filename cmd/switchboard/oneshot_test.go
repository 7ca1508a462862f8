package main

import (
	"net"
	"strings"
	"testing"
	"time"
)

// TestOneShotWriteToAbsentRegistrar: a register or unregister through a registrar
// that is not running fails at once, with one line that names the address, and opens
// no watch (no "reconnecting" lines); --timeout bounds a call that hangs.
func TestOneShotWriteToAbsentRegistrar(t *testing.T) {
	binary(t) // built before the clock starts
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing listens there now
	entry := []string{"--cluster", "prod", "--service", "web", "--protocol", "http", "--address", "10.0.0.2", "--port", "8080",
		"--registry-backend", "registrar", "--registrar-address", addr}
	for _, verb := range []string{"register", "unregister"} {
		start := time.Now()
		r := runBinary(t, "", nil, append([]string{"registry", verb}, entry...)...)
		took := time.Since(start)
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if r.code != 1 || len(lines) != 1 || !strings.Contains(lines[0], addr) {
			t.Errorf("%s against %s (nothing there): exit %d, stderr:\n%s\nwant exit 1 and one line naming the address", verb, addr, r.code, r.stderr)
		}
		if took > 5*time.Second {
			t.Errorf("%s against an absent registrar took %s; it should fail at once", verb, took)
		}
	}
	// A registrar that accepts connections and never answers: --timeout ends the wait.
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hang.Close()
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	hangEntry := append([]string{"registry", "register", "--timeout", "1s"}, entry...)
	hangEntry[len(hangEntry)-1] = hang.Addr().String()
	start := time.Now()
	r := runBinary(t, "", nil, hangEntry...)
	if r.code == 0 || time.Since(start) > 8*time.Second || !strings.Contains(r.stderr, hang.Addr().String()) {
		t.Errorf("register --timeout 1s against a silent registrar: exit %d after %s, stderr:\n%s", r.code, time.Since(start), r.stderr)
	}
}
