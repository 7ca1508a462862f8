package manifest

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/agent/check"
	"github.com/switchboard-mesh/switchboard/endpoint"
)

const full = `
entries:
  - cluster: prod
    service: web
    protocol: http
    address: 2001:DB8::0:1
    port: 8080
    node: node-1
    weight: 10
    ttl: 30s
    annotations:
      prometheus.io/scrape: true
      team: edge
    checks:
      - http: http://127.0.0.1:8080/healthz
        expect_status: 200
        expect_body: ok
        interval: 5s
        timeout: 1s
        rise: 2
        fall: 3
      - tcp: 127.0.0.1:8080
      - grpc: "[::1]:9090"
        grpc_service: web
      - exec: [/usr/bin/check, --quick]
  - cluster: prod
    service: metrics
    protocol: prometheus
    address: 10.0.0.2
    port: 9100
    priority: 7
`

func TestParseFull(t *testing.T) {
	m, err := Parse([]byte(full))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Entries) != 2 {
		t.Fatalf("got %d entries, want 2", len(m.Entries))
	}
	want := endpoint.Endpoint{
		Cluster: "prod", Service: "web", Protocol: "http", Address: "2001:db8::1", Port: 8080,
		Node: "node-1", Priority: 1, Weight: 10, TTL: endpoint.TTL(30 * time.Second),
		Annotations: map[string]string{"prometheus.io/scrape": "true", "team": "edge"},
	}
	if got := m.Entries[0].Endpoint; !endpoint.Equal(got, want) {
		t.Errorf("entry 0 = %+v\nwant %+v (address normalised, priority defaulted to 1)", got, want)
	}
	if m.Entries[0].Line != 3 {
		t.Errorf("entry 0 line = %d, want 3", m.Entries[0].Line)
	}
	wantChecks := []check.Spec{
		{Kind: check.HTTP, Target: "http://127.0.0.1:8080/healthz", ExpectStatus: 200, ExpectBody: "ok", Interval: 5 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3},
		{Kind: check.TCP, Target: "127.0.0.1:8080", Interval: check.DefaultInterval, Timeout: check.DefaultTimeout, Rise: 1, Fall: 1},
		{Kind: check.GRPC, Target: "[::1]:9090", GRPCService: "web", Interval: check.DefaultInterval, Timeout: check.DefaultTimeout, Rise: 1, Fall: 1},
		{Kind: check.Exec, Argv: []string{"/usr/bin/check", "--quick"}, Interval: check.DefaultInterval, Timeout: check.DefaultTimeout, Rise: 1, Fall: 1},
	}
	if !reflect.DeepEqual(m.Entries[0].Checks, wantChecks) {
		t.Errorf("checks = %+v\nwant %+v", m.Entries[0].Checks, wantChecks)
	}
	if e := m.Entries[1]; e.Endpoint.Priority != 7 || len(e.Checks) != 0 {
		t.Errorf("entry 1 = %+v", e)
	}
}

func TestParseEmptyList(t *testing.T) {
	for _, doc := range []string{"entries: []", "entries:"} {
		m, err := Parse([]byte(doc))
		if err != nil || len(m.Entries) != 0 {
			t.Errorf("Parse(%q) = %+v, %v; want no entries", doc, m, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	const head = "entries:\n  - cluster: prod\n    service: web\n    protocol: http\n    address: 10.0.0.1\n"
	tests := []struct {
		name, doc, want string
	}{
		{"empty", "", "empty: want a top-level entries: list"},
		{"no entries key", "{}", "want a top-level entries: list"},
		{"unknown top key", "entries: []\nextra: 1\n", `line 2, column 1: unknown key "extra"`},
		{"two documents", "entries: []\n---\nentries: []\n", "want one YAML document"},
		{"syntax", "entries: [\n", "YAML:"},
		{"entries not a list", "entries: {a: b}", "line 1, column 10: entries: want a list"},
		{"entry not a mapping", "entries:\n  - web\n", `line 2, column 5: entries[0]: want a mapping, got "web"`},
		{"unknown entry key", head + "    colour: blue\n", `line 6, column 5: entries[0]: unknown key "colour"`},
		{"duplicate key", head + "    port: 1\n    port: 2\n", "line 7, column 5: entries[0].port: key appears twice"},
		{"port not int", head + "    port: http\n", `line 6, column 11: entries[0].port: want an integer, got "http"`},
		{"port as float", head + "    port: 80.5\n", "entries[0].port: want an integer"},
		{"port range", head + "    port: 70000\n", `line 2: entries[0]: invalid endpoint: port "70000"`},
		{"priority zero", head + "    priority: 0\n", `entries[0]: invalid endpoint: priority "0"`},
		{"missing service", "entries:\n  - cluster: prod\n    protocol: http\n    address: 10.0.0.1\n", `entries[0]: invalid endpoint: service "": is required`},
		{"bad address", "entries:\n  - cluster: prod\n    service: web\n    protocol: http\n    address: 10.0.0.300\n", `entries[0]: invalid endpoint: address "10.0.0.300"`},
		{"bad ttl", head + "    ttl: 500ms\n", "line 6, column 10: entries[0].ttl: ttl 500ms: must be at least 1s"},
		{"annotations list", head + "    annotations: [a]\n", "entries[0].annotations: want a mapping of strings"},
		{"annotation value map", head + "    annotations: {a: {b: c}}\n", "entries[0].annotations[a]: want a single value"},
		{"bad annotation key", head + "    annotations: {'-x': y}\n", `entries[0]: invalid endpoint: annotations "-x"`},
		{"service is a list", "entries:\n  - service: [a]\n", "line 2, column 14: entries[0].service: want a single value"},
		{"checks not list", head + "    checks: {http: x}\n", "entries[0].checks: want a list"},
		{"unknown check key", head + "    checks:\n      - tcp: a:1\n        retries: 3\n", `line 8, column 9: entries[0].checks[0]: unknown key "retries"`},
		{"two kinds", head + "    checks:\n      - tcp: a:1\n        http: http://a/\n", "line 7, column 9: entries[0].checks[0]: want exactly one of http, tcp, grpc, exec"},
		{"no kind", head + "    checks:\n      - interval: 1s\n", "entries[0].checks[0]: want exactly one of"},
		{"bad interval", head + "    checks:\n      - tcp: a:1\n        interval: soon\n", `line 8, column 19: entries[0].checks[0].interval: want a duration such as 5s, got "soon"`},
		{"timeout over interval", head + "    checks:\n      - tcp: a:1\n        interval: 1s\n        timeout: 2s\n", "entries[0].checks[0]: timeout 2s: must not exceed interval 1s"},
		{"rise zero", head + "    checks:\n      - tcp: a:1\n        rise: 0\n", "line 8, column 15: entries[0].checks[0].rise: 0: must be at least 1"},
		{"exec string", head + "    checks:\n      - exec: true\n", "entries[0].checks[0].exec: want a list"},
		{"exec empty", head + "    checks:\n      - exec: []\n", "entries[0].checks[0]: exec: want a command"},
		{"http bad url", head + "    checks:\n      - http: 127.0.0.1/x\n", "entries[0].checks[0]: http \"127.0.0.1/x\""},
		{"status on tcp", head + "    checks:\n      - tcp: a:1\n        expect_status: 200\n", "http checks only"},
		{"second entry named", head + "  - cluster: prod\n    service: ''\n", "line 6: entries[1]: invalid endpoint: service"},
		{"duplicate entries", head + "  - cluster: prod\n    service: web\n    protocol: http\n    address: 10.0.0.1\n", "line 6: entries[1]: same endpoint as entries[0]"},
		{"duplicate after normalising", "entries:\n  - {cluster: c, service: s, protocol: p, address: '::1'}\n  - {cluster: c, service: s, protocol: p, address: '0::1'}\n", "entries[1]: same endpoint as entries[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v\nwant an error containing %q", err, tc.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not match ErrInvalid", err)
			}
		})
	}
}

func TestParseAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		b.WriteString("a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [")
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + string(rune('0'+i-1)))
		}
		b.WriteString("]\n")
	}
	b.WriteString("entries:\n  - cluster: c\n    service: s\n    protocol: p\n    address: 10.0.0.1\n    checks:\n      - exec: *a8\n")
	_, err := Parse([]byte(b.String()))
	if err == nil {
		t.Fatal("alias bomb parsed")
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.yaml")
	if err := os.WriteFile(path, []byte("entries:\n  - cluster: prod\n    service: web\n    protocol: http\n    address: 10.0.0.1\n    port: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.HasPrefix(err.Error(), "manifest "+path+": line 6, column 11: entries[0].port") {
		t.Fatalf("Load = %v; want the file name, line and field", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
	if err := os.WriteFile(path, []byte(full), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := Load(path)
	if err != nil || len(m.Endpoints()) != 2 {
		t.Fatalf("Load = %v, %v", m, err)
	}
}

// TestParseRefusesControlCharactersInAnnotations: a manifest is the agent's own write,
// held to the write rules: a YAML escape or block scalar that puts a newline into an
// annotation value is refused, naming the entry and the annotation.
func TestParseRefusesControlCharactersInAnnotations(t *testing.T) {
	const head = "entries:\n  - cluster: prod\n    service: web\n    protocol: http\n    address: 10.0.0.1\n"
	for name, doc := range map[string]string{
		"escaped newline": head + "    annotations: {team: \"edge\\n}\\nserver {\"}\n",
		"block scalar":    head + "    annotations:\n      team: |\n        edge;\n        }\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(doc))
			want := "entries[0]: invalid endpoint: annotations[team]"
			if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse = %v\nwant an error containing %q", err, want)
			}
		})
	}
}
