package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCNIVersionAsRuntimeRunsIt: the runtime executes the plugin binary with no
// arguments and CNI_COMMAND in the environment; stdout is the version object.
func TestCNIVersionAsRuntimeRunsIt(t *testing.T) {
	for _, args := range [][]string{nil, {"cni"}} {
		r := runBinary(t, "", []string{"CNI_COMMAND=VERSION"}, args...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d, stderr %s", args, r.code, r.stderr)
		}
		var v struct {
			CNIVersion        string   `json:"cniVersion"`
			SupportedVersions []string `json:"supportedVersions"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
			t.Fatalf("%v: stdout %q: %v", args, r.stdout, err)
		}
		if !slices.Contains(v.SupportedVersions, "1.1.0") {
			t.Fatalf("%v: supported versions %v lack 1.1.0", args, v.SupportedVersions)
		}
	}
}

// TestCNIErrorAsRuntimeSeesIt: a failed call exits 1 with the spec's error object
// on stdout.
func TestCNIErrorAsRuntimeSeesIt(t *testing.T) {
	r := runBinary(t, "", []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", "CNI_NETNS=/var/run/netns/x", "CNI_IFNAME=eth0", "CNI_PATH=/opt/cni/bin"})
	var e struct {
		Code uint   `json:"code"`
		Msg  string `json:"msg"`
	}
	if r.code != 1 || json.Unmarshal([]byte(r.stdout), &e) != nil || e.Code == 0 {
		t.Fatalf("exit %d, stdout %q", r.code, r.stdout)
	}
}

func TestCNIHelpWithoutCNICommand(t *testing.T) {
	r := runBinary(t, "", []string{"CNI_COMMAND="}, "cni")
	if r.code != 0 || !strings.Contains(r.stdout, "container runtime") || !strings.Contains(r.stdout, "install") {
		t.Fatalf("exit %d, stdout %q", r.code, r.stdout)
	}
}

// cniDirs are a node's CNI directories with the cluster's network configuration.
func cniDirs(t *testing.T) (bin, conf, conflist string) {
	t.Helper()
	root := t.TempDir()
	bin, conf = filepath.Join(root, "bin"), filepath.Join(root, "net.d")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	conflist = filepath.Join(conf, "10-calico.conflist")
	data := `{"name":"k8s-pod-network","cniVersion":"1.0.0","plugins":[{"type":"calico","mtu":1440},{"type":"portmap","capabilities":{"portMappings":true}}]}`
	if err := os.WriteFile(conflist, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return bin, conf, conflist
}

func cniPlugins(t *testing.T, path string) []map[string]any {
	t.Helper()
	var list struct {
		Plugins []map[string]any `json:"plugins"`
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatal(err)
	}
	return list.Plugins
}

func TestCNIInstallAndUninstall(t *testing.T) {
	bin, conf, conflist := cniDirs(t)
	dirs := []string{"--bin-dir", bin, "--conf-dir", conf}
	r := runBinary(t, "", nil, append([]string{"cni", "install", "--on-agent-unreachable", "fail", "--timeout", "3s"}, dirs...)...)
	if r.code != 0 || !strings.Contains(r.stdout, "installed") {
		t.Fatalf("install: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	plugins := cniPlugins(t, conflist)
	last := plugins[len(plugins)-1]
	if len(plugins) != 3 || last["type"] != "switchboard" || last["onAgentUnreachable"] != "fail" || last["timeout"] != "3s" {
		t.Fatalf("plugins %v", plugins)
	}
	installed := filepath.Join(bin, "switchboard")
	if info, err := os.Stat(installed); err != nil || info.Mode().Perm() != 0o755 {
		t.Fatalf("installed binary: %v %v", info, err)
	}
	// The installed copy is a working plugin.
	if out, err := exec.Command(installed, "version").Output(); err != nil || !strings.HasPrefix(string(out), "switchboard") {
		t.Fatalf("installed binary: %q %v", out, err)
	}
	if r := runBinary(t, "", nil, append([]string{"cni", "install", "--on-agent-unreachable", "fail", "--timeout", "3s"}, dirs...)...); r.code != 0 || !strings.Contains(r.stdout, "nothing changed") {
		t.Fatalf("second install: exit %d, stdout %q", r.code, r.stdout)
	}
	if r := runBinary(t, "", nil, append([]string{"cni", "uninstall"}, dirs...)...); r.code != 0 || !strings.Contains(r.stdout, "uninstalled") {
		t.Fatalf("uninstall: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	if plugins := cniPlugins(t, conflist); len(plugins) != 2 {
		t.Fatalf("after uninstall %v", plugins)
	}
	if _, err := os.Stat(installed); !os.IsNotExist(err) {
		t.Fatalf("binary still installed: %v", err)
	}
}

func TestCNIInstallErrors(t *testing.T) {
	bin, conf, _ := cniDirs(t)
	empty := t.TempDir()
	for name, c := range map[string]struct {
		args []string
		code int
		want string
	}{
		"no config":    {[]string{"--conf-dir", empty}, exitFailure, "no CNI network configuration"},
		"bad policy":   {[]string{"--conf-dir", conf, "--on-agent-unreachable", "maybe"}, exitUsage, "--on-agent-unreachable"},
		"long timeout": {[]string{"--conf-dir", conf, "--timeout", "2m"}, exitUsage, "timeout"},
		"relative":     {[]string{"--conf-dir", conf, "--socket", "cni.sock"}, exitUsage, "absolute"},
	} {
		t.Run(name, func(t *testing.T) {
			r := runBinary(t, "", nil, append([]string{"cni", "install", "--bin-dir", bin}, c.args...)...)
			if r.code != c.code || !strings.Contains(r.stderr, c.want) {
				t.Fatalf("exit %d (want %d), stderr %q lacks %q", r.code, c.code, r.stderr, c.want)
			}
		})
	}
}

// TestCNIInstallKeep: --keep installs, puts the plugin back when the cluster's
// plugin rewrites its configuration, and uninstalls on SIGTERM, exiting 0.
func TestCNIInstallKeep(t *testing.T) {
	bin, conf, conflist := cniDirs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), "cni", "install", "--keep", "--keep-interval", "50ms", "--bin-dir", bin, "--conf-dir", conf)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	chained := func() bool { return strings.Contains(readOrEmpty(conflist), `"switchboard"`) }
	waitUntil(t, "installed", chained)
	original := `{"name":"k8s-pod-network","cniVersion":"1.0.0","plugins":[{"type":"calico","mtu":1500}]}`
	if err := os.WriteFile(conflist, []byte(original), 0o644); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "installed again after the rewrite", chained)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v; stderr:\n%s", err, errOut.String())
	}
	if chained() {
		t.Fatal("still chained after SIGTERM")
	}
	if _, err := os.Stat(filepath.Join(bin, "switchboard")); !os.IsNotExist(err) {
		t.Fatalf("binary still installed: %v", err)
	}
}

func readOrEmpty(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// With the plugin-only binary beside switchboard (as the image has it), install
// copies that one: the runtime starts it for every pod, and it starts faster.
func TestCNIInstallPrefersThePluginBinary(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "switchboard")
	if out, err := exec.Command("go", "build", "-o", big, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	small := filepath.Join(dir, "switchboard-cni")
	if out, err := exec.Command("go", "build", "-o", small, "../switchboard-cni").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	bin, conf, _ := cniDirs(t)
	if out, err := exec.Command(big, "cni", "install", "--bin-dir", bin, "--conf-dir", conf).CombinedOutput(); err != nil {
		t.Fatalf("install: %v: %s", err, out)
	}
	want, err := os.ReadFile(small)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(bin, "switchboard"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("installed %d bytes, want the plugin-only binary's %d", len(got), len(want))
	}
	cmd := exec.Command(filepath.Join(bin, "switchboard"))
	cmd.Env = []string{"CNI_COMMAND=VERSION"}
	if out, err := cmd.Output(); err != nil || !strings.Contains(string(out), `"1.1.0"`) {
		t.Fatalf("installed plugin VERSION: %q %v", out, err)
	}
}
