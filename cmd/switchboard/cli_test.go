package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/internal/cloudmaptest"
	"github.com/switchboard-mesh/switchboard/internal/dynamotest"
	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
)

// run executes the CLI in-process and returns stdout, stderr and the exit code main
// would use.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := newRootCmd(&out, &errOut)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	code := 0
	if err != nil {
		var msg string
		msg, code = report(err)
		errOut.WriteString(msg)
	}
	return out.String(), errOut.String(), code
}

func TestVersion(t *testing.T) {
	out, _, code := run(t, "version")
	if code != 0 || !strings.HasPrefix(out, "switchboard ") {
		t.Fatalf("version: %q, exit %d", out, code)
	}
}

func TestCompletion(t *testing.T) {
	out, _, code := run(t, "completion", "bash")
	if code != 0 || !strings.Contains(out, "bash completion") {
		t.Fatalf("completion bash: exit %d, %d bytes", code, len(out))
	}
}

func TestRegistryExitCodes(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		// The memory backend dies with the command: a one-shot write to it would keep nothing.
		{"register to memory", []string{"registry", "register", "--registry-backend", "memory", "--cluster", "prod", "--service", "web", "--protocol", "http", "--address", "10.0.0.2", "--port", "8080", "--annotation", "team=edge", "--ttl", "30s"}, 2, "switchboard dev"},
		{"invalid service", []string{"registry", "register", "--registry-backend", "memory", "--cluster", "prod", "--service", "9web", "--protocol", "http", "--address", "10.0.0.2"}, 2, "service"},
		{"bad ttl", []string{"registry", "register", "--registry-backend", "memory", "--cluster", "prod", "--service", "web", "--protocol", "http", "--address", "10.0.0.2", "--ttl", "soon"}, 2, "--ttl"},
		{"bad annotation", []string{"registry", "register", "--registry-backend", "memory", "--cluster", "prod", "--service", "web", "--protocol", "http", "--address", "10.0.0.2", "--annotation", "novalue"}, 2, "--annotation"},
		{"missing flags", []string{"registry", "register", "--registry-backend", "memory"}, 2, "required flag"},
		{"unknown backend", []string{"registry", "lookup", "--registry-backend", "nope"}, 2, "unknown registry backend"},
		{"bad output", []string{"registry", "lookup", "--registry-backend", "memory", "-o", "xml"}, 2, "--output"},
		{"bad filter", []string{"registry", "lookup", "--registry-backend", "memory", "--address", "host"}, 2, "address"},
		{"lookup ok", []string{"registry", "lookup", "--registry-backend", "memory", "-o", "json"}, 0, ""},
		{"lookup without a time limit", []string{"registry", "lookup", "--registry-backend", "memory", "--timeout", "0"}, 0, ""},
		{"unregister from memory", []string{"registry", "unregister", "--registry-backend", "memory", "--cluster", "prod", "--service", "web", "--protocol", "http", "--address", "10.0.0.2", "--port", "8080"}, 2, "switchboard dev"},
		{"init without storage", []string{"registry", "init", "--registry-backend", "memory"}, 1, "no storage"},
		{"bad log level", []string{"--log-level", "loud", "version"}, 2, "--log-level"},
		{"unknown command", []string{"nope"}, 2, "unknown command"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := run(t, c.args...)
			if code != c.code || !strings.Contains(errOut, c.msg) {
				t.Fatalf("exit %d (want %d), stderr %q (want it to contain %q), stdout %q", code, c.code, errOut, c.msg, out)
			}
		})
	}
}

func TestLookupJSONIsAList(t *testing.T) {
	out, _, code := run(t, "registry", "lookup", "--registry-backend", "memory", "-o", "json")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("empty lookup printed %q", out)
	}
}

func TestRegistryCommandsAgainstDynamoDB(t *testing.T) {
	srv := dynamotest.Start(t)
	dynamotest.SetEnv(t)
	flags := []string{"--registry-backend", "dynamodb", "--dynamodb-endpoint", srv.URL, "--dynamodb-table", "cli-test"}
	if _, errOut, code := run(t, append([]string{"registry", "init"}, flags...)...); code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut)
	}
	reg := append([]string{"registry", "register", "--cluster", "prod", "--service", "web", "--protocol", "http", "--address", "10.0.0.2", "--port", "8080"}, flags...)
	if _, errOut, code := run(t, reg...); code != 0 {
		t.Fatalf("register: exit %d: %s", code, errOut)
	}
	out, errOut, code := run(t, append([]string{"registry", "lookup", "--service", "web", "-o", "json"}, flags...)...)
	if code != 0 || !strings.Contains(out, `"address": "10.0.0.2"`) {
		t.Fatalf("lookup: exit %d, out %q, err %q", code, out, errOut)
	}
	out, errOut, code = run(t, append([]string{"registry", "lookup", "--service", "web", "-o", "yaml"}, flags...)...)
	if code != 0 || !strings.Contains(out, "- cluster: prod\n") || !strings.Contains(out, "  address: 10.0.0.2\n") || !strings.Contains(out, "  port: 8080\n") {
		t.Fatalf("lookup -o yaml: exit %d, out %q, err %q", code, out, errOut)
	}
	_, errOut, code = run(t, append([]string{"registry", "watch"}, flags...)...)
	if code != 2 || !strings.Contains(errOut, "no change feed") {
		t.Fatalf("watch on a polled backend: exit %d, %q", code, errOut)
	}
	// A flag of another backend is refused, not ignored.
	_, errOut, code = run(t, "registry", "lookup", "--registry-backend", "memory", "--aws-region", "eu-west-1")
	if code != 2 || !strings.Contains(errOut, "no parameter") {
		t.Fatalf("foreign flag: exit %d, %q", code, errOut)
	}
}

func TestRegistryCommandsAgainstEtcd(t *testing.T) {
	cluster := embedetcd.New(t, embedetcd.Options{})
	flags := []string{"--registry-backend", "etcd", "--etcd-endpoints", strings.Join(cluster.Endpoints(), ","), "--etcd-prefix", "/cli-test/"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// watch runs until interrupted: start it first, then register and look up.
	watchOut := &syncbuf.Buffer{}
	watch := newRootCmd(watchOut, watchOut)
	watch.SetArgs(append([]string{"registry", "watch", "--service", "web"}, flags...))
	watchDone := make(chan error, 1)
	wctx, stopWatch := context.WithCancel(ctx)
	go func() { watchDone <- watch.ExecuteContext(wctx) }()
	waitFor(t, watchOut, `"type":"synced"`)

	reg := append([]string{"registry", "register", "--cluster", "prod", "--service", "web", "--protocol", "http", "--address", "2001:db8::5", "--port", "8080", "--ttl", "never"}, flags...)
	if _, errOut, code := run(t, reg...); code != 0 {
		t.Fatalf("register: exit %d: %s", code, errOut)
	}
	out, _, code := run(t, append([]string{"registry", "lookup", "--service", "web"}, flags...)...)
	if code != 0 || !strings.Contains(out, "2001:db8::5") || !strings.Contains(out, "never") {
		t.Fatalf("lookup: exit %d, %q", code, out)
	}
	waitFor(t, watchOut, `"type":"added"`)
	if _, _, code := run(t, append([]string{"registry", "unregister", "--cluster", "prod", "--service", "web", "--protocol", "http", "--address", "2001:db8::5", "--port", "8080"}, flags...)...); code != 0 {
		t.Fatal("unregister failed")
	}
	waitFor(t, watchOut, `"type":"removed"`)
	stopWatch()
	if err := <-watchDone; err != nil {
		t.Fatalf("interrupted watch returned %v", err)
	}
}

func TestRegistryCommandsAgainstCloudMap(t *testing.T) {
	srv := cloudmaptest.NewServer(cloudmaptest.Options{})
	defer srv.Close()
	cloudmaptest.SetCredentialsEnv(t)
	flags := []string{"--registry-backend", "cloudmap", "--cloudmap-endpoint", srv.URL(), "--cloudmap-namespace", "cli-test"}
	if _, errOut, code := run(t, append([]string{"registry", "init"}, flags...)...); code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut)
	}
	reg := append([]string{"registry", "register", "--cluster", "prod", "--service", "web", "--protocol", "http", "--address", "10.0.0.7", "--port", "80", "--ttl", "60s"}, flags...)
	if _, errOut, code := run(t, reg...); code != 0 {
		t.Fatalf("register: exit %d: %s", code, errOut)
	}
	out, errOut, code := run(t, append([]string{"registry", "lookup", "--service", "web"}, flags...)...)
	if code != 0 || !strings.Contains(out, "10.0.0.7") || !strings.Contains(out, "1m0s") {
		t.Fatalf("lookup: exit %d, out %q, err %q", code, out, errOut)
	}
	_, errOut, code = run(t, append([]string{"registry", "watch"}, flags...)...)
	if code != 2 || !strings.Contains(errOut, "no change feed") {
		t.Fatalf("watch on a polled backend: exit %d, %q", code, errOut)
	}
}

// --help puts a command's own flags first and the many backend flags in a section of
// their own, the chosen backend first.
func TestHelpSeparatesBackendFlags(t *testing.T) {
	out, _, code := run(t, "registry", "lookup", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	own, backend, ok := strings.Cut(out, "Registry backend flags")
	if !ok {
		t.Fatalf("no backend section:\n%s", out)
	}
	if !strings.Contains(own, "--service") || strings.Contains(own, "--nats-url") || strings.Contains(own, "--registry-backend") {
		t.Fatalf("command flags section:\n%s", own)
	}
	lines := strings.Split(strings.TrimSpace(backend), "\n")
	if len(lines) < 3 || !strings.Contains(lines[1], "--registry-backend") || !strings.Contains(backend, "--etcd-endpoints") {
		t.Fatalf("backend section:\n%s", backend)
	}
}

// Backend flags show their type in --help and check their value as it is parsed.
func TestBackendFlagsAreTyped(t *testing.T) {
	out, _, code := run(t, "registry", "init", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"--replicas int ", "--marker-ttl duration ", "--etcd-dial-timeout duration ", "--etcd-max-txn-ops int ", "--nats-url string "} {
		if !strings.Contains(out, want) {
			t.Errorf("--help does not show %q", want)
		}
	}
	// A bool flag takes no value in --help (a bare --create-stream switches it on).
	if !regexp.MustCompile(`(?m)^\s+--create-stream\s{2,}`).MatchString(out) {
		t.Errorf("--create-stream is not shown as a switch:\n%s", out)
	}
	for _, c := range []struct{ flag, value, msg string }{
		{"--marker-ttl", "soon", "duration"},
		{"--create-stream", "maybe", "true or false"},
		{"--etcd-max-txn-ops", "1e+06", "whole number"},
	} {
		_, errOut, code := run(t, "registry", "init", c.flag+"="+c.value)
		if code != 2 || !strings.Contains(errOut, c.flag) || !strings.Contains(errOut, c.msg) {
			t.Errorf("%s=%s: exit %d, %q", c.flag, c.value, code, errOut)
		}
	}
}

// Backend names complete in the shell.
func TestBackendNamesComplete(t *testing.T) {
	out, _, code := run(t, "__complete", "registry", "lookup", "--registry-backend", "")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, be := range []string{"jetstream", "etcd", "dynamodb", "registrar"} {
		if !strings.Contains(out, be+"\n") {
			t.Errorf("completion of --registry-backend lacks %s:\n%s", be, out)
		}
	}
}
