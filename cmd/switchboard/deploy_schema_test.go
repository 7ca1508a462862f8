package main

// The Helm chart's values.schema.json: Helm validates the values against it before
// rendering (helm install, upgrade, template, lint), so a wrong type or an unknown
// backend is refused with the key named, instead of rendering a broken Deployment.

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/switchboard-mesh/switchboard/registry"
)

func chartSchema(t *testing.T) (*jsonschema.Schema, map[string]any) {
	t.Helper()
	path := filepath.Join(deployDir, chartDir, "values.schema.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("values.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("values.schema.json")
	if err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	raw, _ := doc.(map[string]any)
	return sch, raw
}

// validateValues checks values as Helm does: as their JSON form.
func validateValues(t *testing.T, sch *jsonschema.Schema, values map[string]any) error {
	t.Helper()
	data, err := json.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return sch.Validate(inst)
}

func TestDeployHelmSchemaAcceptsTheDefaults(t *testing.T) {
	sch, _ := chartSchema(t)
	if err := validateValues(t, sch, chartValues(t)); err != nil {
		t.Fatalf("values.yaml does not pass values.schema.json:\n%v", err)
	}
	// Every backend the chart offers is valid with its example flags.
	for _, name := range []string{"jetstream", "etcd", "dynamodb", "cloudmap"} {
		values := chartValues(t)
		set(t, values, "backend.name", name)
		if err := validateValues(t, sch, values); err != nil {
			t.Errorf("backend %s: %v", name, err)
		}
	}
}

func TestDeployHelmSchemaRejectsBadValues(t *testing.T) {
	sch, _ := chartSchema(t)
	tests := []struct {
		name string
		set  map[string]any
		add  map[string]any // keys values.yaml lacks (typos, foreign flags)
		want string         // in the error: the key at fault
	}{
		{"unknown backend", map[string]any{"backend.name": "mysql"}, nil, "/backend/name"},
		{"registrar itself as backend", map[string]any{"backend.name": "registrar"}, nil, "/backend/name"},
		{"replicas as text", map[string]any{"registrar.replicas": "two"}, nil, "/registrar/replicas"},
		{"replicas fractional", map[string]any{"registrar.replicas": 1.5}, nil, "/registrar/replicas"},
		{"stream replicas out of range", map[string]any{"streamInit.replicas": 7}, nil, "/streamInit/replicas"},
		{"bool as text", map[string]any{"agent.prometheusSD": "yes"}, nil, "/agent/prometheusSD"},
		{"duration as number", map[string]any{"registrar.syncInterval": 5}, nil, "/registrar/syncInterval"},
		{"duration without unit", map[string]any{"agent.shutdownTimeout": "20"}, nil, "/agent/shutdownTimeout"},
		{"grace period as text", map[string]any{"agent.terminationGracePeriodSeconds": "30s"}, nil, "/agent/terminationGracePeriodSeconds"},
		{"pull policy", map[string]any{"image.pullPolicy": "Sometimes"}, nil, "/image/pullPolicy"},
		{"log format", map[string]any{"logFormat": "xml"}, nil, "/logFormat"},
		{"service type", map[string]any{"controlplane.southboundServiceType": "External"}, nil, "/controlplane/southboundServiceType"},
		{"cluster name", map[string]any{"clusterName": "9 lives"}, nil, "/clusterName"},
		{"extra arg without --", map[string]any{"registrar.extraArgs": []any{"insecure"}}, nil, "/registrar/extraArgs/0"},
		{"misspelt key", nil, map[string]any{"registrar.replica": 3}, "replica"},
		{"flag of another backend", nil, map[string]any{"backend.flags.etcd.nats-url": "nats://x:4222"}, "nats-url"},
		{"misspelt backend flag", nil, map[string]any{"backend.flags.etcd.etcd-max-txn-opps": 10}, "etcd-max-txn-opps"},
		{"fractional backend flag", nil, map[string]any{"backend.flags.etcd.etcd-max-txn-ops": 1.5}, "etcd-max-txn-ops"},
		{"cni enabled as text", map[string]any{"cni.enabled": "true"}, nil, "/cni/enabled"},
		{"cni unreachable policy", map[string]any{"cni.onAgentUnreachable": "retry"}, nil, "/cni/onAgentUnreachable"},
		{"cni relative bin dir", map[string]any{"cni.binDir": "opt/cni/bin"}, nil, "/cni/binDir"},
		{"cni wait without unit", map[string]any{"cni.wait": "300"}, nil, "/cni/wait"},
		{"pod ttl without unit", map[string]any{"pods.ttl": "30"}, nil, "/pods/ttl"},
		{"pod resync as number", map[string]any{"pods.resync": 30}, nil, "/pods/resync"},
		{"empty pod selector", map[string]any{"pods.selector": ""}, nil, "/pods/selector"},
		{"pod cluster", map[string]any{"pods.cluster": "9 lives"}, nil, "/pods/cluster"},
		{"misspelt cni key", nil, map[string]any{"cni.keepInstaled": true}, "keepInstaled"},
		{"kube-sync namespace", map[string]any{"kubeSync.importNamespace": "Default"}, nil, "/kubeSync/importNamespace"},
		{"kube-sync extra arg without --", map[string]any{"kubeSync.extraArgs": []any{"resync=1m"}}, nil, "/kubeSync/extraArgs/0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			values := chartValues(t)
			for k, v := range tt.set {
				set(t, values, k, v)
			}
			for k, v := range tt.add {
				keys := strings.Split(k, ".")
				parent, ok := lookup(values, strings.Join(keys[:len(keys)-1], ".")).(map[string]any)
				if !ok {
					t.Fatalf("values.yaml has no %s", strings.Join(keys[:len(keys)-1], "."))
				}
				parent[keys[len(keys)-1]] = v
			}
			err := validateValues(t, sch, values)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("validation: %v; want an error naming %s", err, tt.want)
			}
		})
	}
}

// The schema's backend names and per-backend flags are the CLI's: a backend or a
// parameter added to the code must be added to the schema, and the chart never
// offers the in-process or registrar backends (a registrar needs an external
// registry that outlives it).
func TestDeployHelmSchemaMatchesBackends(t *testing.T) {
	_, raw := chartSchema(t)
	backend := lookup(raw, "properties.backend.properties").(map[string]any)
	var names []string
	for _, n := range backend["name"].(map[string]any)["enum"].([]any) {
		names = append(names, n.(string))
	}
	var want []string
	for _, be := range registry.Backends() {
		if be.Name != "memory" && be.Name != "registrar" {
			want = append(want, be.Name)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Errorf("schema backend.name allows %v, want %v", names, want)
	}
	flags := lookup(backend, "flags.properties").(map[string]any)
	for _, name := range want {
		be, _ := registry.Lookup(name)
		var declared []string
		for _, p := range be.Params {
			declared = append(declared, p.Name)
		}
		slices.Sort(declared)
		var got []string
		if s, ok := flags[name].(map[string]any); ok {
			for _, f := range lookup(s, "propertyNames.enum").([]any) {
				got = append(got, f.(string))
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, declared) {
			t.Errorf("schema backend.flags.%s allows %v, want the backend's parameters %v", name, got, declared)
		}
	}
}

// Numbers render as integers: Helm holds every number in the values as a float, and
// 1000000 printed with %v is 1e+06, which the registrar's integer flag refuses.
func TestDeployHelmChartRendersIntegers(t *testing.T) {
	values := chartValues(t)
	set(t, values, "backend.name", "etcd")
	lookup(values, "backend.flags.etcd").(map[string]any)["etcd-max-txn-ops"] = float64(1_000_000)
	set(t, values, "registrar.replicas", float64(1_000_000))
	set(t, values, "agent.terminationGracePeriodSeconds", float64(1_000_000))
	sch, _ := chartSchema(t)
	if err := validateValues(t, sch, values); err != nil {
		t.Fatal(err)
	}
	out, err := renderChart(t, values)
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		"registrar.yaml": `"--etcd-max-txn-ops=1000000"`,
		"agent.yaml":     "terminationGracePeriodSeconds: 1000000",
	} {
		if !strings.Contains(out[file], want) || strings.Contains(out[file], "e+06") {
			t.Errorf("templates/%s does not render %s:\n%s", file, want, out[file])
		}
	}
	if !strings.Contains(out["registrar.yaml"], "replicas: 1000000") {
		t.Errorf("registrar replicas not an integer:\n%s", out["registrar.yaml"])
	}
	// And the rendered invocations parse with the real flags.
	mustCheck(t, decodeFiles(t, out))

	values = chartValues(t)
	set(t, values, "streamInit.replicas", float64(5))
	out, err = renderChart(t, values)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out["stream-init.yaml"], `"--replicas=5"`) {
		t.Errorf("stream-init replicas:\n%s", out["stream-init.yaml"])
	}
}
