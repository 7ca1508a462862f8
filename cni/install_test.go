package cni

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// calicoList is a cluster plugin's list with keys switchboard knows nothing about.
const calicoList = `{
  "name": "k8s-pod-network",
  "cniVersion": "1.0.0",
  "plugins": [
    {
      "type": "calico",
      "log_level": "info",
      "datastore_type": "kubernetes",
      "mtu": 1440,
      "ipam": {"type": "calico-ipam", "assign_ipv6": "false"},
      "kubernetes": {"kubeconfig": "/etc/cni/net.d/calico-kubeconfig"},
      "weird": {"z": 1.50, "a": ["x<y&z", null, 1e3]}
    },
    {"type": "portmap", "snat": true, "capabilities": {"portMappings": true}}
  ]
}`

const flannelConf = `{
	"name": "cbr0",
	"cniVersion": "0.4.0",
	"type": "flannel",
	"delegate": {"hairpinMode": true, "isDefaultGateway": true}
}`

// installDirs is an installation into temporary directories, with a stand-in binary.
func installDirs(t *testing.T) InstallOptions {
	t.Helper()
	root := t.TempDir()
	bin := filepath.Join(root, "switchboard-build")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho switchboard\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	o := InstallOptions{
		BinDir: filepath.Join(root, "opt", "cni", "bin"), ConfDir: filepath.Join(root, "net.d"),
		Binary: bin, Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
	}
	if err := os.MkdirAll(o.ConfDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return o
}

func writeConf(t *testing.T, dir, name, data string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func install(t *testing.T, o InstallOptions) bool {
	t.Helper()
	changed, err := Install(o)
	if err != nil {
		t.Fatal(err)
	}
	return changed
}

func readFileT(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// ours is the switchboard entry of a list, which must be the last plugin.
func ours(t *testing.T, path string) map[string]any {
	t.Helper()
	plugins := listPlugins(t, readFileT(t, path))
	var last map[string]any
	if err := json.Unmarshal([]byte(plugins[len(plugins)-1]), &last); err != nil {
		t.Fatal(err)
	}
	if last["type"] != "switchboard" {
		t.Fatalf("last plugin of %s is %v", path, last)
	}
	for _, p := range plugins[:len(plugins)-1] {
		if strings.Contains(p, `"type":"switchboard"`) {
			t.Fatalf("switchboard appears twice in %v", plugins)
		}
	}
	return last
}

func TestInstallAppendsToConflist(t *testing.T) {
	o := installDirs(t)
	path := writeConf(t, o.ConfDir, "10-calico.conflist", calicoList, 0o600)
	if !install(t, o) {
		t.Fatal("first install reported no change")
	}
	got := listPlugins(t, readFileT(t, path))
	want := listPlugins(t, []byte(calicoList))
	if len(got) != 3 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("other plugins not preserved exactly:\n%v\n%v", got, want)
	}
	entry := ours(t, path)
	if entry["agentSocket"] != DefaultAgentSocket || entry["onAgentUnreachable"] != "allow" || entry["timeout"] != nil || len(entry) != 3 {
		t.Fatalf("entry %v", entry)
	}
	if info, _ := os.Stat(path); info.Mode().Perm() != 0o600 {
		t.Fatalf("config mode %v, want the original 0600", info.Mode().Perm())
	}
	bin := filepath.Join(o.BinDir, "switchboard")
	info, err := os.Stat(bin)
	if err != nil || info.Mode().Perm() != 0o755 || string(readFileT(t, bin)) != string(readFileT(t, o.Binary)) {
		t.Fatalf("binary: %v %v", info, err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(o.ConfDir, ".*")); len(leftovers) > 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}
}

func TestInstallTwiceWritesNothing(t *testing.T) {
	o := installDirs(t)
	path := writeConf(t, o.ConfDir, "10-calico.conflist", calicoList, 0o644)
	install(t, o)
	before, _ := os.Stat(path)
	binBefore, _ := os.Stat(filepath.Join(o.BinDir, "switchboard"))
	data := readFileT(t, path)
	if install(t, o) {
		t.Fatal("second install reported a change")
	}
	after, _ := os.Stat(path)
	binAfter, _ := os.Stat(filepath.Join(o.BinDir, "switchboard"))
	if !after.ModTime().Equal(before.ModTime()) || !binAfter.ModTime().Equal(binBefore.ModTime()) || string(readFileT(t, path)) != string(data) {
		t.Fatal("second install rewrote a file")
	}
}

func TestInstallReplacesEntry(t *testing.T) {
	o := installDirs(t)
	path := writeConf(t, o.ConfDir, "10-calico.conflist", calicoList, 0o644)
	install(t, o)
	o.OnAgentUnreachable, o.Timeout, o.AgentSocket = PolicyFail, 5*time.Second, "/var/run/sb/cni.sock"
	if !install(t, o) {
		t.Fatal("changed options reported no change")
	}
	entry := ours(t, path)
	if entry["onAgentUnreachable"] != "fail" || entry["timeout"] != "5s" || entry["agentSocket"] != "/var/run/sb/cni.sock" {
		t.Fatalf("entry %v", entry)
	}
	if n := len(listPlugins(t, readFileT(t, path))); n != 3 {
		t.Fatalf("%d plugins, want 3", n)
	}
}

// TestInstallMovesEntryLast: an entry of ours that is not last (someone added a
// plugin after it) is moved to the end, where prevResult is final.
func TestInstallMovesEntryLast(t *testing.T) {
	o := installDirs(t)
	in := `{"name":"n","cniVersion":"1.1.0","plugins":[{"type":"ptp"},{"type":"switchboard","timeout":"9s"},{"type":"bandwidth","x":1}]}`
	path := writeConf(t, o.ConfDir, "05-ptp.conflist", in, 0o644)
	install(t, o)
	got := listPlugins(t, readFileT(t, path))
	if len(got) != 3 || got[0] != `{"type":"ptp"}` || got[1] != `{"type":"bandwidth","x":1}` {
		t.Fatalf("plugins %v", got)
	}
	if entry := ours(t, path); entry["timeout"] != nil {
		t.Fatalf("old entry kept: %v", entry)
	}
}

func TestInstallConvertsConf(t *testing.T) {
	o := installDirs(t)
	old := writeConf(t, o.ConfDir, "10-flannel.conf", flannelConf, 0o640)
	install(t, o)
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the .conf is still there: %v", err)
	}
	path := filepath.Join(o.ConfDir, "10-flannel.conflist")
	var list struct {
		Name       string            `json:"name"`
		CNIVersion string            `json:"cniVersion"`
		Plugins    []json.RawMessage `json:"plugins"`
	}
	if err := json.Unmarshal(readFileT(t, path), &list); err != nil {
		t.Fatal(err)
	}
	if list.Name != "cbr0" || list.CNIVersion != "0.4.0" || len(list.Plugins) != 2 || compactJSON(t, list.Plugins[0]) != compactJSON(t, []byte(flannelConf)) {
		t.Fatalf("converted list %+v", list)
	}
	ours(t, path)
	if info, _ := os.Stat(path); info.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v", info.Mode().Perm())
	}
	if install(t, o) {
		t.Fatal("install after conversion reported a change")
	}
}

// TestInstallReconvertsRewrittenConf: the cluster's plugin writes its .conf again
// next to the list converted earlier; the list is ours to replace.
func TestInstallReconvertsRewrittenConf(t *testing.T) {
	o := installDirs(t)
	writeConf(t, o.ConfDir, "10-flannel.conf", flannelConf, 0o644)
	install(t, o)
	writeConf(t, o.ConfDir, "10-flannel.conf", strings.Replace(flannelConf, "true", "false", 1), 0o644)
	if !install(t, o) {
		t.Fatal("no change")
	}
	if !strings.Contains(string(readFileT(t, filepath.Join(o.ConfDir, "10-flannel.conflist"))), `"hairpinMode": false`) {
		t.Fatal("list not rebuilt from the new .conf")
	}
}

func TestInstallDoesNotClobberForeignList(t *testing.T) {
	o := installDirs(t)
	writeConf(t, o.ConfDir, "10-flannel.conf", flannelConf, 0o644)
	foreign := writeConf(t, o.ConfDir, "10-flannel.conflist", `{"name":"x","cniVersion":"1.0.0","plugins":[{"type":"bridge"}]}`, 0o644)
	if _, err := Install(o); err == nil || !strings.Contains(err.Error(), "not written by switchboard") {
		t.Fatalf("err %v", err)
	}
	if got := listPlugins(t, readFileT(t, foreign)); len(got) != 1 {
		t.Fatalf("foreign list changed: %v", got)
	}
}

// TestInstallEditsOnlyTheFirstConfig: the runtime uses the first file in name order.
func TestInstallEditsOnlyTheFirstConfig(t *testing.T) {
	o := installDirs(t)
	first := writeConf(t, o.ConfDir, "10-calico.conflist", calicoList, 0o644)
	second := writeConf(t, o.ConfDir, "99-loopback.conflist", `{"name":"lo","cniVersion":"1.0.0","plugins":[{"type":"loopback"}]}`, 0o644)
	writeConf(t, o.ConfDir, "00-notes.txt", "not a config", 0o644)
	install(t, o)
	ours(t, first)
	if got := listPlugins(t, readFileT(t, second)); len(got) != 1 {
		t.Fatalf("second file edited: %v", got)
	}
}

// TestInstallCNIVersions: lists at 0.3.x, which older flannel and Calico still
// write, are chained; one at a version the plugin does not speak is left alone.
func TestInstallCNIVersions(t *testing.T) {
	for _, v := range []string{"0.3.0", "0.3.1", "0.4.0"} {
		o := installDirs(t)
		path := writeConf(t, o.ConfDir, "10-calico.conflist", strings.Replace(calicoList, `"1.0.0"`, `"`+v+`"`, 1), 0o644)
		install(t, o)
		ours(t, path)
	}
	o := installDirs(t)
	old := strings.Replace(calicoList, `"1.0.0"`, `"0.2.0"`, 1)
	path := writeConf(t, o.ConfDir, "10-calico.conflist", old, 0o644)
	if _, err := Install(o); err == nil || !strings.Contains(err.Error(), `cniVersion "0.2.0"`) {
		t.Fatalf("err %v", err)
	}
	if string(readFileT(t, path)) != old {
		t.Fatal("file changed")
	}
	// cniVersions lets a list offer a newer version, which runtimes pick.
	writeConf(t, o.ConfDir, "10-calico.conflist", strings.Replace(old, `"plugins"`, `"cniVersions": ["0.2.0", "1.0.0", "9.9.9"], "plugins"`, 1), 0o644)
	install(t, o)
}

func TestInstallWithoutConfig(t *testing.T) {
	o := installDirs(t)
	if _, err := Install(o); !errors.Is(err, ErrNoConfig) || !strings.Contains(err.Error(), o.ConfDir) {
		t.Fatalf("err %v", err)
	}
	o.ConfDir = filepath.Join(o.ConfDir, "missing")
	start := time.Now()
	o.Wait = 300 * time.Millisecond
	if _, err := Install(o); !errors.Is(err, ErrNoConfig) {
		t.Fatalf("err %v", err)
	}
	if took := time.Since(start); took < 300*time.Millisecond || took > 10*time.Second {
		t.Fatalf("waited %s for a 300ms wait", took)
	}
}

func TestInstallWaitsForConfig(t *testing.T) {
	o := installDirs(t)
	o.Wait = 20 * time.Second
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(300 * time.Millisecond)
		// Written as the cluster's plugins often do: not atomically.
		f, err := os.Create(filepath.Join(o.ConfDir, "10-calico.conflist"))
		if err != nil {
			return
		}
		f.WriteString(calicoList[:40])
		time.Sleep(100 * time.Millisecond)
		f.WriteString(calicoList[40:])
		f.Close()
	}()
	defer func() { <-done }()
	if !install(t, o) {
		t.Fatal("no change")
	}
	ours(t, filepath.Join(o.ConfDir, "10-calico.conflist"))
}

func TestInstallOptionsValidated(t *testing.T) {
	o := installDirs(t)
	for name, mod := range map[string]func(*InstallOptions){
		"name with slash": func(o *InstallOptions) { o.Name = "../switchboard" },
		"relative socket": func(o *InstallOptions) { o.AgentSocket = "cni.sock" },
		"policy":          func(o *InstallOptions) { o.OnAgentUnreachable = "maybe" },
		"timeout":         func(o *InstallOptions) { o.Timeout = time.Hour },
	} {
		bad := o
		mod(&bad)
		if _, err := Install(bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestUninstall(t *testing.T) {
	o := installDirs(t)
	path := writeConf(t, o.ConfDir, "10-calico.conflist", calicoList, 0o600)
	broken := writeConf(t, o.ConfDir, "20-broken.conf", "{not json", 0o644)
	install(t, o)
	changed, err := Uninstall(o)
	if err != nil || !changed {
		t.Fatalf("Uninstall = %v, %v", changed, err)
	}
	if got, want := listPlugins(t, readFileT(t, path)), listPlugins(t, []byte(calicoList)); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("after uninstall %v, want %v", got, want)
	}
	if info, _ := os.Stat(path); info.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", info.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(o.BinDir, "switchboard")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("binary still there: %v", err)
	}
	if string(readFileT(t, broken)) != "{not json" {
		t.Fatal("a file that does not parse was changed")
	}
	if changed, err := Uninstall(o); err != nil || changed {
		t.Fatalf("second Uninstall = %v, %v", changed, err)
	}
}

// TestKeepInstalled: when the cluster's plugin rewrites its configuration without
// us, the keeper puts us back.
func TestKeepInstalled(t *testing.T) {
	o := installDirs(t)
	path := writeConf(t, o.ConfDir, "10-calico.conflist", calicoList, 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- KeepInstalled(ctx, o, 20*time.Millisecond) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(10 * time.Second):
			t.Error("KeepInstalled did not return after cancel")
		}
	}()
	chainedNow := func() bool { return strings.Contains(string(readFileT(t, path)), `"switchboard"`) }
	waitFor(t, "first install", chainedNow)
	writeConf(t, o.ConfDir, "10-calico.conflist", calicoList+"\n", 0o644) // a rewrite drops us
	waitFor(t, "re-install after the rewrite", chainedNow)
	os.Remove(filepath.Join(o.BinDir, "switchboard"))
	waitFor(t, "binary restored", func() bool {
		_, err := os.Stat(filepath.Join(o.BinDir, "switchboard"))
		return err == nil
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
