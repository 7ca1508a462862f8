package kubetest

import (
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/internal/toolbin"
)

// Version is the Kubernetes release tools/kube-apiserver/go.mod pins. It names the
// cached binary, so changing the pin must change it too (TestToolsModulePinsVersion
// checks that).
const Version = "v1.37.2"

// Environment variables that opt in to the real server.
const (
	// EnvBinary names a prebuilt kube-apiserver to use instead of building one.
	EnvBinary = "SWITCHBOARD_KUBE_APISERVER"
	// EnvAllowBuild set to 1 allows building (and then reusing) the cached binary.
	EnvAllowBuild = "SWITCHBOARD_KUBE"
)

// toolsModule is where the kube-apiserver module lives, relative to the main
// module's root.
const toolsModule = "tools/kube-apiserver"

// tool builds and caches kube-apiserver. A cold build took 7 minutes on a loaded
// 2-core machine; toolbin's default limit leaves room for a slower one.
var tool = toolbin.Tool{
	Name:          "kube-apiserver",
	Prefix:        "kubetest",
	Version:       Version,
	Module:        toolsModule,
	Package:       "k8s.io/kubernetes/cmd/kube-apiserver",
	LDFlags:       versionLDFlags(),
	EnvBinary:     EnvBinary,
	EnvAllowBuild: EnvAllowBuild,
	MakeTarget:    "test-kube",
	Packages:      2100,
}

// Binary returns the path of a kube-apiserver binary, building it if allowed, and
// skips the test when neither EnvBinary nor EnvAllowBuild is set.
func Binary(t testing.TB) string {
	t.Helper()
	return tool.Binary(t)
}

// versionLDFlags stamps the release as Kubernetes' own build does
// (hack/lib/version.sh), so /version reports Version instead of v0.0.0-master.
// Only the link step sees it: the compiled packages stay shared in GOCACHE.
func versionLDFlags() string {
	const pkg = "k8s.io/component-base/version."
	major, minor, _ := strings.Cut(strings.TrimPrefix(Version, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	return strings.Join([]string{
		"-X " + pkg + "gitVersion=" + Version,
		"-X " + pkg + "gitMajor=" + major,
		"-X " + pkg + "gitMinor=" + minor,
		"-X " + pkg + "gitTreeState=clean",
	}, " ")
}
