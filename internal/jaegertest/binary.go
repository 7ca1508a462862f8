package jaegertest

import (
	"testing"

	"github.com/switchboard-mesh/switchboard/internal/toolbin"
)

// Version is the Jaeger release tools/jaeger/go.mod pins. It names the cached
// binary, so changing the pin must change it too (TestToolsModulePinsVersion checks
// that).
const Version = "v1.75.0"

// Environment variables that opt in to the real Jaeger.
const (
	// EnvBinary names a prebuilt jaeger binary to use instead of building one.
	EnvBinary = "SWITCHBOARD_JAEGER_BIN"
	// EnvAllowBuild set to 1 allows building (and then reusing) the cached binary.
	EnvAllowBuild = "SWITCHBOARD_JAEGER"
)

// toolsModule is where the Jaeger module lives, relative to the main module's root.
const toolsModule = "tools/jaeger"

// tool builds and caches jaeger. A cold build compiles about 2,300 packages,
// several minutes on a busy 2-core machine; toolbin's default limit leaves room for
// a slower one.
var tool = toolbin.Tool{
	Name:          "jaeger",
	Title:         "Jaeger",
	Prefix:        "jaegertest",
	Version:       Version,
	Module:        toolsModule,
	Package:       "github.com/jaegertracing/jaeger/cmd/jaeger",
	EnvBinary:     EnvBinary,
	EnvAllowBuild: EnvAllowBuild,
	MakeTarget:    "test-jaeger",
	Packages:      2300,
}

// Binary returns the path of a jaeger binary, building it if allowed, and skips the
// test when neither EnvBinary nor EnvAllowBuild is set.
func Binary(t testing.TB) string {
	t.Helper()
	return tool.Binary(t)
}
