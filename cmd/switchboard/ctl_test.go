package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/e2e"
	"github.com/switchboard-mesh/switchboard/dataplane"
	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil"
)

// startControlPlane runs `switchboard controlplane --config` in the background with
// the given config body (loopback ports added) and returns the northbound and
// southbound addresses and a stop function.
func startControlPlane(t *testing.T, body string) (nb, sb string, stop func() error) {
	return startControlPlaneWith(t, "", body)
}

// startControlPlaneWithNorthbound adds nbExtra (indented YAML) to the northbound section.
func startControlPlaneWithNorthbound(t *testing.T, nbExtra string) (nb, sb string, stop func() error) {
	return startControlPlaneWith(t, nbExtra, "database:\n  type: in_memory\n")
}

func startControlPlaneWith(t *testing.T, nbExtra, body string) (nb, sb string, stop func() error) {
	t.Helper()
	cfg := "northbound:\n  endpoint: 127.0.0.1:0\n" + nbExtra + "southbound:\n  endpoint: 127.0.0.1:0\n" +
		"reconciler:\n  base_retry_delay: 10ms\n" + body
	out, stop := runCPCommand(t, cfg, "127.0.0.1:0")
	nb = fieldAfter(waitFor(t, out, "northbound"), "northbound")
	sb = fieldAfter(waitFor(t, out, "southbound"), "southbound")
	waitFor(t, out, "metrics")
	return nb, sb, stop
}

// runCPCommand runs `switchboard controlplane` in-process on a config file with
// body, until the test ends or stop is called, and returns everything it printed
// and logged.
func runCPCommand(t *testing.T, body, metricsListen string) (out *syncbuf.Buffer, stop func() error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cp.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out = &syncbuf.Buffer{}
	cmd := newRootCmd(out, out)
	cmd.SetArgs([]string{"controlplane", "--config", path, "--metrics-listen", metricsListen, "--log-level", "error"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	stop = func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("controlplane did not stop")
			return nil
		}
	}
	t.Cleanup(cancel)
	return out, stop
}

// ctl runs `switchboard ctl --server nb ARGS...`.
func ctl(t *testing.T, nb string, args ...string) (string, string, int) {
	t.Helper()
	return run(t, append([]string{"ctl", "--server", nb}, args...)...)
}

func mustCtl(t *testing.T, nb string, args ...string) string {
	t.Helper()
	out, errOut, code := ctl(t, nb, args...)
	if code != 0 {
		t.Fatalf("ctl %v: exit %d: %s", args, code, errOut)
	}
	return out
}

// eventuallyCtl repeats a ctl command until its output contains every want.
func eventuallyCtl(t *testing.T, nb string, want []string, args ...string) string {
	t.Helper()
	return pollCtl(t, nb, func(out string) string {
		for _, w := range want {
			if !strings.Contains(out, w) {
				return "never printed " + w
			}
		}
		return ""
	}, args...)
}

// eventuallyCtlLacks repeats a ctl command until its output no longer contains gone.
func eventuallyCtlLacks(t *testing.T, nb, gone string, args ...string) {
	t.Helper()
	pollCtl(t, nb, func(out string) string {
		if strings.Contains(out, gone) {
			return "kept printing " + gone
		}
		return ""
	}, args...)
}

func pollCtl(t *testing.T, nb string, problem func(string) string, args ...string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := mustCtl(t, nb, args...)
		p := problem(out)
		if p == "" {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("ctl %v %s; last output:\n%s", args, p, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCtlAgainstControlPlane: an API mode control plane started by `switchboard
// controlplane`, two data-plane nodes, and every ctl command against it.
func TestCtlAgainstControlPlane(t *testing.T) {
	nb, sb, stop := startControlPlane(t, "database:\n  type: in_memory\n")
	f := e2e.NewFabric()
	defer f.Close()
	for _, g := range []string{"cloud", "edge"} {
		if _, err := f.Start(e2e.NodeConfig{Group: g, ID: "n1", Target: sb}); err != nil {
			t.Fatal(err)
		}
	}
	eventuallyCtl(t, nb, []string{"cloud/n1", "edge/n1", "true"}, "node", "list")

	if out := mustCtl(t, nb, "segment", "add", "main"); !strings.Contains(out, "segment main added") {
		t.Fatalf("segment add: %q", out)
	}
	mustCtl(t, nb, "link", "add", "--segment", "main", "cloud", "edge")
	if out := mustCtl(t, nb, "segment", "list"); !strings.Contains(out, "main") || !strings.Contains(out, "cloud<->edge") {
		t.Fatalf("segment list:\n%s", out)
	}
	eventuallyCtl(t, nb, []string{"applied"}, "link", "list")

	var links struct {
		Links []struct {
			LinkID       string `json:"linkId"`
			SourceNodeID string `json:"sourceNodeId"`
			DestNodeID   string `json:"destNodeId"`
			Status       string `json:"status"`
		} `json:"links"`
	}
	if err := json.Unmarshal([]byte(mustCtl(t, nb, "-o", "json", "link", "list")), &links); err != nil || len(links.Links) != 1 {
		t.Fatalf("link list json: %v, %+v", err, links)
	}
	l := links.Links[0]
	out := mustCtl(t, nb, "connection", "list", "--node", l.SourceNodeID)
	if !strings.Contains(out, l.LinkID) {
		t.Fatalf("connection list of %s lacks %s:\n%s", l.SourceNodeID, l.LinkID, out)
	}

	if out := mustCtl(t, nb, "route", "add", "org/ns/svc", "--dest", "edge/n1"); !strings.Contains(out, "added") {
		t.Fatalf("route add: %q", out)
	}
	eventuallyCtl(t, nb, []string{"org/ns/svc", "applied"}, "route", "list", "--node", "cloud/n1")
	eventuallyCtl(t, nb, []string{"org/ns/svc", l.LinkID}, "subscription", "list", "--node", "cloud/n1")
	mustCtl(t, nb, "route", "delete", "org/ns/svc", "--dest", "edge/n1")
	eventuallyCtlLacks(t, nb, "org/ns/svc", "subscription", "list", "--node", "cloud/n1")
	eventuallyCtlLacks(t, nb, "org/ns/svc", "route", "list", "--node", "cloud/n1")

	mustCtl(t, nb, "link", "remove", "--segment", "main", "cloud", "edge")
	mustCtl(t, nb, "segment", "remove", "main")
	eventuallyCtlLacks(t, nb, l.LinkID, "link", "list")
	eventuallyCtlLacks(t, nb, l.LinkID, "connection", "list", "--node", l.SourceNodeID)

	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"connection", "list", "--node", "nowhere/n9"}, 1, "not connected"},
		{[]string{"link", "add", "cloud", "edge"}, 2, "required flag"},
		{[]string{"route", "add", "bad-name", "--dest", "edge/n1"}, 2, "three components"},
		{[]string{"-o", "yaml", "node", "list"}, 2, "--output"},
	} {
		if _, errOut, code := ctl(t, nb, tc.args...); code != tc.code || !strings.Contains(errOut, tc.msg) {
			t.Errorf("ctl %v: exit %d (want %d), stderr %q (want %q)", tc.args, code, tc.code, errOut, tc.msg)
		}
	}
	f.Close()
	if err := stop(); err != nil {
		t.Fatalf("controlplane exited with %v", err)
	}
}

// TestCtlConfigModeRefusesTopologyChanges: with the topology in the config file,
// segments are listed as resolved and mutations fail.
func TestCtlConfigModeRefusesTopologyChanges(t *testing.T) {
	nb, sb, stop := startControlPlane(t, "topology:\n  links:\n    - group: cloud\n      neighbors: ['*']\n")
	f := e2e.NewFabric()
	defer f.Close()
	for _, g := range []string{"cloud", "edge"} {
		if _, err := f.Start(e2e.NodeConfig{Group: g, ID: "n1", Target: sb}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Node("edge/n1").Announce(dataplane.NewName("org", "ns", "svc")); err != nil {
		t.Fatal(err)
	}
	eventuallyCtl(t, nb, []string{"cloud<->edge"}, "segment", "list")
	eventuallyCtl(t, nb, []string{"org/ns/svc", "applied"}, "route", "list", "--node", "cloud/n1")
	_, errOut, code := ctl(t, nb, "segment", "add", "extra")
	if code != 1 || !strings.Contains(errOut, "config mode") {
		t.Fatalf("segment add in config mode: exit %d, %q", code, errOut)
	}
	f.Close()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestControlPlaneBadConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.yaml")
	if err := os.WriteFile(path, []byte("reconciler:\n  workers: 0\n  surprise: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := run(t, "controlplane", "--config", path)
	if code != 2 || !strings.Contains(errOut, "reconciler.workers") || !strings.Contains(errOut, "reconciler.surprise") {
		t.Fatalf("bad config: exit %d, %q", code, errOut)
	}
	_, errOut, code = run(t, "controlplane", "--config", filepath.Join(t.TempDir(), "missing.yaml"))
	if code != 2 || !strings.Contains(errOut, "missing.yaml") {
		t.Fatalf("missing config: exit %d, %q", code, errOut)
	}
}

// TestControlPlaneDefaults: without --config, API mode on loopback ports.
func TestControlPlaneDefaults(t *testing.T) {
	c := defaultControlPlaneConfig()
	if c.Mode().String() != "api" || c.Database.Type != "in_memory" ||
		c.Northbound.Endpoint != "127.0.0.1:50051" || c.Southbound.Endpoint != "127.0.0.1:50052" {
		t.Fatalf("default config %+v", c)
	}
}

// TestCtlOverMutualTLS: a northbound endpoint that requires client certificates takes
// ctl's --tls-* flags, and refuses ctl without them.
func TestCtlOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := tlsutil.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(name, id string) tlsutil.Files {
		leaf, err := ca.Issue(id, "127.0.0.1", "localhost")
		if err != nil {
			t.Fatal(err)
		}
		files, err := ca.WriteFiles(dir, name, leaf)
		if err != nil {
			t.Fatal(err)
		}
		return files
	}
	srv := issue("server", "spiffe://test/controlplane")
	cli := issue("ctl", "spiffe://test/operator")
	nb, _, stop := startControlPlaneWithNorthbound(t, fmt.Sprintf("  tls:\n    cert_file: %s\n    key_file: %s\n    ca_file: %s\n", srv.Cert, srv.Key, srv.CA))
	tlsFlags := []string{"--tls-ca", cli.CA, "--tls-cert", cli.Cert, "--tls-key", cli.Key, "--tls-server-name", "127.0.0.1"}
	if out, errOut, code := ctl(t, nb, append(tlsFlags, "segment", "add", "secure")...); code != 0 || !strings.Contains(out, "secure") {
		t.Fatalf("ctl over mTLS: exit %d, %q, %q", code, out, errOut)
	}
	if _, _, code := ctl(t, nb, "--timeout", "2s", "segment", "list"); code == 0 {
		t.Fatal("a plaintext ctl reached a TLS-only northbound")
	}
	if _, _, code := ctl(t, nb, "--timeout", "2s", "--tls-ca", cli.CA, "--tls-server-name", "127.0.0.1", "segment", "list"); code == 0 {
		t.Fatal("ctl without a client certificate reached an mTLS northbound")
	}
	if _, errOut, code := ctl(t, nb, "--tls-cert", cli.Cert, "segment", "list"); code != 2 || !strings.Contains(errOut, "go together") {
		t.Fatalf("--tls-cert without --tls-key: exit %d, %q", code, errOut)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
