package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/dataplane"
	"github.com/switchboard-mesh/switchboard/internal/cpharness"
	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil/tlstest"
	"github.com/switchboard-mesh/switchboard/nodeauth"
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
	f := cpharness.NewFabric()
	defer f.Close()
	for _, g := range []string{"cloud", "edge"} {
		if _, err := f.Start(cpharness.NodeConfig{Group: g, ID: "n1", Target: sb}); err != nil {
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
	// The node as an argument, and YAML with the API's field names.
	out = mustCtl(t, nb, "-o", "yaml", "connection", "list", l.SourceNodeID)
	if !strings.Contains(out, "linkId: "+l.LinkID) || !strings.Contains(out, "entries:") || strings.Contains(out, "{") {
		t.Fatalf("connection list %s -o yaml:\n%s", l.SourceNodeID, out)
	}
	out = mustCtl(t, nb, "-o", "yaml", "link", "list")
	if !strings.Contains(out, "status: applied") || !strings.Contains(out, "- linkId: "+l.LinkID) {
		t.Fatalf("link list -o yaml:\n%s", out)
	}
	// Applied links by default, every state with --all, chosen ones with --status.
	if out := mustCtl(t, nb, "link", "list", "--status", "pending,failed"); strings.Contains(out, l.LinkID) {
		t.Fatalf("link list --status pending,failed shows the applied link:\n%s", out)
	}
	if out := mustCtl(t, nb, "link", "list", "--all"); !strings.Contains(out, l.LinkID) {
		t.Fatalf("link list --all lacks the link:\n%s", out)
	}

	if out := mustCtl(t, nb, "route", "add", "org/ns/svc", "edge/n1"); !strings.Contains(out, "added") {
		t.Fatalf("route add: %q", out)
	}
	eventuallyCtl(t, nb, []string{"org/ns/svc", "applied"}, "route", "list", "cloud/n1")
	eventuallyCtl(t, nb, []string{"org/ns/svc", l.LinkID}, "subscription", "list", "cloud/n1")
	eventuallyCtl(t, nb, []string{`"name": "org/ns/svc"`, `"linkId": "` + l.LinkID + `"`}, "-o", "json", "subscription", "list", "cloud/n1")
	eventuallyCtl(t, nb, []string{"- name: org/ns/svc"}, "-o", "yaml", "subscription", "list", "cloud/n1")
	mustCtl(t, nb, "route", "remove", "org/ns/svc", "edge/n1")
	eventuallyCtlLacks(t, nb, "org/ns/svc", "subscription", "list", "--node", "cloud/n1")
	eventuallyCtlLacks(t, nb, "org/ns/svc", "route", "list", "--all", "--node", "cloud/n1")
	// The old spelling still works, though help no longer lists it.
	mustCtl(t, nb, "route", "add", "org/ns/old", "--dest", "edge/n1")
	if out := mustCtl(t, nb, "route", "delete", "org/ns/old", "--dest", "edge/n1"); !strings.Contains(out, "deleted") {
		t.Fatalf("route delete (old name): %q", out)
	}
	if help := mustCtl(t, nb, "route", "--help"); !strings.Contains(help, "remove") || strings.Contains(help, "delete") {
		t.Fatalf("route --help should list remove and not delete:\n%s", help)
	}

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
		{[]string{"connection", "list"}, 2, "node id is required"},
		{[]string{"subscription", "list", "a/n1", "--node", "b/n1"}, 2, "disagree"},
		{[]string{"route", "add", "bad-name", "--dest", "edge/n1"}, 2, "three components"},
		{[]string{"route", "add", "org/ns/svc"}, 2, "DEST_NODE"},
		{[]string{"link", "list", "--status", "bogus"}, 2, "bogus"},
		{[]string{"-o", "xml", "node", "list"}, 2, "--output"},
		{[]string{"-o", "yaml", "topology"}, 2, "dot or mermaid"},
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
	f := cpharness.NewFabric()
	defer f.Close()
	for _, g := range []string{"cloud", "edge"} {
		if _, err := f.Start(cpharness.NodeConfig{Group: g, ID: "n1", Target: sb}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Node("edge/n1").Announce(dataplane.NewName("org", "ns", "svc")); err != nil {
		t.Fatal(err)
	}
	eventuallyCtl(t, nb, []string{"cloud<->edge"}, "segment", "list")
	// The table says what it shows: pairs of registered groups, not the file's rules
	// (a pair of groups not yet registered is not listed); structured output does not.
	if _, errOut, _ := ctl(t, nb, "segment", "list"); !strings.Contains(errOut, "config mode") || !strings.Contains(errOut, "registered") {
		t.Errorf("segment list in config mode: stderr %q, want a note that it shows the config's segments over the registered groups", errOut)
	}
	if _, errOut, _ := ctl(t, nb, "segment", "list", "-o", "json"); errOut != "" {
		t.Errorf("segment list -o json in config mode: stderr %q, want none", errOut)
	}
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
	ca, err := tlstest.NewCA("test")
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

// TestCtlDefaultSegmentAndTopology: `link add A B` without a segment uses the
// segment "default"; group list shows each group's nodes; topology draws the fabric
// as DOT (which Graphviz accepts when installed) and as Mermaid.
func TestCtlDefaultSegmentAndTopology(t *testing.T) {
	nb, sb, stop := startControlPlane(t, "database:\n  type: in_memory\n")
	f := cpharness.NewFabric()
	defer f.Close()
	for _, id := range []string{"cloud/n1", "cloud/n2", "edge/n1"} {
		g, n, _ := strings.Cut(id, "/")
		if _, err := f.Start(cpharness.NodeConfig{Group: g, ID: n, Target: sb}); err != nil {
			t.Fatal(err)
		}
	}
	if out := mustCtl(t, nb, "link", "add", "cloud", "edge"); !strings.Contains(out, "segment default") {
		t.Fatalf("link add without --segment: %q", out)
	}
	eventuallyCtl(t, nb, []string{"default", "cloud<->edge"}, "segment", "list")
	eventuallyCtl(t, nb, []string{"applied"}, "link", "list")
	out := eventuallyCtl(t, nb, []string{"cloud/n1", "cloud/n2", "edge/n1"}, "group", "list")
	if !regexp.MustCompile(`(?m)^cloud\s+cloud/n1, cloud/n2\s+-$`).MatchString(out) {
		t.Fatalf("group list:\n%s", out)
	}

	dot := mustCtl(t, nb, "topology")
	for _, want := range []string{"digraph fabric {", `subgraph "cluster_cloud"`, `subgraph "cluster_edge"`,
		`"group:cloud" -> "group:edge" [dir=none, style=dotted, color="#6b7280", label="segment default"]`,
		`[label="applied", color="#15803d"`, `\ngateway"`} {
		if !strings.Contains(dot, want) {
			t.Errorf("topology lacks %s:\n%s", want, dot)
		}
	}
	if path, err := exec.LookPath("dot"); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, path, "-Tsvg")
		cmd.Stdin = strings.NewReader(dot)
		if svg, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(svg), "<svg") {
			t.Fatalf("dot -Tsvg: %v\n%s", err, svg)
		}
	}
	mermaid := mustCtl(t, nb, "topology", "-o", "mermaid")
	for _, want := range []string{"flowchart LR", `["group cloud"]`, `-.-|"segment default"|`, `-->|"applied"|`} {
		if !strings.Contains(mermaid, want) {
			t.Errorf("topology -o mermaid lacks %s:\n%s", want, mermaid)
		}
	}
	mustCtl(t, nb, "link", "remove", "edge", "cloud")
	eventuallyCtlLacks(t, nb, "cloud<->edge", "segment", "list")
	f.Close()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestCtlGroupSecrets: in API mode with shared-secret registration, a group's secret
// added through ctl admits its nodes; rotating keeps them connected; removing it
// disconnects them and they cannot come back; the config file's group cannot be
// changed; the audit log never shows a secret.
func TestCtlGroupSecrets(t *testing.T) {
	const cloudSecret = "cloud-secret-0123456789abcdef-0123456789"
	cpOut, stop := runCPCommand(t, "northbound:\n  endpoint: 127.0.0.1:0\nsouthbound:\n  endpoint: 127.0.0.1:0\n"+
		"reconciler:\n  base_retry_delay: 10ms\ndatabase:\n  type: in_memory\n"+
		"registration_auth:\n  type: shared_secret\n  secrets:\n    cloud: "+cloudSecret+"\n", "127.0.0.1:0")
	nb := fieldAfter(waitFor(t, cpOut, "northbound"), "northbound")
	sb := fieldAfter(waitFor(t, cpOut, "southbound"), "southbound")
	metricsURL := fieldAfter(waitFor(t, cpOut, "metrics"), "metrics")
	f := cpharness.NewFabric()
	defer f.Close()
	start := func(group, secret string) {
		t.Helper()
		p, err := nodeauth.NewSharedSecretProvider(secret, nodeauth.SharedSecretOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Start(cpharness.NodeConfig{Group: group, ID: "n1", Target: sb, Tokens: p}); err != nil {
			t.Fatal(err)
		}
	}
	start("cloud", cloudSecret)

	added := mustCtl(t, nb, "group", "secret", "add", "edge", "--generate")
	m := regexp.MustCompile(`(?m)^secret: (\S+)$`).FindStringSubmatch(added)
	if m == nil || !strings.Contains(added, "secret of group edge added") {
		t.Fatalf("group secret add --generate: %q", added)
	}
	edgeSecret := m[1]
	start("edge", edgeSecret)
	list := eventuallyCtl(t, nb, []string{"cloud/n1", "edge/n1"}, "group", "list")
	if !regexp.MustCompile(`(?m)^cloud\s+cloud/n1\s+config$`).MatchString(list) || !regexp.MustCompile(`(?m)^edge\s+edge/n1\s+api$`).MatchString(list) {
		t.Fatalf("group list:\n%s", list)
	}

	secretFile := filepath.Join(t.TempDir(), "edge.secret")
	rotated := "edge-secret-rotated-0123456789abcdef-0123"
	if err := os.WriteFile(secretFile, []byte(rotated+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := mustCtl(t, nb, "group", "secret", "rotate", "edge", "--from-file", secretFile); !strings.Contains(out, "rotated") {
		t.Fatalf("rotate: %q", out)
	}
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"group", "secret", "rotate", "cloud", "--generate"}, 1, "config file"},
		{[]string{"group", "secret", "add", "edge", "--generate"}, 1, "exists"},
		{[]string{"group", "secret", "rotate", "lab", "--generate"}, 1, "not found"},
		{[]string{"group", "secret", "add", "lab"}, 2, "from-file"},
		{[]string{"group", "secret", "add", "lab", "--generate", "--from-file", "-"}, 2, "not both"},
		{[]string{"group", "secret", "add", "lab", "--from-file", filepath.Join(t.TempDir(), "missing")}, 2, "missing"},
	} {
		if _, errOut, code := ctl(t, nb, tc.args...); code != tc.code || !strings.Contains(strings.ToLower(errOut), tc.msg) {
			t.Errorf("ctl %v: exit %d (want %d), stderr %q (want %q)", tc.args, code, tc.code, errOut, tc.msg)
		}
	}
	// Rotation left the registered node connected.
	if list := mustCtl(t, nb, "group", "list"); !regexp.MustCompile(`(?m)^edge\s+edge/n1\s+api$`).MatchString(list) {
		t.Fatalf("edge/n1 not connected after rotation:\n%s", list)
	}

	deniedBefore := scrapeCounter(t, metricsURL, `switchboard_controlplane_registrations_total{outcome="denied"}`)
	if out := mustCtl(t, nb, "group", "secret", "remove", "edge"); !strings.Contains(out, "1 connected node(s) disconnected") {
		t.Fatalf("remove: %q", out)
	}
	eventuallyCtl(t, nb, []string{"edge/n1 (disconnected)"}, "group", "list")
	// The node tries again and is refused: it stays out.
	deadline := time.Now().Add(30 * time.Second)
	for scrapeCounter(t, metricsURL, `switchboard_controlplane_registrations_total{outcome="denied"}`) <= deniedBefore {
		if time.Now().After(deadline) {
			t.Fatal("the disconnected node never tried to register again")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if list := mustCtl(t, nb, "group", "list"); !strings.Contains(list, "edge/n1 (disconnected)") {
		t.Fatalf("edge/n1 came back without a secret:\n%s", list)
	}
	f.Close()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	logs := cpOut.String()
	if !strings.Contains(logs, "method=AddGroupSecret") || !strings.Contains(logs, "method=RotateGroupSecret") {
		t.Fatalf("no audit lines for the secret changes:\n%s", logs)
	}
	for _, secret := range []string{edgeSecret, rotated, cloudSecret} {
		if strings.Contains(logs, secret) {
			t.Fatalf("the control plane logged a secret:\n%s", logs)
		}
	}
}

// scrapeCounter reads one series' value from the control plane's /metrics URL (0
// when absent).
func scrapeCounter(t *testing.T, url, series string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return 0
}
