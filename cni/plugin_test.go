package cni

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cniv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/cni/v1"
)

func wantCalls(t *testing.T, a *fakeAgent, want ...proto.Message) {
	t.Helper()
	got := a.recorded()
	if len(got) != len(want) {
		t.Fatalf("agent got %d calls %v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("call %d: got %v, want %v", i, got[i], want[i])
		}
	}
}

var testRef = &cniv1.AttachmentRef{Network: "k8s-pod-network", ContainerId: containerID, Ifname: "eth0"}

func TestAddRecordsPodAndPassesPrevResultThrough(t *testing.T) {
	a, sock := startAgent(t)
	out, e := runCmd(t, "ADD", chained(t, sock, prevResult, nil), podCNIArgs)
	wantOK(t, e)
	sameJSON(t, out, prevResult)
	wantCalls(t, a, &cniv1.AddRequest{
		Ref:   testRef,
		Pod:   &cniv1.Pod{Namespace: "shop", Name: "web-0", Uid: "uid-1"},
		Netns: netnsPath,
		Ips:   []string{"10.1.0.5", "fd00::5"}, // not the bridge's 10.1.0.1 on the host
	})
}

// olderPrevResult is a main plugin's result at an older cniVersion, as flannel's
// bridge returns it at 0.3.1: ips carry a version, and the gateway's address is on
// the host's bridge.
func olderPrevResult(v string) string {
	return `{"cniVersion":"` + v + `","interfaces":[{"name":"cni0","mac":"0a:58:0a:01:00:01"},
	  {"name":"eth0","mac":"0a:58:0a:01:00:07","sandbox":"/var/run/netns/cni-1"}],
	  "ips":[{"version":"4","address":"10.1.0.7/24","gateway":"10.1.0.1","interface":1},
	    {"version":"4","address":"10.1.0.1/24","interface":0}],
	  "routes":[{"dst":"0.0.0.0/0","gw":"10.1.0.1"}],"dns":{"nameservers":["10.96.0.10"]}}`
}

// TestAddAtOlderVersions: a list at an older version gets its result back unchanged,
// at that version.
func TestAddAtOlderVersions(t *testing.T) {
	for _, v := range []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0"} {
		t.Run(v, func(t *testing.T) {
			a, sock := startAgent(t)
			prev := olderPrevResult(v)
			if v == "1.0.0" {
				prev = strings.ReplaceAll(prev, `"version":"4",`, "")
			}
			out, e := runCmd(t, "ADD", chained(t, sock, prev, map[string]any{"cniVersion": v}), podCNIArgs)
			wantOK(t, e)
			sameJSON(t, out, prev)
			if got := a.recorded(); len(got) != 1 || !slices.Equal(got[0].(*cniv1.AddRequest).Ips, []string{"10.1.0.7"}) {
				t.Fatalf("agent got %v", got)
			}
		})
	}
}

// TestCheckAtOlderVersion: CHECK reads a 0.4.0 prevResult.
func TestCheckAtOlderVersion(t *testing.T) {
	a, sock := startAgent(t)
	_, e := runCmd(t, "CHECK", chained(t, sock, olderPrevResult("0.4.0"), map[string]any{"cniVersion": "0.4.0"}), podCNIArgs)
	wantOK(t, e)
	wantCalls(t, a, &cniv1.CheckRequest{Ref: testRef, Ips: []string{"10.1.0.7"}})
}

func TestAddWithoutPodArgsPassesThrough(t *testing.T) {
	a, sock := startAgent(t)
	out, e := runCmd(t, "ADD", chained(t, sock, prevResult, nil), "IgnoreUnknown=1")
	wantOK(t, e)
	sameJSON(t, out, prevResult)
	wantCalls(t, a)
}

func TestAddWithoutPrevResult(t *testing.T) {
	a, sock := startAgent(t)
	out, e := runCmd(t, "ADD", chained(t, sock, "", nil), podCNIArgs)
	wantCode(t, e, types.ErrInvalidNetworkConfig)
	if !strings.Contains(e.Msg, "chained after a plugin that assigns addresses") || out != "" {
		t.Fatalf("msg %q, stdout %q", e.Msg, out)
	}
	wantCalls(t, a)
}

func TestAddPrevResultWithoutIPs(t *testing.T) {
	a, sock := startAgent(t)
	prev := `{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","sandbox":"/var/run/netns/cni-1"}]}`
	out, e := runCmd(t, "ADD", chained(t, sock, prev, nil), podCNIArgs)
	wantOK(t, e)
	sameJSON(t, out, prev)
	wantCalls(t, a)
}

func TestAddAgentUnreachable(t *testing.T) {
	sock := missingSocket(t)
	t.Run("allow", func(t *testing.T) {
		out, e := runCmd(t, "ADD", chained(t, sock, prevResult, nil), podCNIArgs)
		wantOK(t, e)
		sameJSON(t, out, prevResult)
	})
	t.Run("fail", func(t *testing.T) {
		out, e := runCmd(t, "ADD", chained(t, sock, prevResult, map[string]any{"onAgentUnreachable": "fail"}), podCNIArgs)
		wantCode(t, e, types.ErrTryAgainLater)
		if !strings.Contains(e.Msg, sock) || out != "" {
			t.Fatalf("msg %q does not name the socket, or stdout %q is not empty", e.Msg, out)
		}
	})
}

// TestAddAgentHangs: an agent that does not answer costs the pod at most timeout.
func TestAddAgentHangs(t *testing.T) {
	a, sock := startAgent(t)
	a.setHang("Add")
	start := time.Now()
	_, e := runCmd(t, "ADD", chained(t, sock, prevResult, map[string]any{"onAgentUnreachable": "fail", "timeout": "200ms"}), podCNIArgs)
	wantCode(t, e, types.ErrTryAgainLater)
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("ADD took %s with a 200ms timeout", took)
	}
}

func TestAddInvalidArgument(t *testing.T) {
	a, sock := startAgent(t)
	a.setErr("Add", status.Error(codes.InvalidArgument, "pod name: too long"))
	for _, policy := range []string{"allow", "fail"} {
		out, e := runCmd(t, "ADD", chained(t, sock, prevResult, map[string]any{"onAgentUnreachable": policy}), podCNIArgs)
		wantCode(t, e, types.ErrInvalidNetworkConfig)
		if !strings.Contains(e.Msg, "pod name: too long") || strings.Contains(e.Msg, "rpc error") || out != "" {
			t.Fatalf("%s: msg %q, stdout %q", policy, e.Msg, out)
		}
	}
}

// TestAddAgentFails: an agent that answers but cannot record is treated like one
// that cannot be reached.
func TestAddAgentFails(t *testing.T) {
	a, sock := startAgent(t)
	a.setErr("Add", status.Error(codes.Internal, "disk full"))
	_, e := runCmd(t, "ADD", chained(t, sock, prevResult, nil), podCNIArgs)
	wantOK(t, e)
	_, e = runCmd(t, "ADD", chained(t, sock, prevResult, map[string]any{"onAgentUnreachable": "fail"}), podCNIArgs)
	wantCode(t, e, types.ErrTryAgainLater)
}

func TestAddBadCNIArgs(t *testing.T) {
	_, sock := startAgent(t)
	_, e := runCmd(t, "ADD", chained(t, sock, prevResult, nil), "K8S_POD_NAME=web;junk")
	wantCode(t, e, types.ErrInvalidEnvironmentVariables)
}

func TestDel(t *testing.T) {
	a, sock := startAgent(t)
	for range 2 { // DEL is idempotent: the second finds nothing and succeeds too
		out, e := runCmd(t, "DEL", chained(t, sock, "", nil), podCNIArgs)
		wantOK(t, e)
		if out != "" {
			t.Fatalf("DEL printed %q", out)
		}
	}
	del := &cniv1.DelRequest{Ref: testRef, Pod: &cniv1.Pod{Namespace: "shop", Name: "web-0", Uid: "uid-1"}}
	wantCalls(t, a, del, del)
}

func TestDelSucceedsWhateverTheAgentSays(t *testing.T) {
	for _, policy := range []string{"allow", "fail"} {
		out, e := runCmd(t, "DEL", chained(t, missingSocket(t), prevResult, map[string]any{"onAgentUnreachable": policy}), podCNIArgs)
		wantOK(t, e)
		if out != "" {
			t.Fatalf("DEL printed %q", out)
		}
	}
	a, sock := startAgent(t)
	for _, err := range []error{status.Error(codes.NotFound, "no such attachment"), status.Error(codes.Internal, "disk")} {
		a.setErr("Del", err)
		_, e := runCmd(t, "DEL", chained(t, sock, "", map[string]any{"onAgentUnreachable": "fail"}), "garbage")
		wantOK(t, e)
	}
}

func TestCheck(t *testing.T) {
	a, sock := startAgent(t)
	conf := chained(t, sock, prevResult, map[string]any{"onAgentUnreachable": "fail"})
	out, e := runCmd(t, "CHECK", conf, podCNIArgs)
	wantOK(t, e)
	if out != "" {
		t.Fatalf("CHECK printed %q", out)
	}
	wantCalls(t, a, &cniv1.CheckRequest{Ref: testRef, Ips: []string{"10.1.0.5", "fd00::5"}})

	a.setErr("Check", status.Error(codes.NotFound, "not recorded"))
	_, e = runCmd(t, "CHECK", conf, podCNIArgs)
	wantCode(t, e, types.ErrUnknownContainer)

	a.setErr("Check", status.Error(codes.FailedPrecondition, "recorded with 10.1.0.9"))
	_, e = runCmd(t, "CHECK", conf, podCNIArgs)
	wantCode(t, e, types.ErrInternal)
	if !strings.Contains(e.Msg, "recorded with 10.1.0.9") {
		t.Fatalf("msg %q", e.Msg)
	}
}

func TestCheckNeedsPrevResult(t *testing.T) {
	_, sock := startAgent(t)
	_, e := runCmd(t, "CHECK", chained(t, sock, "", nil), podCNIArgs)
	wantCode(t, e, types.ErrInvalidNetworkConfig)
}

func TestCheckNotAPod(t *testing.T) {
	a, sock := startAgent(t)
	_, e := runCmd(t, "CHECK", chained(t, sock, prevResult, nil), "")
	wantOK(t, e)
	wantCalls(t, a)
}

func TestCheckAgentUnreachable(t *testing.T) {
	sock := missingSocket(t)
	_, e := runCmd(t, "CHECK", chained(t, sock, prevResult, nil), podCNIArgs)
	wantOK(t, e)
	_, e = runCmd(t, "CHECK", chained(t, sock, prevResult, map[string]any{"onAgentUnreachable": "fail"}), podCNIArgs)
	wantCode(t, e, types.ErrTryAgainLater)
}

func TestGCForwardsValidAttachments(t *testing.T) {
	a, sock := startAgent(t)
	valid := []map[string]string{{"containerID": "aaa", "ifname": "eth0"}, {"containerID": "bbb", "ifname": "net1"}}
	// libcni sends the list under both keys.
	out, e := runCmd(t, "GC", chained(t, sock, "", map[string]any{"cni.dev/valid-attachments": valid, "cni.dev/attachments": valid}), "")
	wantOK(t, e)
	if out != "" {
		t.Fatalf("GC printed %q", out)
	}
	_, e = runCmd(t, "GC", chained(t, sock, "", map[string]any{"cni.dev/valid-attachments": []any{}}), "")
	wantOK(t, e)
	wantCalls(t, a,
		&cniv1.GCRequest{Network: "k8s-pod-network", Valid: []*cniv1.AttachmentRef{
			{Network: "k8s-pod-network", ContainerId: "aaa", Ifname: "eth0"},
			{Network: "k8s-pod-network", ContainerId: "bbb", Ifname: "net1"},
		}},
		&cniv1.GCRequest{Network: "k8s-pod-network"}, // an empty list: nothing is valid
	)
}

// TestGCWithoutListIsSkipped: no list is not an empty list; the agent is not asked
// to forget everything.
func TestGCWithoutListIsSkipped(t *testing.T) {
	a, sock := startAgent(t)
	_, e := runCmd(t, "GC", chained(t, sock, "", nil), "")
	wantOK(t, e)
	wantCalls(t, a)
}

func TestGCAgentUnreachable(t *testing.T) {
	conf := chained(t, missingSocket(t), "", map[string]any{"cni.dev/valid-attachments": []any{}})
	_, e := runCmd(t, "GC", conf, "")
	wantCode(t, e, types.ErrTryAgainLater)
}

func TestStatus(t *testing.T) {
	a, sock := startAgent(t)
	_, e := runCmd(t, "STATUS", chained(t, sock, "", map[string]any{"onAgentUnreachable": "fail"}), "")
	wantOK(t, e)
	wantCalls(t, a, &cniv1.StatusRequest{})

	gone := missingSocket(t)
	_, e = runCmd(t, "STATUS", chained(t, gone, "", map[string]any{"onAgentUnreachable": "fail"}), "")
	wantCode(t, e, types.ErrPluginNotAvailable)
	if !strings.Contains(e.Msg, gone) {
		t.Fatalf("msg %q does not name the socket", e.Msg)
	}
	_, e = runCmd(t, "STATUS", chained(t, gone, "", nil), "")
	wantOK(t, e)
}

// TestUnknownKeys: a key the plugin does not know is refused, naming it, except on
// DEL, which ignores it with a warning so that the pod can always be torn down.
func TestUnknownKeys(t *testing.T) {
	a, sock := startAgent(t)
	kv := map[string]any{"agentSokcet": "/x", "cni.dev/valid-attachments": []any{}}
	for _, cmd := range []string{"ADD", "CHECK", "GC", "STATUS"} {
		_, e := runCmd(t, cmd, chained(t, sock, prevResult, kv), podCNIArgs)
		wantCode(t, e, types.ErrUnsupportedField)
		if !strings.Contains(e.Msg, `"agentSokcet"`) {
			t.Fatalf("%s: msg %q does not name the key", cmd, e.Msg)
		}
	}
	wantCalls(t, a)

	var logs bytes.Buffer
	p := &Plugin{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	// "Name" is unknown too, and must not stand in for name (encoding/json matches
	// keys case-insensitively).
	conf := chained(t, sock, prevResult, map[string]any{"agentSokcet": "/x", "Name": "other", "zzz": map[string]any{}})
	if err := p.Del(&skel.CmdArgs{ContainerID: containerID, IfName: "eth0", Args: podCNIArgs, StdinData: conf}); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "ignored=\"[Name agentSokcet zzz]\"") {
		t.Fatalf("DEL logged %q", logs.String())
	}
	wantCalls(t, a, &cniv1.DelRequest{Ref: testRef, Pod: &cniv1.Pod{Namespace: "shop", Name: "web-0", Uid: "uid-1"}})
}

// TestDelBadConfig: DEL refuses only a configuration it cannot read at all; bad
// values of its own keys and a prevResult that does not decode leave the defaults, so
// that the pod can be torn down.
func TestDelBadConfig(t *testing.T) {
	a, sock := startAgent(t)
	_, e := runCmd(t, "DEL", []byte(`{"name":`), podCNIArgs)
	wantCode(t, e, types.ErrDecodingFailure)
	var logs bytes.Buffer
	p := &Plugin{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	conf := chained(t, sock, "", map[string]any{"unknown": 1, "timeout": "soon", "onAgentUnreachable": "maybe",
		"prevResult": map[string]any{"ips": "not a list"}})
	if err := p.Del(&skel.CmdArgs{ContainerID: containerID, IfName: "eth0", Args: podCNIArgs, StdinData: conf}); err != nil {
		t.Fatalf("DEL with bad values: %v", err)
	}
	for _, want := range []string{"level=WARN", "unknown", "timeout", "onAgentUnreachable"} {
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("DEL logged %q, want it to name %q", logs.String(), want)
		}
	}
	wantCalls(t, a, &cniv1.DelRequest{Ref: testRef, Pod: &cniv1.Pod{Namespace: "shop", Name: "web-0", Uid: "uid-1"}})
}
