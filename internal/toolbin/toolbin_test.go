package toolbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tinyMain is a tool with no dependencies, so building it needs no network: with
// "sleep" it runs until killed, otherwise it prints its -ldflags stamp and a
// bind error and exits 1.
const tinyMain = `package main

import (
	"fmt"
	"os"
	"time"
)

var stamp = "unset"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "sleep" {
		time.Sleep(time.Hour)
	}
	fmt.Println("stamp=" + stamp)
	fmt.Fprintln(os.Stderr, "listen tcp 127.0.0.1:1: bind: address already in use")
	os.Exit(1)
}
`

// tinyTool writes a tools module holding tinyMain under a temporary main-module
// root, changes into a package directory below it (as go test would) and points
// the user cache at a temporary directory.
func tinyTool(t *testing.T) Tool {
	t.Helper()
	root := t.TempDir()
	mod := filepath.Join(root, "tools", "tiny")
	pkgDir := filepath.Join(root, "internal", "pkg")
	for _, d := range []string{mod, pkgDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"go.mod":  "module example.com/tiny\n\ngo 1.21\n",
		"main.go": tinyMain,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(mod, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Keep the build cache where it was: by default it lives in the user cache
	// directory, which the test moves.
	gocache, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOCACHE: %v", err)
	}
	t.Setenv("GOCACHE", strings.TrimSpace(string(gocache)))
	t.Chdir(pkgDir)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())    // where os.UserCacheDir looks off Linux
	t.Setenv("GOTOOLCHAIN", "local") // never download a toolchain
	return Tool{
		Name:          "tiny",
		Prefix:        "toolbintest",
		Version:       "v0.0.1",
		Module:        "tools/tiny",
		Package:       "example.com/tiny",
		LDFlags:       "-X main.stamp=v0.0.1",
		EnvBinary:     "TOOLBIN_TEST_TINY_BIN",
		EnvAllowBuild: "TOOLBIN_TEST_TINY",
		MakeTarget:    "test-tiny",
		BuildTimeout:  5 * time.Minute,
	}
}

func TestBinarySkipsWithoutOptIn(t *testing.T) {
	tl := Tool{Name: "nothing", EnvBinary: "TOOLBIN_TEST_NONE_BIN", EnvAllowBuild: "TOOLBIN_TEST_NONE", MakeTarget: "test-nothing"}
	t.Setenv(tl.EnvBinary, "")
	t.Setenv(tl.EnvAllowBuild, "")
	var skipped bool
	t.Run("inner", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		tl.Binary(t)
	})
	if !skipped {
		t.Fatal("Binary did not skip with neither variable set")
	}
}

func TestBinaryGiven(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "given")
	if err := os.WriteFile(bin, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	tl := Tool{Name: "given", EnvBinary: "TOOLBIN_TEST_GIVEN_BIN"}
	t.Setenv(tl.EnvBinary, bin)
	if got := tl.Binary(t); got != bin {
		t.Fatalf("Binary = %s, want %s", got, bin)
	}
}

// TestBuildAndRun builds a tiny tool through the same path as the real ones (file
// lock, go build -v with -ldflags in the tools module, rename into the cache), then
// runs it as a child process.
func TestBuildAndRun(t *testing.T) {
	// go test puts its own GOROOT/bin first on the test's PATH.
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("no go command on PATH: %v", err)
	}
	tl := tinyTool(t)
	t.Setenv(tl.EnvBinary, "")
	t.Setenv(tl.EnvAllowBuild, "1")
	bin := tl.Binary(t)
	want, err := tl.CachedPath()
	if err != nil {
		t.Fatal(err)
	}
	if bin != want || filepath.Base(bin) != "tiny-v0.0.1" {
		t.Fatalf("Binary = %s, want %s", bin, want)
	}
	if again := tl.Binary(t); again != bin {
		t.Fatalf("second Binary = %s, want the cached %s", again, bin)
	}

	dir := t.TempDir()
	p, err := StartProcess(Command{Bin: bin, Dir: dir, LogPath: filepath.Join(dir, "tiny.log"), LogTailLines: 1})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !p.Exited() {
		if time.Now().After(deadline) {
			t.Fatal("tiny did not exit")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if p.ExitErr() == nil {
		t.Error("ExitErr = nil, want exit status 1")
	}
	if !p.AddrInUse() {
		t.Errorf("AddrInUse = false; log tail %q", p.LogTail())
	}
	if tail := p.LogTail(); strings.Contains(tail, "stamp") {
		t.Errorf("LogTail(1 line) = %q, want only the last line", tail)
	}
	log, err := os.ReadFile(filepath.Join(dir, "tiny.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "stamp=v0.0.1") {
		t.Errorf("log %q lacks the -ldflags stamp", log)
	}

	sleeper, err := StartProcess(Command{Bin: bin, Args: []string{"sleep"}, LogPath: filepath.Join(dir, "sleep.log")})
	if err != nil {
		t.Fatal(err)
	}
	if sleeper.Pid() <= 0 {
		t.Errorf("Pid = %d", sleeper.Pid())
	}
	sleeper.Stop()
	if !sleeper.Exited() {
		t.Error("Stop returned with the process still running")
	}
	if sleeper.AddrInUse() {
		t.Error("AddrInUse = true for a killed process")
	}
	sleeper.Stop() // a second Stop is a no-op
}
