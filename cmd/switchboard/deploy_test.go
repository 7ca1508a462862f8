package main

// The tests here keep deploy/ true to the CLI: every container that runs switchboard in
// the Kubernetes manifests (and in the Helm chart, rendered) must name a real subcommand
// with flags that parse, and the files it reads (agent manifest, control plane config)
// must pass the real parsers. They also check that the objects fit together: Services
// and probes reach ports the processes listen on, files live on mounted volumes, the
// agents' clusters and registrar address match the registrar. Nothing is executed.

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/switchboard-mesh/switchboard/agent/manifest"
	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/registry"
)

const deployDir = "../../deploy"

// allCommands is what a full deployment runs.
var allCommands = []string{"agent", "controlplane", "registrar", "registry init"}

func TestDeployKubernetesManifests(t *testing.T) {
	dir := filepath.Join(deployDir, "kubernetes")
	files := readFiles(t, dir)
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
	files := readFiles(t, filepath.Join(deployDir, "kubernetes"))
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

// --- Kubernetes objects, only the fields the checks read -------------------------------

type objectMeta struct {
	Name        string
	Namespace   string
	Labels      map[string]string
	Annotations map[string]string
}

type object struct {
	Kind     string
	Metadata objectMeta
	Data     map[string]string // ConfigMap
	where    string            // file, document and name, for messages
	node     *yaml.Node
}

type podTemplate struct {
	Spec struct {
		Template struct {
			Metadata objectMeta
			Spec     podSpec
		}
	}
}

type podSpec struct {
	TerminationGracePeriodSeconds *int        `yaml:"terminationGracePeriodSeconds"`
	InitContainers                []container `yaml:"initContainers"`
	Containers                    []container
	Volumes                       []volume
}

type container struct {
	Name         string
	Image        string
	Command      []string
	Args         []string
	Env          []envVar
	Ports        []portSpec
	VolumeMounts []struct {
		Name      string
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
}

type portSpec struct {
	Name          string
	ContainerPort int `yaml:"containerPort"`
}

type servicePort struct {
	Name       string
	Port       int
	TargetPort string `yaml:"targetPort"`
}

type envVar struct {
	Name      string
	Value     *string
	ValueFrom *struct {
		FieldRef *struct {
			FieldPath string `yaml:"fieldPath"`
		} `yaml:"fieldRef"`
	} `yaml:"valueFrom"`
}

type volume struct {
	Name      string
	ConfigMap *struct {
		Name string
	} `yaml:"configMap"`
	EmptyDir              *struct{} `yaml:"emptyDir"`
	PersistentVolumeClaim *struct {
		ClaimName string `yaml:"claimName"`
	} `yaml:"persistentVolumeClaim"`
}

type probe struct {
	HTTPGet *struct {
		Path string
		Port string
	} `yaml:"httpGet"`
}

type service struct {
	Spec struct {
		Selector map[string]string
		Ports    []servicePort
	}
}

type selectorSpec struct {
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		}
	}
}

// pod is one workload's pod template.
type pod struct {
	where     string
	namespace string
	labels    map[string]string
	spec      podSpec
}

// fieldRefSamples stand in for what the downward API gives a pod.
var fieldRefSamples = map[string]string{"status.hostIP": "192.0.2.10", "spec.nodeName": "node-1"}

// value returns what the container sees as e on a sample node: its value, or a sample
// of what the downward API gives.
func (e envVar) value() (string, error) {
	switch {
	case e.Value != nil:
		return *e.Value, nil
	case e.ValueFrom == nil:
		return "", fmt.Errorf("env %s has neither value nor valueFrom", e.Name)
	case e.ValueFrom.FieldRef == nil:
		return "", fmt.Errorf("env %s: valueFrom without fieldRef: teach deploy_test.go a sample for it", e.Name)
	}
	v, ok := fieldRefSamples[e.ValueFrom.FieldRef.FieldPath]
	if !ok {
		return "", fmt.Errorf("env %s: fieldRef %s is not a downward API field deploy_test.go knows", e.Name, e.ValueFrom.FieldRef.FieldPath)
	}
	return v, nil
}

// containerEnv returns c's environment on a sample node; a later entry for a name wins,
// as in Kubernetes. Entries without a value are left out and reported.
func containerEnv(c container) (map[string]string, []error) {
	env := map[string]string{}
	var errs []error
	for _, e := range c.Env {
		v, err := e.value()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		env[e.Name] = v
	}
	return env, errs
}

func yamlFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if ext := path.Ext(e.Name()); ext == ".yaml" || ext == ".yml" {
			out = append(out, e.Name())
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no YAML files", dir)
	}
	return out
}

// decodeObjects splits a multi-document file and decodes each non-empty document.
func decodeObjects(t *testing.T, name string, data []byte) []object {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []object
	for i := 0; ; i++ {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", name, i, err)
		}
		if len(n.Content) == 0 || n.Content[0].Tag == "!!null" {
			continue // an empty document, e.g. a disabled Helm template
		}
		o := object{node: &n}
		if err := n.Decode(&o); err != nil {
			t.Fatalf("%s: document %d: %v", name, i, err)
		}
		if o.Kind == "" {
			t.Errorf("%s: document %d has no kind", name, i)
		}
		o.where = fmt.Sprintf("%s#%d %s/%s", name, i, o.Kind, o.Metadata.Name)
		out = append(out, o)
	}
}

func decodeAs(t *testing.T, o object, v any) {
	t.Helper()
	if err := o.node.Decode(v); err != nil {
		t.Fatalf("%s: %v", o.where, err)
	}
}

func checkKustomization(t *testing.T, dir string, files []string) {
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct{ Resources []string }
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	want := slices.DeleteFunc(slices.Clone(files), func(f string) bool { return f == "kustomization.yaml" })
	got := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(got, want) {
		t.Errorf("kustomization.yaml lists %v, the directory holds %v", got, want)
	}
}

// --- checks over a set of objects ------------------------------------------------------

// deployment is a set of objects under check and what was learnt from them.
type deployment struct {
	errs       []error
	pods       []pod
	configMaps map[string]object // namespace/name
	claims     map[string]bool   // namespace/name
	services   map[string]service
	commands   map[string]bool
	clusters   []string     // --cluster-name of the registrars
	manifests  []manifestAt // agent manifests, rendered for a sample node
	addresses  []string     // --registrar-address of the agents
	streams    []streamUse  // JetStream streams the registrars and init Jobs name
}

func (d *deployment) errorf(format string, args ...any) {
	d.errs = append(d.errs, fmt.Errorf(format, args...))
}

// mustCheck checks objs and fails t on every problem.
func mustCheck(t *testing.T, objs []object) []string {
	t.Helper()
	cmds, errs := checkObjects(t, objs)
	for _, err := range errs {
		t.Error(err)
	}
	return cmds
}

type manifestAt struct {
	where string
	m     *manifest.Manifest
}

type streamUse struct {
	where  string
	init   bool // registry init, rather than a user that expects the stream
	create bool
	id     string
}

// checkObjects checks every object and returns the sorted switchboard commands run and
// every problem found.
func checkObjects(t *testing.T, objs []object) ([]string, []error) {
	t.Helper()
	d := &deployment{
		configMaps: map[string]object{}, claims: map[string]bool{},
		services: map[string]service{}, commands: map[string]bool{},
	}
	var pdbs []object
	for _, o := range objs {
		key := o.Metadata.Namespace + "/" + o.Metadata.Name
		switch o.Kind {
		case "Deployment", "DaemonSet", "StatefulSet", "Job":
			var w podTemplate
			decodeAs(t, o, &w)
			tpl := w.Spec.Template
			d.pods = append(d.pods, pod{o.where, o.Metadata.Namespace, tpl.Metadata.Labels, tpl.Spec})
		case "CronJob", "Pod", "ReplicaSet":
			d.errorf("%s: teach deploy_test.go where a %s keeps its pod spec", o.where, o.Kind)
		case "ConfigMap":
			d.configMaps[key] = o
		case "PersistentVolumeClaim":
			d.claims[key] = true
		case "Service":
			var s service
			decodeAs(t, o, &s)
			d.services[key] = s
		case "PodDisruptionBudget":
			pdbs = append(pdbs, o)
		}
	}
	for _, p := range d.pods {
		for _, c := range slices.Concat(p.spec.InitContainers, p.spec.Containers) {
			if argv, ok := switchboardArgv(c); ok {
				d.checkContainer(p, c, argv)
			}
		}
	}
	d.checkServices()
	for _, o := range pdbs {
		var s selectorSpec
		decodeAs(t, o, &s)
		if len(d.selectPods(o.Metadata.Namespace, s.Spec.Selector.MatchLabels)) == 0 {
			d.errorf("%s: selector %v matches no pod", o.where, s.Spec.Selector.MatchLabels)
		}
	}
	d.checkAcross()
	return slices.Sorted(maps.Keys(d.commands)), d.errs
}

// switchboardArgv returns the arguments after the binary of a container that runs
// switchboard: either its command names the binary, or it has no command and its image
// is switchboard's (whose entrypoint is the binary, see TestDeployDockerfile).
func switchboardArgv(c container) ([]string, bool) {
	if len(c.Command) > 0 {
		if path.Base(c.Command[0]) != "switchboard" {
			return nil, false
		}
		return slices.Concat(c.Command[1:], c.Args), true
	}
	repo, _, _ := strings.Cut(c.Image, ":")
	if path.Base(repo) != "switchboard" {
		return nil, false
	}
	return c.Args, true
}

var kubeVarRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandEnv does what the kubelet does to command and args: $(NAME) becomes the value
// of the container's env var NAME. An undefined NAME stays literal there, which is
// never what was meant, so it is an error here.
func expandEnv(env map[string]string, argv []string) ([]string, error) {
	var errs []error
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = kubeVarRef.ReplaceAllStringFunc(a, func(ref string) string {
			name := kubeVarRef.FindStringSubmatch(ref)[1]
			if v, ok := env[name]; ok {
				return v
			}
			errs = append(errs, fmt.Errorf("%s refers to %s, which is not in env", a, name))
			return ref
		})
	}
	return out, errors.Join(errs...)
}

// parseInvocation finds the subcommand and parses its flags the way Execute would,
// without running it.
func parseInvocation(argv []string) (*cobra.Command, error) {
	root := newRootCmd(io.Discard, io.Discard)
	cmd, rest, err := root.Find(argv)
	if err != nil {
		return nil, err
	}
	if !cmd.Runnable() {
		return nil, fmt.Errorf("%q is a command group, not a command", cmd.CommandPath())
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return nil, fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		return nil, fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	// --log-level and --log-format are checked before any command runs.
	if err := root.PersistentPreRunE(cmd, nil); err != nil {
		return nil, fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	return cmd, nil
}

func (d *deployment) checkContainer(p pod, c container, argv []string) {
	where := fmt.Sprintf("%s container %s", p.where, c.Name)
	env, errs := containerEnv(c)
	for _, err := range errs {
		d.errorf("%s: %v", where, err)
	}
	argv, err := expandEnv(env, argv)
	if err != nil {
		d.errorf("%s: %v", where, err)
	}
	cmd, err := parseInvocation(argv)
	if err != nil {
		d.errorf("%s: switchboard %s: %v", where, strings.Join(argv, " "), err)
		return
	}
	name := strings.TrimPrefix(cmd.CommandPath(), "switchboard ")
	d.commands[name] = true
	flag := func(n string) string { return cmd.Flags().Lookup(n).Value.String() }
	for _, err := range slices.Concat(
		checkBackendParams(cmd), checkListeners(cmd, c), checkProbes(name, c),
		checkPathFlags(cmd, c), checkGracePeriod(cmd, p),
	) {
		d.errorf("%s: %v", where, err)
	}
	switch name {
	case "registrar":
		// What the registrar's RunE refuses before it starts.
		if flag("cluster-name") == "" {
			d.errorf("%s: --cluster-name is required", where)
		}
		if flag("registry-backend") == "registrar" {
			d.errorf("%s: a registrar needs an external registry, not --registry-backend=registrar", where)
		}
		d.clusters = append(d.clusters, flag("cluster-name"))
	case "agent":
		d.addresses = append(d.addresses, strings.Split(flag("registrar-address"), ",")...)
		if f := flag("manifest"); f != "" {
			d.loadAgentManifest(where, p, c, env, f)
		}
	case "controlplane":
		if f := flag("config"); f != "" {
			d.checkControlPlaneConfig(where, p, c, f)
		}
	}
	if name == "registrar" || name == "registry init" {
		if flag("registry-backend") == "jetstream" {
			d.streams = append(d.streams, streamUse{
				where: where, init: name == "registry init", create: flag("create-stream") == "true",
				id: flag("nats-url") + " " + flag("stream") + " " + flag("subject-prefix"),
			})
		}
	}
}

// checkBackendParams refuses what registry.Open would refuse at start: a flag that the
// chosen backend does not declare.
func checkBackendParams(cmd *cobra.Command) []error {
	f := cmd.Flags().Lookup("registry-backend")
	if f == nil {
		return nil
	}
	declared := map[string]bool{}
	if name := f.Value.String(); name != "" {
		be, err := registry.Lookup(name)
		if err != nil {
			return []error{fmt.Errorf("--registry-backend: %w", err)}
		}
		for _, p := range be.Params {
			declared[p.Name] = true
		}
	}
	var errs []error
	cmd.Flags().Visit(func(fl *pflag.Flag) {
		if isBackendParam(fl.Name) && !declared[fl.Name] {
			errs = append(errs, fmt.Errorf("--%s is not a flag of registry backend %q", fl.Name, f.Value))
		}
	})
	return errs
}

// listenFlags are the flags that name an address the process serves.
var listenFlags = []string{"listen", "health-listen", "metrics-listen"}

// checkListeners: Services and probes reach the pod IP, so every listener must bind a
// non-loopback address on a declared container port.
func checkListeners(cmd *cobra.Command, c container) []error {
	var errs []error
	for _, n := range listenFlags {
		if f := cmd.Flags().Lookup(n); f != nil && f.Value.String() != "" {
			if err := checkListenAddr(f.Value.String(), c); err != nil {
				errs = append(errs, fmt.Errorf("--%s: %w", n, err))
			}
		}
	}
	return errs
}

func checkListenAddr(addr string, c container) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return fmt.Errorf("%s is loopback: probes and Services cannot reach it", addr)
	}
	n, _ := strconv.Atoi(port)
	if !slices.ContainsFunc(c.Ports, func(p portSpec) bool { return p.ContainerPort == n }) {
		return fmt.Errorf("%s: port %s is not a containerPort", addr, port)
	}
	return nil
}

// httpPaths are the paths each command serves on its health or metrics listener
// (registrar/health.go, agent/http.go, controlplane/server/http.go).
var httpPaths = map[string][]string{
	"registrar":    {"/healthz", "/readyz", "/metrics"},
	"agent":        {"/healthz", "/metrics"},
	"controlplane": {"/healthz", "/readyz", "/metrics"},
}

func checkProbes(name string, c container) []error {
	var errs []error
	for kind, p := range map[string]*probe{"readinessProbe": c.ReadinessProbe, "livenessProbe": c.LivenessProbe} {
		switch {
		case p == nil && httpPaths[name] != nil:
			errs = append(errs, fmt.Errorf("no %s", kind))
		case p == nil || p.HTTPGet == nil:
		case !slices.Contains(httpPaths[name], p.HTTPGet.Path):
			errs = append(errs, fmt.Errorf("%s: switchboard %s serves no %s", kind, name, p.HTTPGet.Path))
		case containerPort(c, p.HTTPGet.Port) == 0:
			errs = append(errs, fmt.Errorf("%s: port %q is not a containerPort", kind, p.HTTPGet.Port))
		}
	}
	return errs
}

// containerPort resolves a port given by name or number; 0 when the container has none.
func containerPort(c container, port string) int {
	for _, p := range c.Ports {
		if p.Name == port || strconv.Itoa(p.ContainerPort) == port {
			return p.ContainerPort
		}
	}
	return 0
}

// checkPathFlags: the root filesystem is read-only and distroless, so every file a
// command reads or writes must be on a mounted volume (a writable one for outputs).
func checkPathFlags(cmd *cobra.Command, c container) []error {
	var errs []error
	for n, write := range map[string]bool{"manifest": false, "config": false, "prometheus-sd": true} {
		f := cmd.Flags().Lookup(n)
		if f == nil || f.Value.String() == "" {
			continue
		}
		_, readOnly, ok := mountOf(c, f.Value.String())
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("--%s %s is on no volume mount", n, f.Value))
		case write && readOnly:
			errs = append(errs, fmt.Errorf("--%s %s is on a read-only mount", n, f.Value))
		}
	}
	return errs
}

// mountOf returns the volume mounted where file is (the deepest mount holding it).
func mountOf(c container, file string) (vol string, readOnly, ok bool) {
	best := ""
	for _, m := range c.VolumeMounts {
		if under(m.MountPath, file) && len(m.MountPath) > len(best) {
			best, vol, readOnly = m.MountPath, m.Name, m.ReadOnly
		}
	}
	return vol, readOnly, best != ""
}

// under reports whether file is inside directory dir.
func under(dir, file string) bool {
	rel, err := filepath.Rel(dir, file)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../")
}

// checkGracePeriod: the pod must outlive the command's own shutdown work (the agent
// unregistering its entries, the registrar persisting queued writes).
func checkGracePeriod(cmd *cobra.Command, p pod) []error {
	grace := 30 * time.Second // the Kubernetes default
	if g := p.spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	var errs []error
	for _, n := range []string{"shutdown-timeout", "drain-timeout"} {
		if f := cmd.Flags().Lookup(n); f != nil {
			if v, _ := time.ParseDuration(f.Value.String()); v >= grace {
				errs = append(errs, fmt.Errorf("--%s %s does not fit in terminationGracePeriodSeconds (%s)", n, v, grace))
			}
		}
	}
	return errs
}

// volumeOf returns the pod volume called name.
func (p pod) volumeOf(name string) (volume, bool) {
	for _, v := range p.spec.Volumes {
		if v.Name == name {
			return v, true
		}
	}
	return volume{}, false
}

// configMapFile returns the content of file as mounted from a ConfigMap volume.
func (d *deployment) configMapFile(p pod, c container, file string) (string, error) {
	for _, m := range c.VolumeMounts {
		if !under(m.MountPath, file) {
			continue
		}
		rel, _ := filepath.Rel(m.MountPath, file)
		v, ok := p.volumeOf(m.Name)
		if !ok || v.ConfigMap == nil {
			continue
		}
		cm, ok := d.configMaps[p.namespace+"/"+v.ConfigMap.Name]
		if !ok {
			return "", fmt.Errorf("ConfigMap %s is not defined", v.ConfigMap.Name)
		}
		if data, ok := cm.Data[rel]; ok {
			return data, nil
		}
		return "", fmt.Errorf("ConfigMap %s has no key %s", v.ConfigMap.Name, rel)
	}
	return "", fmt.Errorf("%s is not mounted from a ConfigMap", file)
}

// manifestEnvRef is agent/manifest's syntax: ${NAME}, and $${ for a literal "${".
var manifestEnvRef = regexp.MustCompile(`\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// loadAgentManifest parses the agent's manifest, mounted from its ConfigMap, the way the
// agent loads it: every ${NAME} in a value must be set in the container's env, and is
// expanded with env's (sample) values.
func (d *deployment) loadAgentManifest(where string, p pod, c container, env map[string]string, file string) {
	text, err := d.configMapFile(p, c, file)
	if err != nil {
		d.errorf("%s: --manifest %s: %v", where, file, err)
		return
	}
	refs, err := manifestRefs([]byte(text))
	if err != nil {
		d.errorf("%s: --manifest %s: %v", where, file, err)
		return
	}
	unset := slices.DeleteFunc(refs, func(name string) bool { _, ok := env[name]; return ok })
	for _, name := range unset {
		d.errorf("%s: the manifest uses ${%s}, which container %s's env does not set", where, name, c.Name)
	}
	if len(unset) > 0 {
		return // ParseEnv would only repeat the first of them
	}
	m, err := manifest.ParseEnv([]byte(text), func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	})
	if err != nil {
		d.errorf("%s: --manifest %s: %v", where, file, err)
		return
	}
	d.manifests = append(d.manifests, manifestAt{where, m})
}

// manifestRefs returns, sorted and once each, the NAMEs of every ${NAME} that the agent
// expands in a manifest: those in values, not in keys, comments or after "$$".
func manifestRefs(data []byte) ([]string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	refs := map[string]bool{}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 1; i < len(n.Content); i += 2 {
				walk(n.Content[i])
			}
		case yaml.ScalarNode:
			for _, m := range manifestEnvRef.FindAllStringSubmatch(n.Value, -1) {
				if m[1] != "" {
					refs[m[1]] = true
				}
			}
		default: // documents and sequences; an alias's target is walked where it is defined
			for _, c := range n.Content {
				walk(c)
			}
		}
	}
	walk(&doc)
	return slices.Sorted(maps.Keys(refs)), nil
}

func TestDeployManifestRefs(t *testing.T) {
	data := `# ${IN_COMMENT}
entries:
  - cluster: ${CLUSTER_NAME}
    address: &ip "${NODE_IP}"
    node: node-$${LITERAL}-${NODE_NAME}${NODE_NAME}
    ${IN_KEY}: x
    checks:
      - http: http://${NODE_IP}:9100/metrics
      - http: *ip
`
	got, err := manifestRefs([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"CLUSTER_NAME", "NODE_IP", "NODE_NAME"}; !slices.Equal(got, want) {
		t.Errorf("manifestRefs = %v, want %v", got, want)
	}
	if _, err := manifestRefs([]byte("entries: [")); err == nil {
		t.Error("manifestRefs of broken YAML: no error")
	}
}

func (d *deployment) checkControlPlaneConfig(where string, p pod, c container, file string) {
	text, err := d.configMapFile(p, c, file)
	if err != nil {
		d.errorf("%s: --config: %v", where, err)
		return
	}
	cfg, err := config.Parse([]byte(text))
	if err != nil {
		d.errorf("%s: --config %s: %v", where, file, err)
		return
	}
	for n, s := range map[string]config.Server{"northbound": cfg.Northbound, "southbound": cfg.Southbound} {
		if err := checkListenAddr(s.Endpoint, c); err != nil {
			d.errorf("%s: --config %s: %s.endpoint: %v", where, file, n, err)
		}
	}
	if cfg.Database.Type == config.DatabaseSQLite {
		vol, _, ok := mountOf(c, cfg.Database.Path)
		v, _ := p.volumeOf(vol)
		switch {
		case !ok:
			d.errorf("%s: database.path %s is on no volume mount", where, cfg.Database.Path)
		case v.PersistentVolumeClaim == nil:
			d.errorf("%s: database.path %s is not on a PersistentVolumeClaim: the topology would not survive a restart", where, cfg.Database.Path)
		case !d.claims[p.namespace+"/"+v.PersistentVolumeClaim.ClaimName]:
			d.errorf("%s: PersistentVolumeClaim %s is not defined", where, v.PersistentVolumeClaim.ClaimName)
		}
	}
}

// selectPods returns the pods in namespace ns whose labels include sel.
func (d *deployment) selectPods(ns string, sel map[string]string) []pod {
	var out []pod
	for _, p := range d.pods {
		match := len(sel) > 0 && p.namespace == ns
		for k, v := range sel {
			match = match && p.labels[k] == v
		}
		if match {
			out = append(out, p)
		}
	}
	return out
}

// checkServices: every Service selects pods, and every target port is a port of them.
func (d *deployment) checkServices() {
	for key, s := range d.services {
		ns, _, _ := strings.Cut(key, "/")
		pods := d.selectPods(ns, s.Spec.Selector)
		if len(pods) == 0 {
			d.errorf("Service %s: selector %v matches no pod", key, s.Spec.Selector)
		}
		for _, sp := range s.Spec.Ports {
			target := cmp.Or(sp.TargetPort, strconv.Itoa(sp.Port))
			for _, p := range pods {
				if !slices.ContainsFunc(p.spec.Containers, func(c container) bool { return containerPort(c, target) != 0 }) {
					d.errorf("Service %s: port %s: targetPort %s is not a port of %s", key, sp.Name, target, p.where)
				}
			}
		}
	}
}

// checkAcross checks what ties the commands together.
func (d *deployment) checkAcross() {
	if len(d.clusters) > 0 {
		for _, m := range d.manifests {
			for _, e := range m.m.Entries {
				if !slices.Contains(d.clusters, e.Endpoint.Cluster) {
					d.errorf("%s: manifest line %d: cluster %q, but the registrar accepts %v", m.where, e.Line, e.Endpoint.Cluster, d.clusters)
				}
			}
		}
	}
	for _, addr := range d.addresses {
		if err := d.checkServiceAddress(addr); err != nil {
			d.errorf("--registrar-address %s: %v", addr, err)
		}
	}
	for _, s := range d.streams {
		if s.init || s.create {
			continue
		}
		if !slices.ContainsFunc(d.streams, func(o streamUse) bool { return o.init && o.id == s.id }) {
			d.errorf("%s: --create-stream=false, but no registry init creates stream %q", s.where, s.id)
		}
	}
}

// checkServiceAddress: an in-cluster address NAME.NAMESPACE.svc[.cluster.local]:PORT
// must name a Service here with that port; other addresses are outside, not checked.
func (d *deployment) checkServiceAddress(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	host = strings.TrimSuffix(host, ".cluster.local")
	rest, ok := strings.CutSuffix(host, ".svc")
	if !ok {
		return nil
	}
	name, ns, _ := strings.Cut(rest, ".")
	s, ok := d.services[ns+"/"+name]
	if !ok {
		return fmt.Errorf("no Service %s in namespace %s", name, ns)
	}
	if !slices.ContainsFunc(s.Spec.Ports, func(p servicePort) bool { return strconv.Itoa(p.Port) == port }) {
		return fmt.Errorf("Service %s/%s has no port %s", ns, name, port)
	}
	return nil
}

// --- the Helm chart --------------------------------------------------------------------

const chartDir = "helm/switchboard"

// templateCommands says which commands the --flags in each chart template belong to.
var templateCommands = map[string][]string{
	"_helpers.tpl":      {"registrar", "registry init"},
	"registrar.yaml":    {"registrar"},
	"agent.yaml":        {"agent"},
	"controlplane.yaml": {"controlplane"},
	"stream-init.yaml":  {"registry init"},
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
			cmd := findCommand(t, name)
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

func findCommand(t *testing.T, name string) *cobra.Command {
	t.Helper()
	cmd, _, err := newRootCmd(io.Discard, io.Discard).Find(strings.Fields(name))
	if err != nil || cmd.CommandPath() != "switchboard "+name {
		t.Fatalf("no command switchboard %s (%v)", name, err)
	}
	return cmd
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
		{"nothing", map[string]any{"registrar.enabled": false, "agent.enabled": false, "controlplane.enabled": false, "streamInit.enabled": false},
			nil},
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

func chartValues(t *testing.T) map[string]any {
	t.Helper()
	var v map[string]any
	readYAML(t, filepath.Join(deployDir, chartDir, "values.yaml"), &v)
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
