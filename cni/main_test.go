package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"go.uber.org/goleak"
)

// execMainEnv makes the test binary run Main instead of the tests, so Main is tested
// as the runtime runs it: a process with CNI_* in its environment.
const execMainEnv = "SWITCHBOARD_CNI_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(execMainEnv) == "1" {
		Main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// execMain runs Main in a child process with env and stdin, within a deadline.
func execMain(t *testing.T, stdin []byte, env ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, execMainEnv+"=1")...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("plugin still running after 30s; stderr:\n%s", errOut.String())
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// addEnv is the environment of an ADD (or CHECK) call.
var addEnv = []string{"CNI_CONTAINERID=" + containerID, "CNI_NETNS=" + netnsPath, "CNI_IFNAME=eth0", "CNI_PATH=/opt/cni/bin", "CNI_ARGS=" + podCNIArgs}

func cmdEnv(cmd string) []string { return append([]string{"CNI_COMMAND=" + cmd}, addEnv...) }

// errorObject reads the spec's error object from a failed call's stdout.
func errorObject(t *testing.T, out string) (cniVersion string, e types.Error) {
	t.Helper()
	var obj struct {
		CNIVersion string `json:"cniVersion"`
		types.Error
	}
	if err := json.Unmarshal([]byte(out), &obj); err != nil {
		t.Fatalf("stdout %q: %v", out, err)
	}
	return obj.CNIVersion, obj.Error
}

func TestMainProcessVersion(t *testing.T) {
	out, stderr, code := execMain(t, nil, "CNI_COMMAND=VERSION")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	var v struct {
		CNIVersion        string   `json:"cniVersion"`
		SupportedVersions []string `json:"supportedVersions"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("VERSION output %q: %v", out, err)
	}
	if v.CNIVersion != "1.1.0" || !slices.Equal(v.SupportedVersions, []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}) {
		t.Fatalf("VERSION output %+v", v)
	}
}

// TestMainProcessAdd: the whole path as the runtime drives it, against an agent, at
// the newest version and at 0.3.1, which older flannel and Calico lists still use.
func TestMainProcessAdd(t *testing.T) {
	for v, prev := range map[string]string{"1.1.0": prevResult, "0.3.1": olderPrevResult("0.3.1")} {
		t.Run(v, func(t *testing.T) {
			a, sock := startAgent(t)
			out, stderr, code := execMain(t, chained(t, sock, prev, map[string]any{"cniVersion": v}), cmdEnv("ADD")...)
			if code != 0 {
				t.Fatalf("exit %d, stdout %s, stderr %s", code, out, stderr)
			}
			sameJSON(t, out, prev)
			if len(a.recorded()) != 1 {
				t.Fatalf("agent got %v", a.recorded())
			}
		})
	}
}

// TestMainProcessError: an error is the spec's JSON object on stdout, at the
// configuration's cniVersion, and exit 1.
func TestMainProcessError(t *testing.T) {
	for _, v := range []string{"1.1.0", "0.4.0"} {
		out, stderr, code := execMain(t, netConf(t, map[string]any{"cniVersion": v, "agentSocket": "relative.sock"}), cmdEnv("ADD")...)
		if code != 1 {
			t.Fatalf("exit %d, want 1", code)
		}
		cv, e := errorObject(t, out)
		if cv != v || e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, "agentSocket") {
			t.Fatalf("error object %q %+v", cv, e)
		}
		if !strings.Contains(stderr, "level=WARN") || !strings.Contains(stderr, "code=7") {
			t.Fatalf("stderr %q", stderr)
		}
	}
}

// TestMainProcessRefuses: what skel checks before a command runs, with the plugin's
// versions, and the errors of commands that need their configuration.
func TestMainProcessRefuses(t *testing.T) {
	_, sock := startAgent(t)
	for name, c := range map[string]struct {
		cmd  string
		conf []byte
		code uint
	}{
		"version 0.2.0":       {"ADD", chained(t, sock, prevResult, map[string]any{"cniVersion": "0.2.0"}), types.ErrIncompatibleCNIVersion},
		"no version":          {"ADD", chained(t, sock, prevResult, map[string]any{"cniVersion": nil}), types.ErrIncompatibleCNIVersion},
		"CHECK before 0.4.0":  {"CHECK", chained(t, sock, olderPrevResult("0.3.1"), map[string]any{"cniVersion": "0.3.1"}), types.ErrIncompatibleCNIVersion},
		"GC before 1.1.0":     {"GC", chained(t, sock, "", map[string]any{"cniVersion": "1.0.0"}), types.ErrIncompatibleCNIVersion},
		"STATUS before 1.1.0": {"STATUS", chained(t, sock, "", map[string]any{"cniVersion": "0.4.0"}), types.ErrIncompatibleCNIVersion},
		"ADD unknown key":     {"ADD", chained(t, sock, prevResult, map[string]any{"agentSokcet": "/x"}), types.ErrUnsupportedField},
		"DEL not JSON":        {"DEL", []byte(`{"name":`), types.ErrDecodingFailure},
		"DEL no name":         {"DEL", chained(t, sock, "", map[string]any{"name": nil}), types.ErrInvalidNetworkConfig},
	} {
		t.Run(name, func(t *testing.T) {
			out, _, code := execMain(t, c.conf, cmdEnv(c.cmd)...)
			if _, e := errorObject(t, out); code != 1 || e.Code != c.code {
				t.Fatalf("exit %d, error %+v, want exit 1 and code %d", code, e, c.code)
			}
		})
	}
}

// TestMainProcessDelUnknownKey: DEL with keys the plugin does not know succeeds,
// warning on stderr, and still tells the agent.
func TestMainProcessDelUnknownKey(t *testing.T) {
	a, sock := startAgent(t)
	conf := chained(t, sock, prevResult, map[string]any{"cniVersion": "1.0.0", "newRuntimeKey": true})
	env := []string{"CNI_COMMAND=DEL", "CNI_CONTAINERID=" + containerID, "CNI_IFNAME=eth0", "CNI_PATH=/opt/cni/bin", "CNI_ARGS=" + podCNIArgs}
	out, stderr, code := execMain(t, conf, env...)
	if code != 0 || out != "" {
		t.Fatalf("exit %d, stdout %q, stderr %s", code, out, stderr)
	}
	if !strings.Contains(stderr, "level=WARN") || !strings.Contains(stderr, "newRuntimeKey") {
		t.Fatalf("stderr %q", stderr)
	}
	if len(a.recorded()) != 1 {
		t.Fatalf("agent got %v", a.recorded())
	}
}
