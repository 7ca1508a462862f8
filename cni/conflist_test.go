package cni

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

var testEntry = json.RawMessage(`{"type":"switchboard","agentSocket":"/run/switchboard/cni.sock","onAgentUnreachable":"allow"}`)

func compactJSON(t testing.TB, b []byte) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	return buf.String()
}

// listPlugins is a list's plugins, compacted.
func listPlugins(t testing.TB, data []byte) []string {
	t.Helper()
	o, err := parseObject(data)
	if err != nil {
		t.Fatal(err)
	}
	list, err := o.plugins()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range list {
		out = append(out, compactJSON(t, p))
	}
	return out
}

func TestParseObjectRefuses(t *testing.T) {
	for _, in := range []string{`[]`, `{"a":1,"a":2}`, `{"a":1} {}`, `{"a":`, `"x"`, ``} {
		if _, err := parseObject([]byte(in)); err == nil {
			t.Errorf("parseObject(%q) succeeded", in)
		}
	}
}

// TestChainListKeepsOrderAndBytes: keys keep their order, numbers their spelling and
// strings their escapes; only whitespace changes.
func TestChainListKeepsOrderAndBytes(t *testing.T) {
	in := `{"name":"n","cniVersion":"1.0.0","zeta":{"b":1.50,"a":"x<y&z\u00e9"},
	  "plugins":[{"type":"bridge","z":1,"a":[1e3]},{"type":"switchboard","old":true},{"type":"portmap"}]}`
	out, err := chainList([]byte(in), "switchboard", testEntry)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"n","cniVersion":"1.0.0","zeta":{"b":1.50,"a":"x<y&z\u00e9"},` +
		`"plugins":[{"type":"bridge","z":1,"a":[1e3]},{"type":"portmap"},` + string(testEntry) + `]}`
	if got := compactJSON(t, out); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	again, err := chainList(out, "switchboard", testEntry)
	if err != nil || !bytes.Equal(again, out) {
		t.Fatalf("second edit changed the bytes (%v):\n%s\n%s", err, out, again)
	}
}

func TestChainListRefuses(t *testing.T) {
	for _, in := range []string{`{"name":"n"}`, `{"plugins":{}}`, `{"plugins":null}`, `{"plugins":[1]}`, `{"plugins":[{"Type":"x"}]}`} {
		if _, err := chainList([]byte(in), "switchboard", testEntry); err == nil {
			t.Errorf("chainList(%s) succeeded", in)
		}
	}
}

func TestConvertConf(t *testing.T) {
	in := `{"cniVersion":"1.0.0","name":"cbr0","type":"flannel","delegate":{"hairpinMode":true,"isDefaultGateway":true}}`
	out, err := convertConf([]byte(in), "switchboard", testEntry)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"cniVersion":"1.0.0","name":"cbr0","plugins":[` + in + `,` + string(testEntry) + `]}`
	if got := compactJSON(t, out); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	for _, bad := range []string{`{"cniVersion":"1.0.0","type":"flannel"}`, `{"name":"n","type":"switchboard"}`, `{"name":"n"}`} {
		if _, err := convertConf([]byte(bad), "switchboard", testEntry); err == nil {
			t.Errorf("convertConf(%s) succeeded", bad)
		}
	}
}

// FuzzChainList: whatever the input, the edit fails or writes valid JSON in which
// every other plugin survives, in order and byte for byte (bar whitespace), with ours
// last and once; the edit is idempotent, and removing ours leaves the others.
func FuzzChainList(f *testing.F) {
	f.Add([]byte(`{"name":"n","cniVersion":"1.0.0","plugins":[{"type":"calico","mtu":1440},{"type":"portmap","capabilities":{"portMappings":true}}]}`))
	f.Add([]byte(`{"name":"n","plugins":[{"type":"switchboard"},{"type":"bandwidth"}]}`))
	f.Add([]byte(`{"plugins":[{"type":"a","x":"<&>\u2028"}],"name":"n","z":[1.0e10,null]}`))
	f.Add([]byte(`{"plugins":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := chainList(data, "switchboard", testEntry)
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON out:\n%s", out)
		}
		var want []string
		for _, p := range listPlugins(t, data) {
			if typ, _ := pluginType(json.RawMessage(p)); typ != "switchboard" {
				want = append(want, p)
			}
		}
		got := listPlugins(t, out)
		if len(got) != len(want)+1 || got[len(got)-1] != compactJSON(t, testEntry) {
			t.Fatalf("plugins %v, want %v then ours", got, want)
		}
		if strings.Join(got[:len(want)], "\n") != strings.Join(want, "\n") {
			t.Fatalf("other plugins changed:\n got %v\nwant %v", got[:len(want)], want)
		}
		if again, err := chainList(out, "switchboard", testEntry); err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent (%v)", err)
		}
		removed, found, _, err := unchainList(out, "switchboard")
		if err != nil || !found {
			t.Fatalf("unchain: found %v, %v", found, err)
		}
		if rest := listPlugins(t, removed); strings.Join(rest, "\n") != strings.Join(want, "\n") {
			t.Fatalf("after unchain %v, want %v", rest, want)
		}
	})
}
