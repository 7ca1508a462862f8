package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/version"
)

// InstallOptions says where the plugin goes and how it is configured.
type InstallOptions struct {
	BinDir  string // CNI plugin directory; default /opt/cni/bin
	ConfDir string // CNI configuration directory; default /etc/cni/net.d
	Name    string // the binary's file name and the plugin's type; default "switchboard"
	Binary  string // the binary to install; default PluginBinary next to the running executable, else that executable

	AgentSocket        string        // default DefaultAgentSocket
	OnAgentUnreachable Policy        // default DefaultPolicy
	Timeout            time.Duration // default DefaultTimeout

	// Wait is how long Install waits for the cluster's network plugin to write its
	// configuration; 0 fails at once when there is none.
	Wait   time.Duration
	Logger *slog.Logger
}

// Default directories, as kubelet, containerd and CRI-O use them.
const (
	DefaultBinDir  = "/opt/cni/bin"
	DefaultConfDir = "/etc/cni/net.d"
	DefaultName    = "switchboard"
)

// ErrNoConfig is returned by Install when ConfDir holds no network configuration.
var ErrNoConfig = errors.New("no CNI network configuration (*.conf, *.conflist or *.json)")

// confExts are the extensions runtimes load configurations from (containerd's
// go-cni and CRI-O pass these to libcni.ConfFiles).
var confExts = []string{".conf", ".conflist", ".json"}

// waitPoll is how often Install looks for a configuration while waiting.
var waitPoll = 250 * time.Millisecond

// Validate reports options Install and Uninstall would refuse, naming the option.
func (o InstallOptions) Validate() error {
	_, err := o.withDefaults()
	return err
}

func (o InstallOptions) withDefaults() (InstallOptions, error) {
	o.BinDir = cmpOr(o.BinDir, DefaultBinDir)
	o.ConfDir = cmpOr(o.ConfDir, DefaultConfDir)
	o.Name = cmpOr(o.Name, DefaultName)
	o.AgentSocket = cmpOr(o.AgentSocket, DefaultAgentSocket)
	o.OnAgentUnreachable = cmpOr(o.OnAgentUnreachable, DefaultPolicy)
	o.Timeout = cmpOr(o.Timeout, DefaultTimeout)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Name != filepath.Base(o.Name) || strings.HasPrefix(o.Name, ".") {
		return o, fmt.Errorf("plugin name %q: must be a plain file name", o.Name)
	}
	if err := checkSocket(o.AgentSocket); err != nil {
		return o, fmt.Errorf("agent socket %q: %w", o.AgentSocket, err)
	}
	if _, err := ParsePolicy(string(o.OnAgentUnreachable)); err != nil {
		return o, fmt.Errorf("onAgentUnreachable %q: %w", o.OnAgentUnreachable, err)
	}
	if err := checkTimeout(o.Timeout); err != nil {
		return o, fmt.Errorf("timeout %s: %w", o.Timeout, err)
	}
	if o.Wait < 0 {
		return o, fmt.Errorf("wait %s: must not be negative", o.Wait)
	}
	return o, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// entry is our plugin's configuration in the list. timeout is written only when it
// is not the default, so a default install reads as plainly as possible.
func (o InstallOptions) entry() json.RawMessage {
	e := struct {
		Type    string `json:"type"`
		Socket  string `json:"agentSocket"`
		Policy  Policy `json:"onAgentUnreachable"`
		Timeout string `json:"timeout,omitempty"`
	}{Type: o.Name, Socket: o.AgentSocket, Policy: o.OnAgentUnreachable}
	if o.Timeout != DefaultTimeout {
		e.Timeout = o.Timeout.String()
	}
	data, _ := json.Marshal(e) // strings only: cannot fail
	return data
}

// Install copies the binary into BinDir and chains the plugin, last, into the
// network configuration the runtime uses (the first of ConfDir's files in name
// order). It is idempotent: changed is false when nothing had to be written.
func Install(opts InstallOptions) (changed bool, err error) {
	return InstallContext(context.Background(), opts)
}

// InstallContext is Install with a context that ends the wait for a configuration.
func InstallContext(ctx context.Context, opts InstallOptions) (changed bool, err error) {
	o, err := opts.withDefaults()
	if err != nil {
		return false, err
	}
	// The binary first: a configuration must never name a plugin the runtime cannot find.
	binChanged, err := installBinary(o)
	if err != nil {
		return false, err
	}
	path, err := o.waitForConfig(ctx)
	if err != nil {
		return binChanged, err
	}
	confChanged, err := o.chain(path)
	if err != nil {
		return binChanged, fmt.Errorf("%s: %w", path, err)
	}
	if confChanged {
		o.Logger.Info("chained plugin into the network configuration", "file", path, "plugin", o.Name)
	}
	return binChanged || confChanged, nil
}

// confFiles lists dir's configuration files in the order runtimes read them
// (libcni.ConfFiles, sorted). A missing directory has none.
func confFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir) // sorted by name
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read CNI configuration directory: %w", err)
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() && slices.Contains(confExts, filepath.Ext(e.Name())) {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	return files, nil
}

// waitForConfig returns the file the runtime uses, waiting up to o.Wait for one to
// appear and to parse (the cluster's plugin may be writing it right now).
func (o InstallOptions) waitForConfig(ctx context.Context) (string, error) {
	deadline := time.Now().Add(o.Wait)
	for {
		path, err := o.runtimeConfig()
		if err == nil {
			return path, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return "", err
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for a CNI network configuration: %w", ctx.Err())
		case <-time.After(min(left, waitPoll)):
		}
	}
}

// runtimeConfig is the first configuration file, checked to be JSON.
func (o InstallOptions) runtimeConfig() (string, error) {
	files, err := confFiles(o.ConfDir)
	if err != nil {
		return "", err
	}
	if len(files) == 0 {
		return "", fmt.Errorf("%s: %w: switchboard chains after the cluster's network plugin, whose configuration is not there (yet)", o.ConfDir, ErrNoConfig)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		return "", err
	}
	if _, err := parseObject(data); err != nil {
		return "", fmt.Errorf("%s: %w", files[0], err)
	}
	return files[0], nil
}

// chain adds the plugin to the configuration at path, converting a single-plugin
// file into a .conflist.
func (o InstallOptions) chain(path string) (bool, error) {
	data, info, err := readFile(path)
	if err != nil {
		return false, err
	}
	if !isList(path, data) {
		return o.convert(path, data, info.Mode().Perm())
	}
	out, err := chainList(data, o.Name, o.entry())
	if err != nil {
		return false, err
	}
	if err := checkListVersion(out); err != nil {
		return false, err
	}
	if bytes.Equal(out, data) {
		return false, nil
	}
	return true, writeAtomic(path, out, info.Mode().Perm())
}

// isList reports whether a file is a configuration list: a .conflist, or any file
// with a plugins key.
func isList(path string, data []byte) bool {
	if filepath.Ext(path) == ".conflist" {
		return true
	}
	o, err := parseObject(data)
	if err != nil {
		return false
	}
	_, ok := o.get("plugins")
	return ok
}

// convert writes NAME.conflist from NAME.conf (or .json) with the plugin chained,
// then removes the original. The two sort next to each other, and NAME.conf first,
// so the runtime reads the old file until the new one is complete.
func (o InstallOptions) convert(path string, data []byte, mode fs.FileMode) (bool, error) {
	out, err := convertConf(data, o.Name, o.entry())
	if err != nil {
		return false, err
	}
	if err := checkListVersion(out); err != nil {
		return false, err
	}
	target := strings.TrimSuffix(path, filepath.Ext(path)) + ".conflist"
	if err := o.mayReplace(target); err != nil {
		return false, err
	}
	if err := writeAtomic(target, out, mode); err != nil {
		return false, err
	}
	if err := os.Remove(path); err != nil {
		return true, fmt.Errorf("remove the converted file: %w", err)
	}
	o.Logger.Info("converted a single-plugin configuration into a list", "from", path, "to", target)
	return true, nil
}

// mayReplace allows overwriting target only when it is ours: an earlier conversion
// of a .conf the cluster's plugin has since written again.
func (o InstallOptions) mayReplace(target string) error {
	old, err := os.ReadFile(target)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, found, _, err := unchainList(old, o.Name); err == nil && found {
		return nil
	}
	return fmt.Errorf("%s exists and was not written by switchboard: not replacing it", target)
}

// checkListVersion refuses a list whose cniVersion the plugin does not speak: chained
// into it, the plugin would fail every pod's ADD. The version is the one libcni
// picks: the highest of cniVersion and cniVersions it implements.
func checkListVersion(data []byte) error {
	o, err := parseObject(data)
	if err != nil {
		return err
	}
	v := effectiveVersion(o)
	if !slices.Contains(Versions.SupportedVersions(), v) {
		return fmt.Errorf("cniVersion %q: switchboard cni supports %s", v, strings.Join(Versions.SupportedVersions(), ", "))
	}
	return nil
}

func effectiveVersion(o object) string {
	best := o.stringValue("cniVersion")
	var vs []string
	if raw, ok := o.get("cniVersions"); ok {
		_ = json.Unmarshal(raw, &vs)
	}
	for _, v := range vs {
		if newer, err := version.GreaterThan(v, version.Current()); err != nil || newer {
			continue
		}
		if best == "" {
			best = v
		} else if gt, err := version.GreaterThan(v, best); err == nil && gt {
			best = v
		}
	}
	return best
}

// Uninstall removes the plugin from every configuration in ConfDir and its binary
// from BinDir. It is idempotent: changed is false when there was nothing to remove.
// Files that do not parse are left alone: they are not ours to judge.
func Uninstall(opts InstallOptions) (changed bool, err error) {
	o, err := opts.withDefaults()
	if err != nil {
		return false, err
	}
	files, err := confFiles(o.ConfDir)
	if err != nil {
		return false, err
	}
	for _, path := range files {
		c, err := o.unchain(path)
		if err != nil {
			return changed, fmt.Errorf("%s: %w", path, err)
		}
		changed = changed || c
	}
	err = os.Remove(filepath.Join(o.BinDir, o.Name))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return changed, nil
	}
	return changed, fmt.Errorf("remove the plugin binary: %w", err)
}

// unchain removes our plugin from one file; a list left with no plugin was ours alone
// and is removed, since an empty list is not a valid configuration.
func (o InstallOptions) unchain(path string) (bool, error) {
	data, info, err := readFile(path)
	if err != nil {
		return false, err
	}
	if !isList(path, data) {
		return false, nil
	}
	out, found, empty, err := unchainList(data, o.Name)
	if err != nil {
		o.Logger.Warn("leaving a configuration that does not parse", "file", path, "err", err)
		return false, nil
	}
	switch {
	case !found:
		return false, nil
	case empty:
		return true, os.Remove(path)
	}
	o.Logger.Info("removed plugin from the network configuration", "file", path, "plugin", o.Name)
	return true, writeAtomic(path, out, info.Mode().Perm())
}

func readFile(path string) ([]byte, fs.FileInfo, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	data, err := os.ReadFile(path)
	return data, info, err
}

// PluginBinary is the small plugin-only binary (cmd/switchboard-cni) that Install
// prefers when it lies next to the running executable: it starts in a tenth of the
// time the whole switchboard binary takes, and the runtime starts the plugin for
// every pod.
const PluginBinary = "switchboard-cni"

// installBinary copies the binary to BinDir/Name unless it is there already.
func installBinary(o InstallOptions) (bool, error) {
	src := o.Binary
	if src == "" {
		exe, err := os.Executable()
		if err != nil {
			return false, fmt.Errorf("find the running executable: %w", err)
		}
		src = exe
		if small := filepath.Join(filepath.Dir(exe), PluginBinary); isRegular(small) {
			src = small
		}
	}
	dst := filepath.Join(o.BinDir, o.Name)
	if same, err := sameContent(src, dst); err != nil || same {
		return false, err
	}
	if err := os.MkdirAll(o.BinDir, 0o755); err != nil {
		return false, fmt.Errorf("create the plugin directory: %w", err)
	}
	f, err := os.Open(src)
	if err != nil {
		return false, fmt.Errorf("open the binary to install: %w", err)
	}
	defer f.Close()
	if err := writeAtomicFrom(dst, f, 0o755); err != nil {
		return false, fmt.Errorf("install the plugin binary: %w", err)
	}
	o.Logger.Info("installed the plugin binary", "path", dst)
	return true, nil
}

// sameContent reports whether dst exists with exactly src's bytes (or is src).
func sameContent(src, dst string) (bool, error) {
	si, err := os.Stat(src)
	if err != nil {
		return false, fmt.Errorf("the binary to install: %w", err)
	}
	di, err := os.Stat(dst)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	case os.SameFile(si, di):
		return true, nil
	case si.Size() != di.Size() || di.Mode().Perm() != 0o755:
		return false, nil
	}
	a, err := os.ReadFile(src)
	if err != nil {
		return false, err
	}
	b, err := os.ReadFile(dst)
	if err != nil {
		return false, err
	}
	return bytes.Equal(a, b), nil
}

func writeAtomic(path string, data []byte, mode fs.FileMode) error {
	return writeAtomicFrom(path, bytes.NewReader(data), mode)
}

// writeAtomicFrom replaces path with r's bytes so that a reader sees the old file or
// the new one, never a part: a temporary file in the same directory, synced, then
// renamed over path. The temporary name ends in neither .conf nor .conflist, so a
// runtime listing the directory meanwhile never loads it.
func writeAtomicFrom(path string, r io.Reader, mode fs.FileMode) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = io.Copy(tmp, r); err != nil {
		return err
	}
	if err = tmp.Chmod(mode); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// KeepInstalled installs, then installs again whenever ConfDir or the installed
// binary changes (the cluster's plugin rewriting its configuration drops ours), until
// ctx ends. It looks every interval. Only bad options end it early: a failed install
// is logged and tried again once something changes.
func KeepInstalled(ctx context.Context, opts InstallOptions, every time.Duration) error {
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	var seen string
	for {
		if fp := fingerprint(o); fp != seen {
			changed, err := InstallContext(ctx, o)
			o.Wait = 0 // only the first install waits; later ones are retried by the loop
			switch {
			case err != nil && ctx.Err() == nil:
				o.Logger.Warn("install failed; trying again when the directories change", "err", err)
				seen = fp
			case changed:
				// Look again next time rather than fingerprint what was just written:
				// a change made meanwhile would be taken for ours.
				seen = ""
			default:
				seen = fp
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

// fingerprint changes whenever a configuration file or the installed binary does.
func fingerprint(o InstallOptions) string {
	var b strings.Builder
	files, _ := confFiles(o.ConfDir)
	for _, f := range append(files, filepath.Join(o.BinDir, o.Name)) {
		if info, err := os.Stat(f); err == nil {
			fmt.Fprintf(&b, "%s %d %d %v\n", f, info.Size(), info.ModTime().UnixNano(), info.Mode())
		} else {
			fmt.Fprintf(&b, "%s missing\n", f)
		}
	}
	return b.String()
}

func isRegular(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}
