// Package cnitest runs the real CNI machinery in tests: libcni invoking a chain of
// Debian's containernetworking-plugins (bridge, host-local) and more plugins after
// them, in network namespaces the test creates. It needs root, iproute2 and the
// plugins in /usr/lib/cni (apt-get install containernetworking-plugins).
//
// It imports nothing of Switchboard: the plugin under test is a binary on disk.
package cnitest

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// PluginDir is where Debian installs the reference plugins. Debian 12's speak CNI up
// to 1.0.0; chains at 1.1.0 (GC, STATUS) use the upstream reference plugins that
// `make tools` builds into the repository's .bin (UpstreamPluginDir).
const PluginDir = "/usr/lib/cni"

// UpstreamPluginDir finds the repository's .bin holding the upstream bridge and
// host-local, walking up from the working directory; "" when there is none.
func UpstreamPluginDir() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if exists(filepath.Join(dir, ".bin", "bridge")) && exists(filepath.Join(dir, ".bin", "host-local")) {
			return filepath.Join(dir, ".bin")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// pluginDir is where the reference plugins of a chain at cniVersion come from.
func pluginDir(cniVersion string) string {
	if cniVersion == "1.1.0" {
		return UpstreamPluginDir()
	}
	return PluginDir
}

// Require skips the test unless the CNI chain can run here: as root, with iproute2
// and the plugins installed. With CI_REQUIRE_CNI set it fails instead, so that CI
// never passes by skipping.
func Require(t testing.TB) {
	t.Helper()
	why := ""
	switch {
	case os.Geteuid() != 0:
		why = "network namespaces need root"
	case !exists(filepath.Join(PluginDir, "bridge")) || !exists(filepath.Join(PluginDir, "host-local")):
		why = "the reference plugins are missing: apt-get install containernetworking-plugins"
	case UpstreamPluginDir() == "":
		why = "the CNI 1.1 reference plugins are missing: make tools"
	default:
		if _, err := exec.LookPath("ip"); err != nil {
			why = "iproute2's ip is missing"
		}
	}
	if why == "" {
		return
	}
	if os.Getenv("CI_REQUIRE_CNI") != "" {
		t.Fatal(why)
	}
	t.Skip(why)
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// Chain is a network configuration list: bridge with host-local addresses from
// Subnet, then the plugins given to NewChain.
type Chain struct {
	CNI    *libcni.CNIConfig
	List   *libcni.NetworkConfigList
	Name   string
	Subnet netip.Prefix
	// CacheDir is libcni's record of attachments, which GC reads.
	CacheDir string
	bridge   string
}

// Plugin is a plugin of the chain after bridge: its type names the binary, found in
// Dir, and Config holds its other keys.
type Plugin struct {
	Type   string
	Binary string // the executable; linked into the chain's plugin directory as Type
	Config map[string]any
}

// NewChain builds a chain on a bridge of its own, with a /24 of 10.x.y.0 chosen at
// random. The bridge is deleted when the test ends. At cniVersion 1.1.0 bridge and
// host-local are the upstream plugins, else Debian's.
func NewChain(t testing.TB, cniVersion string, plugins ...Plugin) *Chain {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	must(t, os.MkdirAll(bin, 0o755))
	for _, p := range []string{"bridge", "host-local"} {
		must(t, os.Symlink(filepath.Join(pluginDir(cniVersion), p), filepath.Join(bin, p)))
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	c := &Chain{Name: "sbt" + fmt.Sprintf("%x", b), CacheDir: filepath.Join(dir, "cache"),
		Subnet: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 100 + b[0]%100, b[1], 0}), 24)}
	c.bridge = c.Name // at most 15 bytes: an interface name
	list := []any{map[string]any{
		"type": "bridge", "bridge": c.bridge, "isGateway": true,
		"ipam": map[string]any{"type": "host-local", "subnet": c.Subnet.String(), "dataDir": filepath.Join(dir, "ipam")},
	}}
	for _, p := range plugins {
		must(t, os.Symlink(p.Binary, filepath.Join(bin, p.Type)))
		conf := map[string]any{"type": p.Type}
		for k, v := range p.Config {
			conf[k] = v
		}
		list = append(list, conf)
	}
	raw, err := json.Marshal(map[string]any{"cniVersion": cniVersion, "name": c.Name, "plugins": list})
	must(t, err)
	c.List, err = libcni.ConfListFromBytes(raw)
	must(t, err)
	c.CNI = libcni.NewCNIConfigWithCacheDir([]string{bin}, c.CacheDir, nil)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", c.bridge).Run() })
	return c
}

// Pod is one sandbox: a network namespace and the CNI_ARGS of a Kubernetes pod.
type Pod struct {
	ContainerID string
	NetNS       string // the namespace's path
	Namespace   string
	Name        string
	UID         string
}

// NewPod creates a network namespace for a pod; it is deleted when the test ends.
func NewPod(t testing.TB, namespace, name, uid string) *Pod {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := fmt.Sprintf("%x", b)
	ns := "sbt-" + id
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	return &Pod{ContainerID: "c" + id, NetNS: "/var/run/netns/" + ns, Namespace: namespace, Name: name, UID: uid}
}

// Remove deletes the pod's network namespace now, as a runtime tears a sandbox down.
func (p *Pod) Remove(t testing.TB) {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "del", filepath.Base(p.NetNS)).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del: %v: %s", err, out)
	}
}

// Runtime is the RuntimeConf a container runtime passes for p on eth0.
func (p *Pod) Runtime() *libcni.RuntimeConf {
	args := [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", p.Namespace}, {"K8S_POD_NAME", p.Name}}
	if p.UID != "" {
		args = append(args, [2]string{"K8S_POD_UID", p.UID})
	}
	return &libcni.RuntimeConf{ContainerID: p.ContainerID, NetNS: p.NetNS, IfName: "eth0", Args: args}
}

// Add runs ADD through the chain and returns the pod's addresses.
func (c *Chain) Add(ctx context.Context, p *Pod) ([]netip.Addr, *types100.Result, error) {
	res, err := c.CNI.AddNetworkList(ctx, c.List, p.Runtime())
	if err != nil {
		return nil, nil, err
	}
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil, nil, err
	}
	var ips []netip.Addr
	for _, ip := range r.IPs {
		a, _ := netip.AddrFromSlice(ip.Address.IP)
		ips = append(ips, a.Unmap())
	}
	return ips, r, nil
}

// Del runs DEL through the chain.
func (c *Chain) Del(ctx context.Context, p *Pod) error {
	return c.CNI.DelNetworkList(ctx, c.List, p.Runtime())
}

// Check runs CHECK through the chain.
func (c *Chain) Check(ctx context.Context, p *Pod) error {
	return c.CNI.CheckNetworkList(ctx, c.List, p.Runtime())
}

// GC runs GC with the pods still valid. libcni first sends DEL for every attachment in
// its cache that is not valid; Forget removes one from that cache, so that only GC
// can clean it up (a runtime that lost its record).
func (c *Chain) GC(ctx context.Context, valid ...*Pod) error {
	args := &libcni.GCArgs{}
	for _, p := range valid {
		args.ValidAttachments = append(args.ValidAttachments, types.GCAttachment{ContainerID: p.ContainerID, IfName: "eth0"})
	}
	return c.CNI.GCNetworkList(ctx, c.List, args)
}

// Forget removes p from libcni's attachment cache.
func (c *Chain) Forget(t testing.TB, p *Pod) {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(c.CacheDir, "results", c.Name+"-"+p.ContainerID+"-*"))
	if len(matches) == 0 {
		t.Fatalf("no cached attachment of %s under %s", p.ContainerID, c.CacheDir)
	}
	for _, m := range matches {
		must(t, os.Remove(m))
	}
}

// Status runs STATUS through the chain.
func (c *Chain) Status(ctx context.Context) error { return c.CNI.GetStatusNetworkList(ctx, c.List) }

// Addresses lists the IPv4 addresses of eth0 inside p's namespace, to show that the
// chain's result is the network the pod really has.
func Addresses(t testing.TB, p *Pod) []string {
	t.Helper()
	out, err := exec.Command("ip", "-n", filepath.Base(p.NetNS), "-4", "-o", "addr", "show", "dev", "eth0").CombinedOutput()
	if err != nil {
		t.Fatalf("ip addr in %s: %v: %s", p.NetNS, err, out)
	}
	var addrs []string
	for _, f := range strings.Fields(string(out)) {
		if pfx, err := netip.ParsePrefix(f); err == nil {
			addrs = append(addrs, pfx.Addr().String())
		}
	}
	return addrs
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
