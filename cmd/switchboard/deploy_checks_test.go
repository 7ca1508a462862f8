package main

// The checks the deploy tests run over a set of Kubernetes objects.

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/switchboard-mesh/switchboard/agent/manifest"
	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/registry"
)

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

	serviceAccounts map[string]bool     // namespace/name
	grants          map[string][]grant  // by ServiceAccount, namespace/name
	podClusters     []clusterAt         // --pod-cluster of the agents that register pods
	cniSockets      map[string][]string // --cni-socket of the agents, by pod
	installSockets  []socketAt          // --socket of cni install, with its pod
}

type clusterAt struct{ where, cluster string }

type socketAt struct{ where, pod, socket string }

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
		serviceAccounts: map[string]bool{}, cniSockets: map[string][]string{},
	}
	var pdbs []object
	for _, o := range objs {
		key := o.Metadata.Namespace + "/" + o.Metadata.Name
		switch o.Kind {
		case "Deployment", "DaemonSet", "StatefulSet", "Job":
			var w podTemplate
			decodeAs(t, o, &w)
			tpl := w.Spec.Template
			d.pods = append(d.pods, pod{where: o.where, kind: o.Kind, namespace: o.Metadata.Namespace, labels: tpl.Metadata.Labels, spec: tpl.Spec})
		case "ServiceAccount":
			d.serviceAccounts[key] = true
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
	var rbacErrs []error
	d.grants, rbacErrs = serviceAccountGrants(t, objs)
	d.errs = append(d.errs, rbacErrs...)
	for _, p := range d.pods {
		if sa := p.spec.ServiceAccountName; sa != "" && !d.serviceAccounts[p.namespace+"/"+sa] {
			d.errorf("%s: serviceAccountName %s: no ServiceAccount %s/%s", p.where, sa, p.namespace, sa)
		}
		for _, c := range slices.Concat(p.spec.InitContainers, p.spec.Containers) {
			if argv, ok := switchboardArgv(c); ok {
				d.checkContainer(p, c, argv)
			}
		}
	}
	for _, s := range d.installSockets {
		if !slices.Contains(d.cniSockets[s.pod], s.socket) {
			d.errorf("%s: --socket %s: no agent in the pod serves its CNI server there (its --cni-socket: %v)", s.where, s.socket, d.cniSockets[s.pod])
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
	case "cni install":
		d.checkCNIInstall(where, p, c, cmd)
	case "kube-sync":
		d.checkKubeAPI(where, p, cmd)
	}
	if name == "agent" && flagValue(cmd, "cni-socket") != "" {
		d.checkPodRegistration(where, p, c, cmd)
	}
	if name == "registrar" || name == "registry init" || name == "kube-sync" {
		if flagValue(cmd, "registry-backend") == "jetstream" {
			d.streams = append(d.streams, streamUse{
				where: where, init: name == "registry init", create: flagValue(cmd, "create-stream") == "true",
				id: flagValue(cmd, "nats-url") + " " + flagValue(cmd, "stream") + " " + flagValue(cmd, "subject-prefix"),
			})
		}
	}
}

// flagValue is cmd's flag n, "" when cmd has no such flag.
func flagValue(cmd *cobra.Command, n string) string {
	if f := cmd.Flags().Lookup(n); f != nil {
		return f.Value.String()
	}
	return ""
}

// --- pod registration and the Kubernetes API -------------------------------------------

// checkPodRegistration: an agent that serves the CNI plugin of its node. The plugin runs
// on the host and dials the socket at the path it was installed with, so the socket
// must be on a hostPath volume mounted at its own host path; the pod records must be
// on the node, to outlive the pod; the agent must know its node and reach the API
// server, and run on every node, since each node's pods register through its agent.
func (d *deployment) checkPodRegistration(where string, p pod, c container, cmd *cobra.Command) {
	socket := flagValue(cmd, "cni-socket")
	switch host, readOnly, err := hostPathOf(p, c, socket); {
	case err != nil:
		d.errorf("%s: --cni-socket %s: %v: the CNI plugin runs on the host and cannot reach it", where, socket, err)
	case host != socket:
		d.errorf("%s: --cni-socket %s is %s on the host: the CNI plugin, on the host, dials the path it is given", where, socket, host)
	case readOnly:
		d.errorf("%s: --cni-socket %s is on a read-only mount", where, socket)
	}
	d.cniSockets[p.where] = append(d.cniSockets[p.where], socket)
	switch dir := flagValue(cmd, "cni-state-dir"); {
	case dir == "":
		d.errorf("%s: --cni-state-dir is empty: the pod records would not outlive the agent", where)
	default:
		if _, readOnly, err := hostPathOf(p, c, dir); err != nil {
			d.errorf("%s: --cni-state-dir %s: %v: the pod records would not outlive the pod", where, dir, err)
		} else if readOnly {
			d.errorf("%s: --cni-state-dir %s is on a read-only mount", where, dir)
		}
	}
	if n := flagValue(cmd, "node-name"); n != fieldRefSamples["spec.nodeName"] {
		d.errorf("%s: --node-name %q is not the pod's node: set it from an env var with fieldRef spec.nodeName", where, n)
	}
	d.checkKubeAPI(where, p, cmd)
	if p.kind == "DaemonSet" && !slices.ContainsFunc(p.spec.Tolerations, func(t toleration) bool {
		return t.Operator == "Exists" && t.Key == "" && t.Effect == ""
	}) {
		d.errorf("%s: pod registration, but the DaemonSet does not tolerate every taint (operator Exists): pods of tainted nodes would not be registered", p.where)
	}
	if !p.spec.HostNetwork || p.spec.DNSPolicy != "ClusterFirstWithHostNet" {
		// Otherwise the agent's own sandbox goes through the plugin, which needs the
		// agent: with onAgentUnreachable fail, a restarted node never starts it.
		d.errorf("%s: pod registration, but the agent is not on the host network (hostNetwork with dnsPolicy ClusterFirstWithHostNet): its own pod would need the CNI plugin, which needs the agent", p.where)
	}
	d.podClusters = append(d.podClusters, clusterAt{where, flagValue(cmd, "pod-cluster")})
}

// checkCNIInstall: the plugin and its configuration go to the node, so the directories
// must be writable hostPath mounts.
func (d *deployment) checkCNIInstall(where string, p pod, c container, cmd *cobra.Command) {
	for _, n := range []string{"bin-dir", "conf-dir"} {
		dir := flagValue(cmd, n)
		if dir == "" {
			continue
		}
		if _, readOnly, err := hostPathOf(p, c, dir); err != nil {
			d.errorf("%s: --%s %s: %v: nothing would be installed on the node", where, n, dir, err)
		} else if readOnly {
			d.errorf("%s: --%s %s is on a read-only mount", where, n, dir)
		}
	}
	d.installSockets = append(d.installSockets, socketAt{where, p.where, flagValue(cmd, "socket")})
}

// checkKubeAPI: a command that talks to the API server with the in-cluster config
// (--kubeconfig empty) needs the pod's service account token, and a ServiceAccount of
// its own with rules bound to it, not the namespace's default one.
func (d *deployment) checkKubeAPI(where string, p pod, cmd *cobra.Command) {
	if cmd.Flags().Lookup("kubeconfig") == nil || flagValue(cmd, "kubeconfig") != "" {
		return
	}
	sa := p.spec.ServiceAccountName
	switch {
	case p.spec.AutomountServiceAccountToken != nil && !*p.spec.AutomountServiceAccountToken:
		d.errorf("%s: the in-cluster API config (--kubeconfig empty), but automountServiceAccountToken is false", where)
	case sa == "":
		d.errorf("%s: the in-cluster API config (--kubeconfig empty), but no serviceAccountName: give it a ServiceAccount of its own", where)
	case len(d.grants[p.namespace+"/"+sa]) == 0:
		d.errorf("%s: ServiceAccount %s/%s is bound to no Role or ClusterRole", where, p.namespace, sa)
	}
}

// hostPathOf returns where file (a file, or a mount point itself) in container c is on
// the node, and whether it is mounted read-only; file must be on a hostPath volume.
func hostPathOf(p pod, c container, file string) (string, bool, error) {
	best := -1
	for i, m := range c.VolumeMounts {
		if (filepath.Clean(m.MountPath) == filepath.Clean(file) || under(m.MountPath, file)) &&
			(best < 0 || len(m.MountPath) > len(c.VolumeMounts[best].MountPath)) {
			best = i
		}
	}
	if best < 0 {
		return "", false, errors.New("on no volume mount")
	}
	m := c.VolumeMounts[best]
	v, ok := p.volumeOf(m.Name)
	switch {
	case !ok:
		return "", false, fmt.Errorf("volume %s is not defined", m.Name)
	case v.HostPath == nil:
		return "", false, fmt.Errorf("on volume %s, which is not a hostPath", m.Name)
	}
	rel, _ := filepath.Rel(m.MountPath, file)
	return filepath.Join(v.HostPath.Path, rel), m.ReadOnly, nil
}

// grant is a rule held by a ServiceAccount, in a namespace ("" for the whole cluster).
type grant struct {
	namespace string
	rule      policyRule
}

// serviceAccountGrants returns the rules bound to each ServiceAccount (namespace/name)
// by the RoleBindings and ClusterRoleBindings in objs, and every binding that names a
// role or ServiceAccount objs do not define.
func serviceAccountGrants(t *testing.T, objs []object) (map[string][]grant, []error) {
	t.Helper()
	roles := map[string]role{} // kind/namespace/name
	accounts := map[string]bool{}
	for _, o := range objs {
		switch o.Kind {
		case "Role", "ClusterRole":
			var r role
			decodeAs(t, o, &r)
			ns := o.Metadata.Namespace
			if o.Kind == "ClusterRole" {
				ns = ""
			}
			roles[o.Kind+"/"+ns+"/"+o.Metadata.Name] = r
		case "ServiceAccount":
			accounts[o.Metadata.Namespace+"/"+o.Metadata.Name] = true
		}
	}
	grants := map[string][]grant{}
	var errs []error
	for _, o := range objs {
		if o.Kind != "RoleBinding" && o.Kind != "ClusterRoleBinding" {
			continue
		}
		var b roleBinding
		decodeAs(t, o, &b)
		scope := o.Metadata.Namespace
		if o.Kind == "ClusterRoleBinding" {
			scope = ""
		}
		roleNS := scope
		if b.RoleRef.Kind == "ClusterRole" {
			roleNS = ""
		} else if o.Kind == "ClusterRoleBinding" {
			errs = append(errs, fmt.Errorf("%s: a ClusterRoleBinding binds a ClusterRole, not a %s", o.where, b.RoleRef.Kind))
			continue
		}
		r, ok := roles[b.RoleRef.Kind+"/"+roleNS+"/"+b.RoleRef.Name]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: roleRef %s %s is not defined", o.where, b.RoleRef.Kind, b.RoleRef.Name))
			continue
		}
		for _, s := range b.Subjects {
			if s.Kind != "ServiceAccount" {
				continue
			}
			ns := cmp.Or(s.Namespace, o.Metadata.Namespace)
			if !accounts[ns+"/"+s.Name] {
				errs = append(errs, fmt.Errorf("%s: subject ServiceAccount %s/%s is not defined", o.where, ns, s.Name))
				continue
			}
			for _, rule := range r.Rules {
				grants[ns+"/"+s.Name] = append(grants[ns+"/"+s.Name], grant{scope, rule})
			}
		}
	}
	return grants, errs
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
// (registrar/health.go, agent/http.go, controlplane/server/http.go,
// cmd/switchboard/kubesync.go).
var httpPaths = map[string][]string{
	"registrar":    {"/healthz", "/readyz", "/metrics"},
	"agent":        {"/healthz", "/metrics"},
	"controlplane": {"/healthz", "/readyz", "/metrics"},
	"kube-sync":    {"/healthz", "/readyz", "/metrics"},
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
	// The control plane refuses to start on what it considers exposed, and no flag in
	// the manifest can be assumed to allow it.
	if err := cfg.CheckListeners(); err != nil {
		d.errorf("%s: --config %s: the control plane would refuse to start: %v", where, file, err)
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
	if len(d.clusters) > 0 {
		for _, c := range d.podClusters {
			if !slices.Contains(d.clusters, c.cluster) {
				d.errorf("%s: --pod-cluster %q, but the registrar accepts %v", c.where, c.cluster, d.clusters)
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
