package manifest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func lookupFrom(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

const templated = `
entries:
  - cluster: ${CLUSTER}
    service: web
    protocol: http
    address: ${NODE_IP}
    port: ${PORT}
    node: "${NODE_NAME}"
    annotations:
      literal: "cost $$5 and $${NOT_EXPANDED}"
    checks:
      - http: http://${NODE_IP}:${PORT}/healthz
`

func TestParseEnvExpandsValues(t *testing.T) {
	env := map[string]string{"CLUSTER": "prod", "NODE_IP": "10.1.2.3", "PORT": "8080", "NODE_NAME": "node-7"}
	m, err := ParseEnv([]byte(templated), lookupFrom(env))
	if err != nil {
		t.Fatal(err)
	}
	e := m.Entries[0]
	if e.Endpoint.Cluster != "prod" || e.Endpoint.Address != "10.1.2.3" || e.Endpoint.Port != 8080 || e.Endpoint.Node != "node-7" {
		t.Fatalf("endpoint %+v", e.Endpoint)
	}
	if got := e.Checks[0].Target; got != "http://10.1.2.3:8080/healthz" {
		t.Fatalf("check target %q", got)
	}
	if got := e.Endpoint.Annotations["literal"]; got != "cost $$5 and ${NOT_EXPANDED}" {
		t.Fatalf("escaped value %q", got)
	}
	// Keys are never expanded: ${E} stays an unknown key even when E=entries.
	_, err = ParseEnv([]byte("entries: []\n${E}: []\n"), lookupFrom(map[string]string{"E": "entries"}))
	if err == nil || !strings.Contains(err.Error(), `unknown key "${E}"`) {
		t.Fatalf("a key was expanded: %v", err)
	}
}

func TestParseEnvRefusesUnsetVariables(t *testing.T) {
	_, err := ParseEnv([]byte(templated), lookupFrom(map[string]string{"CLUSTER": "prod", "PORT": "80", "NODE_NAME": "n"}))
	if err == nil || !strings.Contains(err.Error(), "${NODE_IP} is not set") || !strings.Contains(err.Error(), "line 6") {
		t.Fatalf("unset variable: %v", err)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("%v must match ErrInvalid", err)
	}
	// A value that expands to something of the wrong type is still refused.
	_, err = ParseEnv([]byte(templated), lookupFrom(map[string]string{"CLUSTER": "prod", "NODE_IP": "10.0.0.1", "PORT": "http", "NODE_NAME": "n"}))
	if err == nil || !strings.Contains(err.Error(), "port") {
		t.Fatalf("port from a non-number: %v", err)
	}
}

func TestParseTakesValuesLiterally(t *testing.T) {
	// Without the environment, ${...} is just text: here an invalid address.
	if _, err := Parse([]byte(templated)); err == nil {
		t.Fatal("Parse expanded or accepted ${NODE_IP} as an address")
	}
}

func TestLoadExpandsFromTheProcessEnvironment(t *testing.T) {
	t.Setenv("CLUSTER", "prod")
	t.Setenv("NODE_IP", "10.9.9.9")
	t.Setenv("PORT", "9090")
	t.Setenv("NODE_NAME", "n1")
	path := filepath.Join(t.TempDir(), "m.yaml")
	if err := os.WriteFile(path, []byte(templated), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if m.Entries[0].Endpoint.Address != "10.9.9.9" || m.Entries[0].Endpoint.Port != 9090 {
		t.Fatalf("Load did not expand: %+v", m.Entries[0].Endpoint)
	}
}

func FuzzParseEnv(f *testing.F) {
	f.Add([]byte(templated))
	f.Add([]byte("entries:\n  - cluster: ${A}${A}\n    service: $${x}\n"))
	f.Add([]byte("a: &x ${A}\nentries: [*x, *x]\n"))
	lookup := lookupFrom(map[string]string{"CLUSTER": "prod", "NODE_IP": "10.0.0.1", "PORT": "80", "NODE_NAME": "n", "A": "a"})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseEnv(data, lookup)
		if strings.Contains(string(data), "${") {
			return
		}
		// Without references, expansion changes nothing.
		m2, err2 := Parse(data)
		if (err == nil) != (err2 == nil) || (err == nil && len(m.Entries) != len(m2.Entries)) {
			t.Fatalf("ParseEnv and Parse disagree on input without references: %v vs %v", err, err2)
		}
	})
}
