package main

// The tests here keep deploy/ true to the CLI: every container that runs switchboard in
// the Kubernetes manifests (and in the Helm chart, rendered) must name a real subcommand
// with flags that parse, and the files it reads (agent manifest, control plane config)
// must pass the real parsers. They also check that the objects fit together: Services
// and probes reach ports the processes listen on, files live on mounted volumes, the
// agents' clusters and registrar address match the registrar. Nothing is executed.

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const deployDir = "../../deploy"

// allCommands is what a full deployment runs.
var allCommands = []string{"agent", "controlplane", "registrar", "registry init"}

// kubernetesAlternatives are the files of deploy/kubernetes that kustomization.yaml
// does not list, each in place of the file it names (deploy/README.md).
var kubernetesAlternatives = map[string]string{"agent-cni.yaml": "agent.yaml"}

// kubernetesFiles returns what `kubectl apply -k deploy/kubernetes` applies: every
// file but the alternatives, or, with use, alternative use in place of its file.
func kubernetesFiles(t *testing.T, use string) map[string]string {
	t.Helper()
	files := readFiles(t, filepath.Join(deployDir, "kubernetes"))
	for alt, instead := range kubernetesAlternatives {
		if _, ok := files[alt]; !ok {
			t.Fatalf("deploy/kubernetes has no %s", alt)
		}
		if alt == use {
			files[instead] = files[alt]
		}
		delete(files, alt)
	}
	return files
}

func TestDeployKubernetesManifests(t *testing.T) {
	dir := filepath.Join(deployDir, "kubernetes")
	files := kubernetesFiles(t, "")
	objs := decodeFiles(t, files)
	got := mustCheck(t, objs)
	if !slices.Equal(got, allCommands) {
		t.Errorf("deploy/kubernetes runs %v, want %v", got, allCommands)
	}
	for _, o := range objs {
		if o.Kind != "Namespace" && o.Kind != "Kustomization" && o.Metadata.Namespace != "switchboard-system" {
			t.Errorf("%s: namespace %q, want switchboard-system", o.where, o.Metadata.Namespace)
		}
	}
	checkKustomization(t, dir, slices.Sorted(maps.Keys(files)))
}

// TestDeployChecksCatchMistakes proves the checks above are worth something: each
// mistake made in a copy of deploy/kubernetes must be reported.
func TestDeployChecksCatchMistakes(t *testing.T) {
	tests := []struct {
		file, old, new string
		want           string
	}{
		{"registrar.yaml", "--sync-interval=5s", "--sync-intervall=5s", "unknown flag: --sync-intervall"},
		{"registrar.yaml", "--write-batch-interval=100ms", "--write-batch-interval=fast", `invalid argument "fast"`},
		{"registrar.yaml", "- --create-stream=false", "- --create-stream=false\n            - --etcd-endpoints=etcd:2379", `--etcd-endpoints is not a flag of registry backend "jetstream"`},
		{"registrar.yaml", "--log-format=json", "--log-format=xml", `--log-format "xml"`},
		{"registrar.yaml", "targetPort: grpc", "targetPort: grcp", "targetPort grcp is not a port"},
		{"registrar.yaml", "--cluster-name=cluster-a", "--cluster-name=cluster-b", `cluster "cluster-a", but the registrar accepts [cluster-b]`},
		{"registrar.yaml", "- --cluster-name=cluster-a", "", "--cluster-name is required"},
		{"registrar.yaml", "--health-listen=:8081", "--health-listen=:8082", ":8082: port 8082 is not a containerPort"},
		{"agent.yaml", "--shutdown-timeout=20s", "--shutdown-timeout=40s", "does not fit in terminationGracePeriodSeconds"},
		{"agent.yaml", "--metrics-listen=:9102", "--metrics-listen=127.0.0.1:9102", "is loopback"},
		{"agent.yaml", "port: 9100", "port: http", `entries[0].port: want an integer`},
		{"agent.yaml", "team: platform", "team: ${TEAM}", "the manifest uses ${TEAM}, which container agent's env does not set"},
		{"agent.yaml", "- name: NODE_IP\n              valueFrom:\n                fieldRef:\n                  fieldPath: status.hostIP\n            ", "",
			"the manifest uses ${NODE_IP}, which container agent's env does not set"},
		{"agent.yaml", "              value: cluster-a\n", "", "env CLUSTER_NAME has neither value nor valueFrom"},
		{"agent.yaml", "fieldPath: status.hostIP", "fieldPath: status.hostIp", "fieldRef status.hostIp is not a downward API field"},
		{"agent.yaml", "value: cluster-a", "value: cluster-b", `cluster "cluster-b", but the registrar accepts [cluster-a]`},
		{"agent.yaml", "configMap:\n            name: switchboard-agent-manifest", "emptyDir: {}", "agent.yaml is not mounted from a ConfigMap"},
		{"agent.yaml", "--registrar-node=$(NODE_NAME)", "--registrar-node=$(NODE)", "refers to NODE, which is not in env"},
		{"agent.yaml", "switchboard-system.svc:9443", "switchboard-system.svc:9444", "has no port 9444"},
		{"agent.yaml", "--manifest=/etc/switchboard/manifest/agent.yaml", "--manifest=/etc/agent.yaml", "--manifest /etc/agent.yaml is on no volume mount"},
		{"controlplane.yaml", "type: sqlite", "type: sqlit", "database.type"},
		{"controlplane.yaml", "persistentVolumeClaim:\n            claimName: switchboard-controlplane-data", "emptyDir: {}", "is not on a PersistentVolumeClaim"},
		{"controlplane.yaml", "path: /readyz", "path: /ready", "serves no /ready"},
		{"controlplane.yaml", `endpoint: "0.0.0.0:50052"`, `endpoint: "0.0.0.0:50055"`, "southbound.endpoint: 0.0.0.0:50055: port 50055 is not a containerPort"},
		{"nats-stream-init.yaml", "- init", "- initt", "is a command group"},
		{"nats-stream-init.yaml", "nats://nats.nats.svc:4222", "nats://nats.other.svc:4222", "no registry init creates stream"},
	}
	files := kubernetesFiles(t, "")
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if !strings.Contains(files[tt.file], tt.old) {
				t.Fatalf("%s no longer contains %q: update this test", tt.file, tt.old)
			}
			broken := maps.Clone(files)
			broken[tt.file] = strings.Replace(files[tt.file], tt.old, tt.new, 1)
			_, errs := checkObjects(t, decodeFiles(t, broken))
			if !slices.ContainsFunc(errs, func(err error) bool { return strings.Contains(err.Error(), tt.want) }) {
				t.Errorf("no error containing %q; got %v", tt.want, errs)
			}
		})
	}
}

// readFiles returns the content of every YAML file in dir by name.
func readFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, f := range yamlFiles(t, dir) {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		out[f] = string(data)
	}
	return out
}

func decodeFiles(t *testing.T, files map[string]string) []object {
	t.Helper()
	var objs []object
	for _, f := range slices.Sorted(maps.Keys(files)) {
		objs = append(objs, decodeObjects(t, f, []byte(files[f]))...)
	}
	return objs
}

// TestDeployDockerfile checks what the manifests assume of the image: its entrypoint
// is the switchboard binary (containers give only args), built from ./cmd/switchboard.
func TestDeployDockerfile(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(deployDir, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var entrypoint string
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "ENTRYPOINT "); ok {
			entrypoint = strings.TrimSpace(rest)
		}
	}
	if entrypoint != `["/switchboard"]` {
		t.Errorf("Dockerfile: last ENTRYPOINT %q, want the exec form [\"/switchboard\"]", entrypoint)
	}
	for _, want := range []string{"CGO_ENABLED=0", "./cmd/switchboard", "distroless/static", "nonroot"} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("Dockerfile: no %q", want)
		}
	}
}
