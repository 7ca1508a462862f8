package main

// The Helm chart: its flags, metadata, and a renderer for the few Helm functions it uses.

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/template"

	"gopkg.in/yaml.v3"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/switchboard-mesh/switchboard/registry"
)

// --- the Helm chart --------------------------------------------------------------------

const chartDir = "helm/switchboard"

// templateCommands says which commands the --flags in each chart template belong to.
var templateCommands = map[string][]string{
	"_helpers.tpl":      {"registrar", "registry init", "kube-sync"},
	"_cni.tpl":          {"cni install"},
	"registrar.yaml":    {"registrar"},
	"agent.yaml":        {"agent"},
	"controlplane.yaml": {"controlplane"},
	"stream-init.yaml":  {"registry init"},
	"kube-sync.yaml":    {"kube-sync"},
}

var literalFlag = regexp.MustCompile(`(?:^|[^-\w])--([a-z][a-z0-9-]*)`)

func TestDeployHelmChartFlags(t *testing.T) {
	dir := filepath.Join(deployDir, chartDir, "templates")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		flags := literalFlag.FindAllStringSubmatch(string(data), -1)
		cmds, known := templateCommands[e.Name()]
		if !known && len(flags) > 0 {
			t.Errorf("templates/%s uses --%s: add it to templateCommands", e.Name(), flags[0][1])
		}
		for _, name := range cmds {
			cmd, _, err := newRootCmd(io.Discard, io.Discard).Find(strings.Fields(name))
			if err != nil || cmd.CommandPath() != "switchboard "+name {
				t.Errorf("templates/%s: no command switchboard %s (%v)", e.Name(), name, err)
				continue
			}
			for _, f := range flags {
				if cmd.Flag(f[1]) == nil {
					t.Errorf("templates/%s: switchboard %s has no flag --%s", e.Name(), name, f[1])
				}
			}
		}
	}
	// backend.flags.NAME holds backend NAME's flags: each must be one it declares (the
	// registrar and registry init have a flag for every declared parameter).
	perBackend, _ := lookup(chartValues(t), "backend.flags").(map[string]any)
	if len(perBackend) == 0 {
		t.Fatal("values.yaml: backend.flags is not a map of backend name to flags")
	}
	for name, flags := range perBackend {
		be, err := registry.Lookup(name)
		if err != nil {
			t.Errorf("values.yaml backend.flags.%s: %v", name, err)
			continue
		}
		fm, _ := flags.(map[string]any)
		for f := range fm {
			if !slices.ContainsFunc(be.Params, func(p registry.Param) bool { return p.Name == f }) {
				t.Errorf("values.yaml backend.flags.%s: backend %s has no flag --%s", name, name, f)
			}
		}
	}
}

// TestDeployHelmChartRenders renders the chart with a stand-in for `helm template`
// (Go text/template with the few Helm functions the chart uses; no helm binary here)
// and puts the output through the same checks as deploy/kubernetes.
func TestDeployHelmChartRenders(t *testing.T) {
	tests := []struct {
		name string
		set  map[string]any
		want []string
	}{
		{"defaults", nil, allCommands},
		{"external registrar", map[string]any{"registrar.enabled": false, "agent.registrarAddress": "registrar.example.net:9443"},
			[]string{"agent", "controlplane", "registry init"}},
		{"registrar only", map[string]any{"agent.enabled": false, "controlplane.enabled": false, "streamInit.enabled": false},
			[]string{"registrar"}},
		{"etcd backend", map[string]any{"backend.name": "etcd"}, []string{"agent", "controlplane", "registrar"}},
		{"dynamodb backend", map[string]any{"backend.name": "dynamodb"}, []string{"agent", "controlplane", "registrar"}},
		{"cloudmap backend", map[string]any{"backend.name": "cloudmap"}, []string{"agent", "controlplane", "registrar"}},
		{"controlplane HA on etcd", map[string]any{"controlplane.replicas": 2, "controlplane.database.type": "etcd",
			"controlplane.database.etcd.endpoints": []any{"https://etcd-0.etcd:2379", "https://etcd-1.etcd:2379"},
			"controlplane.database.etcd.tlsSecret": "etcd-client", "controlplane.database.etcd.username": "cp",
			"controlplane.database.etcd.passwordSecret": "etcd-cp"}, allCommands},
		{"nothing", map[string]any{"registrar.enabled": false, "agent.enabled": false, "controlplane.enabled": false, "streamInit.enabled": false},
			nil},
		{"pod registration", map[string]any{"cni.enabled": true}, cniCommands},
		{"pod registration, kept installed, fail", map[string]any{"cni.enabled": true, "cni.keepInstalled": true,
			"cni.onAgentUnreachable": "fail", "cni.binDir": "/home/kubernetes/bin"}, cniCommands},
		{"pod registration, external registrar", map[string]any{"cni.enabled": true, "registrar.enabled": false,
			"agent.registrarAddress": "registrar.example.net:9443", "pods.cluster": "pods-b"},
			[]string{"agent", "cni install", "controlplane", "registry init"}},
		{"kube-sync", map[string]any{"kubeSync.enabled": true, "kubeSync.exportNamespace": "mesh", "kubeSync.importNamespace": "default"}, []string{"agent", "controlplane", "kube-sync", "registrar", "registry init"}},
		{"kube-sync on etcd", map[string]any{"kubeSync.enabled": true, "kubeSync.importNamespace": "default", "backend.name": "etcd"}, []string{"agent", "controlplane", "kube-sync", "registrar"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			values := chartValues(t)
			for k, v := range tt.set {
				set(t, values, k, v)
			}
			out, err := renderChart(t, values)
			if err != nil {
				t.Fatal(err)
			}
			objs := decodeFiles(t, out)
			if got := mustCheck(t, objs); !slices.Equal(got, tt.want) {
				t.Errorf("the chart runs %v, want %v", got, tt.want)
			}
		})
	}
}

// An agent without the chart's registrar has nowhere to register: the chart says so.
// Two control-plane replicas need the etcd store, which needs endpoints: the chart
// says so.
func TestDeployHelmChartControlPlaneReplicas(t *testing.T) {
	for _, c := range []struct {
		set  map[string]any
		want string
	}{
		{map[string]any{"controlplane.replicas": 2}, "controlplane.database.type etcd"},
		{map[string]any{"controlplane.database.type": "etcd"}, "controlplane.database.etcd.endpoints"},
	} {
		values := chartValues(t)
		for k, v := range c.set {
			set(t, values, k, v)
		}
		if _, err := renderChart(t, values); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("render with %v: %v, want an error naming %s", c.set, err, c.want)
		}
	}
}

func TestDeployHelmChartNeedsRegistrarAddress(t *testing.T) {
	values := chartValues(t)
	set(t, values, "registrar.enabled", false)
	_, err := renderChart(t, values)
	if err == nil || !strings.Contains(err.Error(), "agent.registrarAddress") {
		t.Fatalf("render with the registrar off and no agent.registrarAddress: %v, want an error naming it", err)
	}
}

func TestDeployHelmChartMetadata(t *testing.T) {
	c := chartMeta(t)
	if c.APIVersion != "v2" || c.Name != "switchboard" || c.Version == "" {
		t.Errorf("Chart.yaml: %+v, want apiVersion v2, name switchboard and a version", c)
	}
	values := chartValues(t)
	for _, k := range []string{"image.repository", "image.tag", "clusterName", "backend.name",
		"registrar.enabled", "agent.enabled", "controlplane.enabled", "registrar.replicas",
		"registrar.resources", "agent.resources", "controlplane.resources"} {
		if lookup(values, k) == nil {
			t.Errorf("values.yaml has no %s", k)
		}
	}
}

type chart struct {
	APIVersion string `yaml:"apiVersion"`
	Name       string
	Version    string
	AppVersion string `yaml:"appVersion"`
}

func chartMeta(t *testing.T) chart {
	t.Helper()
	var c chart
	readYAML(t, filepath.Join(deployDir, chartDir, "Chart.yaml"), &c)
	return c
}

// chartValues reads values.yaml as Helm does: through JSON, so every number is a
// float64 (a template that prints one with %v shows 1000000 as 1e+06).
func chartValues(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(deployDir, chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := sigsyaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("values.yaml: %v", err)
	}
	return v
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func lookup(m map[string]any, dotted string) any {
	var cur any = m
	for _, k := range strings.Split(dotted, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

// set overrides one value like `helm --set`; the key must exist in values.yaml, so a
// test cannot silently set a value the chart does not read.
func set(t *testing.T, m map[string]any, dotted string, v any) {
	t.Helper()
	keys := strings.Split(dotted, ".")
	parent, ok := lookup(m, strings.Join(keys[:len(keys)-1], ".")).(map[string]any)
	if len(keys) == 1 {
		parent, ok = m, true
	}
	if _, exists := parent[keys[len(keys)-1]]; !ok || !exists {
		t.Fatalf("values.yaml has no %s", dotted)
	}
	parent[keys[len(keys)-1]] = v
}

// renderChart renders every template like `helm template switchboard -n
// switchboard-system`, returning each file's output. Only the Helm functions below
// exist: a template using another fails to parse, so the chart stays within what is
// checked here.
func renderChart(t *testing.T, values map[string]any) (map[string]string, error) {
	t.Helper()
	c := chartMeta(t)
	root := template.New("chart").Option("missingkey=error")
	root.Funcs(template.FuncMap{
		"include": func(name string, data any) (string, error) {
			var b strings.Builder
			err := root.ExecuteTemplate(&b, name, data)
			return b.String(), err
		},
		"toYaml": func(v any) (string, error) {
			b, err := yaml.Marshal(v)
			return strings.TrimSuffix(string(b), "\n"), err
		},
		"nindent": func(n int, s string) string {
			pad := strings.Repeat(" ", n)
			return "\n" + pad + strings.ReplaceAll(s, "\n", "\n"+pad)
		},
		"quote": func(v any) string { return strconv.Quote(fmt.Sprint(v)) },
		"sha256sum": func(s string) string {
			sum := sha256.Sum256([]byte(s))
			return hex.EncodeToString(sum[:])
		},
		"dict": func(kv ...any) map[string]any {
			m := map[string]any{}
			for i := 0; i+1 < len(kv); i += 2 {
				m[fmt.Sprint(kv[i])] = kv[i+1]
			}
			return m
		},
		"fail": func(msg string) (string, error) { return "", errors.New(msg) },
		// Sprig's: the kind of a value by reflect's name, and a number as an int64.
		"kindIs": func(kind string, v any) bool { return v != nil && reflect.TypeOf(v).Kind().String() == kind },
		"int64":  toInt64,
	})
	dir := filepath.Join(deployDir, chartDir, "templates")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := root.New(e.Name()).Parse(string(data)); err != nil {
			t.Fatalf("templates/%s: %v", e.Name(), err)
		}
		if !strings.HasPrefix(e.Name(), "_") && path.Ext(e.Name()) == ".yaml" {
			names = append(names, e.Name())
		}
	}
	data := map[string]any{
		"Values":  values,
		"Release": map[string]any{"Name": "switchboard", "Namespace": "switchboard-system", "Service": "Helm"},
		"Chart":   map[string]any{"Name": c.Name, "Version": c.Version, "AppVersion": c.AppVersion},
	}
	out := map[string]string{}
	for _, n := range names {
		var b strings.Builder
		if err := root.ExecuteTemplate(&b, n, data); err != nil {
			return nil, fmt.Errorf("templates/%s: %w", n, err)
		}
		out[n] = b.String()
	}
	return out, nil
}

// toInt64 is Sprig's int64 for the kinds values hold: numbers are truncated, strings
// parsed, anything else is 0.
func toInt64(v any) int64 {
	switch n := v.(type) {
	case float64:
		return int64(n)
	case int:
		return int64(n)
	case int64:
		return n
	case string:
		i, _ := strconv.ParseInt(n, 10, 64)
		return i
	}
	return 0
}
