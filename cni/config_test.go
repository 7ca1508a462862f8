package cni

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// netConf is a plugin configuration as the runtime would send it, with kv set on top
// of a minimal one; a nil value removes the key.
func netConf(t testing.TB, kv map[string]any) []byte {
	t.Helper()
	m := map[string]any{"cniVersion": "1.1.0", "name": "k8s-pod-network", "type": "switchboard"}
	for k, v := range kv {
		if v == nil {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParseConfigDefaults(t *testing.T) {
	cfg, err := ParseConfig(netConf(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AgentSocket != DefaultAgentSocket || cfg.OnAgentUnreachable != PolicyAllow || cfg.Timeout != 2*time.Second {
		t.Fatalf("defaults: %+v", cfg)
	}
	if cfg.Net.Name != "k8s-pod-network" || cfg.Net.PrevResult != nil || cfg.HasValidAttachments {
		t.Fatalf("standard keys: %+v", cfg.Net)
	}
}

func TestParseConfigOwnKeys(t *testing.T) {
	cfg, err := ParseConfig(netConf(t, map[string]any{"agentSocket": "/var/run/sb.sock", "onAgentUnreachable": "fail", "timeout": "750ms"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AgentSocket != "/var/run/sb.sock" || cfg.OnAgentUnreachable != PolicyFail || cfg.Timeout != 750*time.Millisecond {
		t.Fatalf("got %+v", cfg)
	}
}

// TestParseConfigStandardKeys: every key the spec and libcni put in a plugin's
// configuration is accepted, so chaining never fails on the runtime's own keys.
func TestParseConfigStandardKeys(t *testing.T) {
	cfg, err := ParseConfig(netConf(t, map[string]any{
		"cniVersions":               []string{"1.0.0", "1.1.0"},
		"capabilities":              map[string]bool{"portMappings": true},
		"runtimeConfig":             map[string]any{"portMappings": []any{}},
		"args":                      map[string]any{"cni": map[string]any{"x": 1}},
		"ipam":                      map[string]any{},
		"dns":                       map[string]any{"nameservers": []string{"10.96.0.10"}},
		"disableCheck":              true,
		"disableGC":                 "false",
		"cni.dev/valid-attachments": []map[string]string{{"containerID": "a", "ifname": "eth0"}},
		"cni.dev/attachments":       []map[string]string{{"containerID": "a", "ifname": "eth0"}},
		"prevResult":                map[string]any{"cniVersion": "1.1.0", "ips": []any{map[string]any{"address": "10.1.0.5/24"}}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.HasValidAttachments || len(cfg.Net.ValidAttachments) != 1 || cfg.Net.PrevResult == nil {
		t.Fatalf("got %+v", cfg)
	}
}

// TestParseConfigOldAttachmentsKey: a runtime that sends only the older GC key is
// understood.
func TestParseConfigOldAttachmentsKey(t *testing.T) {
	cfg, err := ParseConfig(netConf(t, map[string]any{"cni.dev/attachments": []map[string]string{{"containerID": "a", "ifname": "eth0"}}}))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.HasValidAttachments || len(cfg.Net.ValidAttachments) != 1 || cfg.Net.ValidAttachments[0].ContainerID != "a" {
		t.Fatalf("got %+v", cfg)
	}
}

func TestParseConfigErrors(t *testing.T) {
	for name, c := range map[string]struct {
		data []byte
		code uint
		want []string // substrings of the message
	}{
		"unknown key":          {netConf(t, map[string]any{"agentsocket": "/x"}), types.ErrUnsupportedField, []string{`"agentsocket"`}},
		"two unknown keys":     {netConf(t, map[string]any{"b": 1, "a": 2}), types.ErrUnsupportedField, []string{`"a", "b"`}},
		"socket relative":      {netConf(t, map[string]any{"agentSocket": "run/cni.sock"}), types.ErrInvalidNetworkConfig, []string{"agentSocket", `"run/cni.sock"`, "absolute"}},
		"socket not a string":  {netConf(t, map[string]any{"agentSocket": 7}), types.ErrInvalidNetworkConfig, []string{"agentSocket 7", "string"}},
		"socket too long":      {netConf(t, map[string]any{"agentSocket": "/" + strings.Repeat("s", 200)}), types.ErrInvalidNetworkConfig, []string{"agentSocket", "longer"}},
		"policy":               {netConf(t, map[string]any{"onAgentUnreachable": "ignore"}), types.ErrInvalidNetworkConfig, []string{"onAgentUnreachable", `"ignore"`}},
		"timeout not duration": {netConf(t, map[string]any{"timeout": "soon"}), types.ErrInvalidNetworkConfig, []string{"timeout", `"soon"`}},
		"timeout number":       {netConf(t, map[string]any{"timeout": 2}), types.ErrInvalidNetworkConfig, []string{"timeout 2"}},
		"timeout zero":         {netConf(t, map[string]any{"timeout": "0s"}), types.ErrInvalidNetworkConfig, []string{"timeout", `"0s"`, "positive"}},
		"timeout negative":     {netConf(t, map[string]any{"timeout": "-1s"}), types.ErrInvalidNetworkConfig, []string{"timeout", "positive"}},
		"timeout too long":     {netConf(t, map[string]any{"timeout": "61s"}), types.ErrInvalidNetworkConfig, []string{"timeout", `"61s"`, "at most 1m0s"}},
		"name missing":         {netConf(t, map[string]any{"name": nil}), types.ErrInvalidNetworkConfig, []string{"name"}},
		"name bad":             {netConf(t, map[string]any{"name": "a b"}), types.ErrInvalidNetworkConfig, []string{"name", `"a b"`}},
		"name not a string":    {netConf(t, map[string]any{"name": 5}), types.ErrInvalidNetworkConfig, []string{"name 5", "a string"}},
		"ipam not an object":   {netConf(t, map[string]any{"ipam": "host-local"}), types.ErrInvalidNetworkConfig, []string{"ipam", "an object"}},
		"prevResult bad":       {netConf(t, map[string]any{"prevResult": map[string]any{"ips": "x"}}), types.ErrDecodingFailure, []string{"prevResult"}},
		"not JSON":             {[]byte(`{"name":`), types.ErrDecodingFailure, []string{"decode"}},
		"not an object":        {[]byte(`[1]`), types.ErrDecodingFailure, []string{"decode"}},
		"null":                 {[]byte(`null`), types.ErrDecodingFailure, []string{"not a JSON object"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseConfig(c.data)
			e, ok := err.(*types.Error)
			if !ok {
				t.Fatalf("ParseConfig(%s) = %v, want a *types.Error", c.data, err)
			}
			if e.Code != c.code {
				t.Errorf("code %d, want %d (%v)", e.Code, c.code, e)
			}
			for _, w := range c.want {
				if !strings.Contains(e.Msg, w) {
					t.Errorf("message %q lacks %q", e.Msg, w)
				}
			}
		})
	}
}

// FuzzParseConfig: any input parses or fails with a CNI error, and what parses has
// values within bounds.
func FuzzParseConfig(f *testing.F) {
	f.Add(netConf(f, nil))
	f.Add(netConf(f, map[string]any{"agentSocket": "/run/x.sock", "onAgentUnreachable": "fail", "timeout": "1m"}))
	f.Add(netConf(f, map[string]any{"prevResult": map[string]any{"cniVersion": "1.1.0", "ips": []any{map[string]any{"address": "10.1.0.5/24", "interface": 0}}}}))
	f.Add(netConf(f, map[string]any{"cniVersion": "0.4.0", "prevResult": map[string]any{"ips": []any{map[string]any{"version": "4", "address": "10.1.0.5/24"}}}}))
	f.Add([]byte(`{"name":"n","cni.dev/attachments":[{"containerID":"a","ifname":"b"}]}`))
	f.Add([]byte(`{"name":"n","timeout":"1h"}`))
	f.Add([]byte(`{"name":"n","Name":"m","newKey":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		strict, err := ParseConfig(data)
		lenient, unknown, lerr := parseConfig(data, false)
		for _, err := range []error{err, lerr} {
			if _, ok := err.(*types.Error); err != nil && !ok {
				t.Fatalf("error %T %v is not a *types.Error", err, err)
			}
		}
		if err == nil && (lerr != nil || len(unknown) > 0 || !reflect.DeepEqual(strict, lenient)) {
			t.Fatalf("DEL reads %q differently: %+v %v %v, not %+v", data, lenient, unknown, lerr, strict)
		}
		if lerr != nil {
			return
		}
		cfg := lenient
		if cfg.Timeout <= 0 || cfg.Timeout > MaxTimeout || checkSocket(cfg.AgentSocket) != nil || cfg.Net.Name == "" {
			t.Fatalf("accepted out-of-bounds config %+v from %q", cfg, data)
		}
		if _, err := ParsePolicy(string(cfg.OnAgentUnreachable)); err != nil {
			t.Fatalf("accepted policy %q", cfg.OnAgentUnreachable)
		}
	})
}
