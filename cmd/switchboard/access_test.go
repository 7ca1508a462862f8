package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/access"
	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil"
	"github.com/switchboard-mesh/switchboard/internal/tlsutil/tlstest"
)

// execMainEnv makes the test binary run main instead of the tests, so a test can run
// the real command as a child process and send it signals.
const execMainEnv = "SWITCHBOARD_TEST_EXEC_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(execMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	code := m.Run()
	removeBinary()
	os.Exit(code)
}

// writeTokenFile writes a token file with one token per role=name pair and returns
// the tokens by name.
func writeTokenFile(t *testing.T, path string, holders ...[2]string) map[string]string {
	t.Helper()
	tokens := map[string]string{}
	var lines []string
	for _, h := range holders {
		tok := access.Generate()
		line, err := access.HashLine(h[0], h[1], tok)
		if err != nil {
			t.Fatal(err)
		}
		tokens[h[1]] = tok
		lines = append(lines, line)
	}
	if err := os.WriteFile(path, []byte("# role name hash\n"+strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return tokens
}

// startCP runs `switchboard controlplane --config` in-process with the config body
// as given and returns the northbound address and everything the command printed and
// logged (audit lines included: they are logged whatever --log-level says).
func startCP(t *testing.T, body string) (nb string, out *syncbuf.Buffer, stop func() error) {
	t.Helper()
	out, stop = runCPCommand(t, body, "")
	return fieldAfter(waitFor(t, out, "  northbound  "), "northbound"), out, stop
}

// TestNorthboundRolesOverMutualTLS: identities come from verified client certificates
// over loopback mTLS and tokens from the token file. A viewer token lists but cannot
// add a segment (PermissionDenied naming admin, nothing changes, nothing audited);
// an admin token and a certificate bound to admin can, and each change is audited
// with who made it.
func TestNorthboundRolesOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := tlstest.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(name, id string) tlsutil.Files {
		leaf, err := ca.Issue(id, "127.0.0.1")
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
	opsCert := issue("ops", "spiffe://test/ops")     // bound to admin
	ciCert := issue("ci", "spiffe://test/ci-runner") // bound to nothing: only its tokens count
	tokenPath := filepath.Join(dir, "tokens")
	tokens := writeTokenFile(t, tokenPath, [2]string{"viewer", "dashboard"}, [2]string{"admin", "deployer"})
	nb, logs, stop := startCP(t, fmt.Sprintf(`
northbound:
  endpoint: 127.0.0.1:0
  tls: {cert_file: %s, key_file: %s, ca_file: %s}
  authorization:
    identities:
      admin: ["spiffe://test/ops"]
    token_file: %s
southbound:
  endpoint: 127.0.0.1:0
`, srv.Cert, srv.Key, srv.CA, tokenPath))
	as := func(f tlsutil.Files, args ...string) []string {
		return append([]string{"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-server-name", "127.0.0.1"}, args...)
	}

	// The viewer lists, and is refused a change, which does not happen.
	if out, errOut, code := ctl(t, nb, as(ciCert, "--token", tokens["dashboard"], "segment", "list")...); code != 0 || !strings.Contains(out, "SEGMENT") {
		t.Fatalf("viewer segment list: exit %d, %q, %q", code, out, errOut)
	}
	_, errOut, code := ctl(t, nb, as(ciCert, "--token", tokens["dashboard"], "segment", "add", "by-viewer")...)
	if code != 1 || !strings.Contains(errOut, "permission denied: ") || !strings.Contains(errOut, "needs role admin") {
		t.Fatalf("viewer segment add: exit %d, %q", code, errOut)
	}
	if out := mustCtl(t, nb, as(opsCert, "segment", "list")...); strings.Contains(out, "by-viewer") {
		t.Fatalf("a refused segment add changed the topology:\n%s", out)
	}
	// A certificate bound to nothing, without a token, is refused too.
	if _, errOut, code := ctl(t, nb, as(ciCert, "segment", "list")...); code != 1 || !strings.Contains(errOut, "permission denied: ") || !strings.Contains(errOut, "spiffe://test/ci-runner has no role") {
		t.Fatalf("unbound certificate: exit %d, %q", code, errOut)
	}

	// The admin token and the admin certificate change the topology.
	if out := mustCtl(t, nb, as(ciCert, "--token", tokens["deployer"], "segment", "add", "by-token")...); !strings.Contains(out, "segment by-token added") {
		t.Fatalf("admin token segment add: %q", out)
	}
	if out := mustCtl(t, nb, as(opsCert, "segment", "add", "by-cert")...); !strings.Contains(out, "segment by-cert added") {
		t.Fatalf("admin certificate segment add: %q", out)
	}
	mustCtl(t, nb, as(opsCert, "link", "add", "--segment", "by-cert", "cloud", "edge")...)
	if out := mustCtl(t, nb, as(ciCert, "--token", tokens["dashboard"], "segment", "list")...); !strings.Contains(out, "by-token") || !strings.Contains(out, "cloud<->edge") {
		t.Fatalf("segment list after the admin changes:\n%s", out)
	}

	// One audit line per change, naming who and what, with before and after.
	audits := auditLines(logs.String())
	if len(audits) != 3 {
		t.Fatalf("%d audit lines, want 3:\n%s", len(audits), logs.String())
	}
	for i, want := range [][]string{
		{"who=token:deployer", "via=token", "method=AddSegment", `\"name\":\"by-token\"`, "before=null"},
		{"who=spiffe://test/ops", "via=certificate", "method=AddSegment", `\"name\":\"by-cert\"`},
		{"who=spiffe://test/ops", "method=AddTopologyLink", `before="{\"name\":\"by-cert\"}"`, `\"groupA\":\"cloud\"`},
	} {
		for _, w := range want {
			if !strings.Contains(audits[i], w) {
				t.Errorf("audit line %d lacks %s:\n%s", i, w, audits[i])
			}
		}
	}
	for _, tok := range tokens {
		if strings.Contains(logs.String(), tok) {
			t.Fatal("a token was logged")
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func auditLines(logs string) []string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "audit=true") {
			out = append(out, l)
		}
	}
	return out
}

// TestCtlTokenPrecedence: --token wins over $SWITCHBOARD_TOKEN, which wins over
// --token-file; shown both by the choice itself and by what the control plane lets
// each combination do.
func TestCtlTokenPrecedence(t *testing.T) {
	dir := t.TempDir()
	tokenPath := filepath.Join(dir, "tokens")
	tokens := writeTokenFile(t, tokenPath, [2]string{"viewer", "viewer"}, [2]string{"admin", "admin"})
	adminFile, viewerFile := filepath.Join(dir, "admin.token"), filepath.Join(dir, "viewer.token")
	for path, tok := range map[string]string{adminFile: tokens["admin"], viewerFile: tokens["viewer"]} {
		if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name, flag, env, file, want string
	}{
		{"flag over env and file", "F", "E", viewerFile, "F"},
		{"env over file", "", "E", viewerFile, "E"},
		{"file", "", "", viewerFile, tokens["viewer"]},
		{"none", "", "", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(tokenEnv, c.env)
			o := &ctlOptions{token: c.flag, tokenFile: c.file}
			if got, err := o.bearerToken(); err != nil || got != c.want {
				t.Fatalf("bearerToken = %q, %v; want %q", got, err, c.want)
			}
		})
	}

	// Over the wire: plaintext on loopback is allowed to carry a token.
	nb, _, stop := startCP(t, fmt.Sprintf("northbound:\n  endpoint: 127.0.0.1:0\n  authorization: {token_file: %s}\nsouthbound:\n  endpoint: 127.0.0.1:0\n", tokenPath))
	for i, c := range []struct {
		env  string
		args []string
		code int
	}{
		{tokens["viewer"], []string{"--token", tokens["admin"], "--token-file", viewerFile}, 0}, // --token: admin
		{tokens["viewer"], []string{"--token-file", adminFile}, 1},                              // env: viewer
		{"", []string{"--token-file", adminFile}, 0},                                            // file: admin
		{"", nil, 1}, // none: refused
	} {
		t.Setenv(tokenEnv, c.env)
		_, errOut, code := ctl(t, nb, append(c.args, "segment", "add", fmt.Sprintf("s%d", i))...)
		if code != c.code {
			t.Errorf("case %d: exit %d, want %d: %s", i, code, c.code, errOut)
		}
	}
	t.Setenv(tokenEnv, "")
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--token-file", filepath.Join(dir, "missing")}, "--token-file"},
		{[]string{"--token-file", tokenPath}, "want the token alone on one line"},
		// Refused before dialling: nothing is sent off this machine.
		{[]string{"--server", "192.0.2.1:50051", "--token", tokens["admin"]}, "refusing to send a token in plaintext to 192.0.2.1:50051"},
	} {
		if _, errOut, code := ctl(t, nb, append(c.args, "segment", "list")...); code != 2 || !strings.Contains(errOut, c.msg) {
			t.Errorf("ctl %v: exit %d, %q (want 2, %q)", c.args, code, errOut, c.msg)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestCtlTokenCommands(t *testing.T) {
	out, errOut, code := run(t, "ctl", "token", "generate", "--role", "viewer", "--name", "dash")
	if code != 0 {
		t.Fatalf("token generate: exit %d, %s", code, errOut)
	}
	var token, line string
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "token:"); ok {
			token = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(l, "token file:"); ok {
			line = strings.TrimSpace(v)
		}
	}
	toks, err := access.ParseTokens([]byte(line))
	if err != nil {
		t.Fatalf("generated line %q: %v", line, err)
	}
	if tok, ok := toks.Lookup(token); !ok || tok.Name != "dash" || tok.Role != access.Viewer {
		t.Fatalf("generated token does not match its line: %q / %q", token, line)
	}

	var hashOut syncbuf.Buffer
	cmd := newRootCmd(&hashOut, &hashOut)
	cmd.SetIn(strings.NewReader(token + "\n"))
	cmd.SetArgs([]string{"ctl", "token", "hash", "--role", "admin", "--name", "ci"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if want := "admin ci " + access.Hash(token); strings.TrimSpace(hashOut.String()) != want {
		t.Fatalf("token hash = %q, want %q", hashOut.String(), want)
	}
	if _, errOut, code := run(t, "ctl", "token", "generate", "--role", "root", "--name", "x"); code != 2 || !strings.Contains(errOut, "unknown role") {
		t.Fatalf("bad role: exit %d, %q", code, errOut)
	}
}

// TestControlPlaneRefusesPlaintextRemote: a plaintext endpoint on a non-loopback
// address is refused before anything listens (exit 2, naming the address and the
// flag); --insecure or allow_insecure_remote lets start-up go on, shown here by the
// next step failing instead (a taken loopback port), so nothing ever binds beyond
// loopback.
func TestControlPlaneRefusesPlaintextRemote(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	remote := fmt.Sprintf("northbound:\n  endpoint: 0.0.0.0:0\nsouthbound:\n  endpoint: %s\n", taken.Addr())
	plain := write("plain.yaml", remote)
	_, errOut, code := run(t, "controlplane", "--config", plain, "--metrics-listen", "")
	if code != 2 || !strings.Contains(errOut, "northbound endpoint 0.0.0.0:0 is plaintext") || !strings.Contains(errOut, "--insecure") {
		t.Fatalf("plaintext 0.0.0.0: exit %d, %q", code, errOut)
	}
	for _, args := range [][]string{
		{"controlplane", "--config", plain, "--metrics-listen", "", "--insecure"},
		{"controlplane", "--config", write("allowed.yaml", "allow_insecure_remote: true\n"+remote), "--metrics-listen", ""},
	} {
		_, errOut, code := run(t, args...)
		if code != 1 || !strings.Contains(errOut, taken.Addr().String()+" is in use") {
			t.Fatalf("%v: exit %d, %q; want the start-up to get past the check", args, code, errOut)
		}
	}
	// The same with TLS but no authorization: the API would be open to the network.
	ca, err := tlstest.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := ca.Issue("", "127.0.0.1")
	files, err := ca.WriteFiles(dir, "server", leaf)
	if err != nil {
		t.Fatal(err)
	}
	open := write("open.yaml", fmt.Sprintf("northbound:\n  endpoint: 0.0.0.0:0\n  tls: {cert_file: %s, key_file: %s}\n", files.Cert, files.Key))
	if _, errOut, code := run(t, "controlplane", "--config", open); code != 2 || !strings.Contains(errOut, "northbound endpoint 0.0.0.0:0 has no authorization") {
		t.Fatalf("TLS without authorization on 0.0.0.0: exit %d, %q", code, errOut)
	}
	// A broken token file is the operator's to fix, too. (On ports of its own: the
	// defaults may be taken, by a `switchboard dev` running beside the tests.)
	broken := write("broken.yaml", "northbound:\n  endpoint: 127.0.0.1:0\n  authorization: {token_file: "+write("tokens", "admin ci not-a-hash\n")+"}\n"+
		"southbound:\n  endpoint: 127.0.0.1:0\n")
	if _, errOut, code := run(t, "controlplane", "--config", broken, "--metrics-listen", ""); code != 2 || !strings.Contains(errOut, "line 1") {
		t.Fatalf("broken token file: exit %d, %q", code, errOut)
	}
}

// TestDevStaysOnLoopback: dev has no --insecure; a non-loopback control plane address
// is refused before anything starts.
func TestDevStaysOnLoopback(t *testing.T) {
	_, errOut, code := run(t, "dev", "--controlplane-northbound", "0.0.0.0:0", "--data-dir", t.TempDir())
	if code != 2 || !strings.Contains(errOut, "northbound endpoint 0.0.0.0:0 is plaintext") {
		t.Fatalf("dev on 0.0.0.0: exit %d, %q", code, errOut)
	}
}

// TestSIGHUPRevokesToken runs the control plane as a child process (this test binary,
// running main), removes a token from its token file, sends the process a real SIGHUP
// and waits until the token is refused while the others keep working.
func TestSIGHUPRevokesToken(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGHUP on Windows")
	}
	dir := t.TempDir()
	tokenPath := filepath.Join(dir, "tokens")
	tokens := writeTokenFile(t, tokenPath, [2]string{"viewer", "leaver"}, [2]string{"admin", "stayer"})
	cfg := filepath.Join(dir, "cp.yaml")
	body := fmt.Sprintf("northbound:\n  endpoint: 127.0.0.1:0\n  authorization: {token_file: %s}\nsouthbound:\n  endpoint: 127.0.0.1:0\n", tokenPath)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "controlplane", "--config", cfg, "--metrics-listen", "")
	cmd.Env = append(os.Environ(), execMainEnv+"=1")
	stderr := &syncbuf.Buffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	defer func() {
		_ = cmd.Process.Kill() // no-op once it has exited
		<-exited
	}()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	var nb string
	for nb == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("control plane exited before serving:\n%s", stderr.String())
			}
			if strings.HasPrefix(l, "  northbound  ") {
				nb = strings.Fields(l)[1]
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("control plane printed no northbound address:\n%s", stderr.String())
		}
	}
	go func() {
		for range lines { // keep the pipe drained
		}
	}()

	mustCtl(t, nb, "--token", tokens["leaver"], "segment", "list")
	keep, _ := access.HashLine("admin", "stayer", tokens["stayer"])
	if err := os.WriteFile(tokenPath, []byte(keep+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The file alone changes nothing until the signal.
	mustCtl(t, nb, "--token", tokens["leaver"], "segment", "list")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, errOut, code := ctl(t, nb, "--token", tokens["leaver"], "segment", "list")
		if code == 1 && strings.Contains(errOut, "not authenticated: ") && strings.Contains(errOut, "revoked") {
			break
		}
		if code != 0 || time.Now().After(deadline) {
			t.Fatalf("revoked token after SIGHUP: exit %d, %q\nlogs:\n%s", code, errOut, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	mustCtl(t, nb, "--token", tokens["stayer"], "segment", "add", "after-reload")
	logs := stderr.String()
	if !strings.Contains(logs, "northbound token file reloaded") || !strings.Contains(logs, "removed=1") || !strings.Contains(logs, "tokens=1") {
		t.Errorf("the reload is not logged with its counts:\n%s", logs)
	}
	for _, tok := range tokens {
		if strings.Contains(logs, tok) {
			t.Fatal("a token was logged")
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the deferred wait
		if err != nil {
			t.Fatalf("control plane exited with %v:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("control plane did not stop on SIGTERM")
	}
}
