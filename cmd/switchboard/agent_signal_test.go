package main

import (
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
)

// TestAgentCountsSignalsFromTheStart: the agent counts SIGTERMs (for the second
// one, which cuts the grace period short) from the top of its start, before tracing,
// the registry's dial and the discovery servers: a first SIGTERM during any of them
// counts. Here the discovery servers fail to start; the counter must already be
// registered by then.
func TestAgentCountsSignalsFromTheStart(t *testing.T) {
	var counting atomic.Bool
	prev := notifyStop
	notifyStop = func(chan<- os.Signal) { counting.Store(true) }
	t.Cleanup(func() { notifyStop = prev })

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	m := writeFile(t, t.TempDir(), "m.yaml", "entries: []\n")
	_, errOut, code := run(t, "agent", "--manifest", m, "--registry-backend", "memory", "--metrics-listen", "",
		"--xds-listen", busy.Addr().String())
	if code == 0 || !strings.Contains(errOut, "--xds-listen") {
		t.Fatalf("exit %d, stderr %q; want the busy --xds-listen reported", code, errOut)
	}
	if !counting.Load() {
		t.Error("the discovery servers started before the agent counted signals: a SIGTERM then would not count")
	}
}
