package main

import (
	"strings"
	"testing"
)

// kube-sync refuses a bad command line before it connects to anything.
func TestKubeSyncUsageErrors(t *testing.T) {
	// Outside a pod, so that "no --kubeconfig" cannot reach a real cluster.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	base := []string{"kube-sync", "--cluster", "west", "--registry-backend", "etcd"}
	cases := []struct {
		name string
		args []string
		msg  string
	}{
		{"no direction", base, "nothing to do"},
		{"no cluster", []string{"kube-sync", "--registry-backend", "etcd", "--export-namespace", "mesh"}, "--cluster is required"},
		{"bad cluster", []string{"kube-sync", "--cluster", "9west", "--registry-backend", "etcd", "--export-namespace", "mesh"}, "--cluster"},
		{"no backend", []string{"kube-sync", "--cluster", "west", "--import-namespace", "shop"}, "--registry-backend is required"},
		{"memory backend", []string{"kube-sync", "--cluster", "west", "--registry-backend", "memory", "--import-namespace", "shop"}, "memory backend"},
		{"unknown backend", []string{"kube-sync", "--cluster", "west", "--registry-backend", "nope", "--import-namespace", "shop"}, "unknown registry backend"},
		{"export flag without export", append(base, "--import-namespace", "shop", "--export-service", "web"), "--export-service needs --export-namespace"},
		{"export-only flag without export", append(base, "--import-namespace", "shop", "--export-only-other-clusters"), "needs --export-namespace"},
		{"import flag without import", append(base, "--export-namespace", "mesh", "--import-ttl", "30s"), "--import-ttl needs --import-namespace"},
		{"bad namespace", append(base, "--export-namespace", "Mesh"), "--export-namespace"},
		{"bad import namespace", append(base, "--import-namespace", "shop_1"), "--import-namespace"},
		{"bad pattern", append(base, "--export-namespace", "mesh", "--export-service", "web["), "--export-service"},
		{"fractional TTL", append(base, "--import-namespace", "shop", "--import-ttl", "1500ms"), "--import-ttl"},
		{"short TTL", append(base, "--import-namespace", "shop", "--import-ttl", "0s"), "--import-ttl"},
		{"zero resync", append(base, "--import-namespace", "shop", "--resync", "0s"), "--resync"},
		{"spinning resync", append(base, "--import-namespace", "shop", "--resync", "1ns"), "--resync 1ns: must be at least 1s"},
		{"short resync", append(base, "--export-namespace", "mesh", "--resync", "999ms"), "--resync 999ms: must be at least 1s"},
		{"negative resync", append(base, "--export-namespace", "mesh", "--resync", "-1m"), "--resync -1m0s: must be at least 1s"},
		{"bad metrics address", append(base, "--import-namespace", "shop", "--metrics-listen", "localhost"), "--metrics-listen"},
		{"not in a pod", append(base, "--import-namespace", "shop"), "give --kubeconfig"},
		{"missing kubeconfig", append(base, "--import-namespace", "shop", "--kubeconfig", t.TempDir()+"/none"), "--kubeconfig"},
		{"arguments", append(base, "--import-namespace", "shop", "extra"), "unknown command"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string(nil), c.args...)
			out, errOut, code := run(t, args...)
			if code != exitUsage || !strings.Contains(errOut, c.msg) {
				t.Fatalf("exit %d (want %d), stderr %q (want it to contain %q), stdout %q", code, exitUsage, errOut, c.msg, out)
			}
		})
	}
}

// --help explains both directions and every flag to a newcomer.
func TestKubeSyncHelp(t *testing.T) {
	out, errOut, code := run(t, "kube-sync", "--help")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"Export (--export-namespace)", "Import (--import-namespace)", "--kubeconfig", "--cluster", "--export-service",
		"--export-only-other-clusters", "--import-ttl duration", `(default 1m0s)`, "--resync", "Registry backend flags",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q:\n%s", want, out)
		}
	}
}
