package main

// Pod registration: the agent DaemonSet that installs `switchboard cni` on every node
// and registers that node's pods, in the Helm chart (cni.enabled) and in
// deploy/kubernetes/agent-cni.yaml; and the chart's kube-sync Deployment. The tests
// here check the objects' shape (what is installed where, which host paths, which
// RBAC); TestDeployHelmChartRenders and TestDeployKubernetesAgentCNI also put them
// through the checks of deploy_checks_test.go, which parse every invocation with the
// real command tree.

import (
	"cmp"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// cniCommands is what the chart runs with cni.enabled.
var cniCommands = []string{"agent", "cni install", "controlplane", "registrar", "registry init"}

// cniWant is what an agent DaemonSet with pod registration must hold.
type cniWant struct {
	binDir, confDir string   // the node's CNI directories, as hostPath paths
	install         []string // the args of the cni-install init container
	agentArgs       []string // among the agent container's args
	keep            bool     // a cni-keep container runs install with --keep
	serviceAccount  string
}

// The install args and the agent args the chart and agent-cni.yaml give by default.
var (
	cniInstallArgs = []string{"cni", "install", "--bin-dir=/host/opt/cni/bin", "--conf-dir=/host/etc/cni/net.d",
		"--socket=/run/switchboard/cni.sock", "--on-agent-unreachable=allow", "--wait=5m", "--log-format=json"}
	cniAgentArgs = []string{"--cni-socket=/run/switchboard/cni.sock", "--cni-state-dir=/var/lib/switchboard/cni",
		"--kubeconfig=", "--node-name=$(NODE_NAME)", "--pod-cluster=cluster-a",
		"--pod-selector=switchboard.dev/register=true", "--pod-ttl=30s", "--pod-resync=30s"}
	// podReadOnly is the one rule the agent's ServiceAccount holds.
	podReadOnly = []string{`* [""] [pods] [] [get list watch]`}
)

func defaultCNIWant() cniWant {
	return cniWant{binDir: "/opt/cni/bin", confDir: "/etc/cni/net.d", install: cniInstallArgs,
		agentArgs: cniAgentArgs, serviceAccount: "switchboard-agent"}
}

// checkCNIAgent checks the agent DaemonSet in objs against want.
func checkCNIAgent(t *testing.T, objs []object, want cniWant) {
	t.Helper()
	p := podOf(t, objs, "DaemonSet", "switchboard-agent")
	if !slices.ContainsFunc(p.spec.Tolerations, func(t toleration) bool { return t == toleration{Operator: "Exists"} }) {
		t.Errorf("tolerations %v: want operator Exists, so every node's pods register", p.spec.Tolerations)
	}

	// The init container installs the plugin into the node's CNI directories.
	if n := len(p.spec.InitContainers); n != 1 {
		t.Fatalf("%d init containers, want 1 (cni-install)", n)
	}
	install := p.spec.InitContainers[0]
	if install.Name != "cni-install" || !slices.Equal(install.Args, want.install) {
		t.Errorf("init container %s runs %q, want cni-install running %q", install.Name, install.Args, want.install)
	}
	checkHostMount(t, p, install, "/host/opt/cni/bin", want.binDir, false)
	checkHostMount(t, p, install, "/host/etc/cni/net.d", want.confDir, false)

	// The agent serves the plugin on a host socket and keeps its records on the node.
	agent := containerNamed(t, p, "agent")
	for _, a := range want.agentArgs {
		if !slices.Contains(agent.Args, a) {
			t.Errorf("agent args %q: no %q", agent.Args, a)
		}
	}
	if !slices.ContainsFunc(agent.Env, func(e envVar) bool {
		return e.Name == "NODE_NAME" && e.Value == nil && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil &&
			e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
	}) {
		t.Errorf("agent env %+v: no NODE_NAME from fieldRef spec.nodeName", agent.Env)
	}
	checkHostMount(t, p, agent, "/run/switchboard", "/run/switchboard", true)
	checkHostMount(t, p, agent, "/var/lib/switchboard/cni", "/var/lib/switchboard/cni", true)

	// Optionally, a sidecar keeps the plugin installed.
	keep := slices.IndexFunc(p.spec.Containers, func(c container) bool { return c.Name == "cni-keep" })
	switch {
	case want.keep && keep < 0:
		t.Errorf("no cni-keep container")
	case !want.keep && keep >= 0:
		t.Errorf("a cni-keep container, which was not asked for")
	case want.keep:
		c := p.spec.Containers[keep]
		if wantArgs := append(slices.Clone(want.install), "--keep"); !slices.Equal(c.Args, wantArgs) {
			t.Errorf("cni-keep runs %q, want %q", c.Args, wantArgs)
		}
		checkHostMount(t, p, c, "/host/opt/cni/bin", want.binDir, false)
		checkHostMount(t, p, c, "/host/etc/cni/net.d", want.confDir, false)
	}
	if n := len(p.spec.Containers); n != 1+boolInt(want.keep) {
		t.Errorf("%d containers, want agent%s", n, map[bool]string{true: " and cni-keep"}[want.keep])
	}

	// RBAC: its own ServiceAccount, which may get, list and watch pods, and nothing more.
	if p.spec.ServiceAccountName != want.serviceAccount {
		t.Errorf("serviceAccountName %q, want %q", p.spec.ServiceAccountName, want.serviceAccount)
	}
	if a := p.spec.AutomountServiceAccountToken; a == nil || !*a {
		t.Errorf("automountServiceAccountToken %v, want true: the agent watches pods", a)
	}
	grants, errs := serviceAccountGrants(t, objs)
	for _, err := range errs {
		t.Error(err)
	}
	if got := grantStrings(grants[p.namespace+"/"+want.serviceAccount]); !slices.Equal(got, podReadOnly) {
		t.Errorf("ServiceAccount %s holds %q, want exactly %q", want.serviceAccount, got, podReadOnly)
	}
	// And nothing else in the set grants anything.
	var roles []string
	for _, o := range objs {
		if o.Kind == "Role" || o.Kind == "ClusterRole" {
			roles = append(roles, o.where)
		}
	}
	if len(roles) != 1 {
		t.Errorf("roles %v, want the agent's ClusterRole only", roles)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkHostMount: container c mounts the hostPath volume for host directory host at
// mountPath (hostPath type DirectoryOrCreate), writable.
func checkHostMount(t *testing.T, p pod, c container, mountPath, host string, sameOnHost bool) {
	t.Helper()
	i := slices.IndexFunc(c.VolumeMounts, func(m volumeMount) bool { return m.MountPath == mountPath })
	if i < 0 {
		t.Errorf("container %s mounts nothing at %s", c.Name, mountPath)
		return
	}
	m := c.VolumeMounts[i]
	v, ok := p.volumeOf(m.Name)
	switch {
	case !ok:
		t.Errorf("container %s mounts volume %s, which is not defined", c.Name, m.Name)
	case v.HostPath == nil:
		t.Errorf("container %s: %s is on volume %s, not a hostPath", c.Name, mountPath, m.Name)
	case v.HostPath.Path != host || v.HostPath.Type != "DirectoryOrCreate":
		t.Errorf("container %s: %s is hostPath %s (type %q), want %s (DirectoryOrCreate)", c.Name, mountPath, v.HostPath.Path, v.HostPath.Type, host)
	case m.ReadOnly:
		t.Errorf("container %s: %s is mounted read-only", c.Name, mountPath)
	}
	if sameOnHost && host != mountPath {
		t.Errorf("container %s: %s is %s on the host; the plugin on the host needs the same path", c.Name, mountPath, host)
	}
}

// podOf returns the pod template of the workload kind/name in objs.
func podOf(t *testing.T, objs []object, kind, name string) pod {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind && o.Metadata.Name == name {
			var w podTemplate
			decodeAs(t, o, &w)
			return pod{where: o.where, kind: kind, namespace: o.Metadata.Namespace, labels: w.Spec.Template.Metadata.Labels, spec: w.Spec.Template.Spec}
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return pod{}
}

func containerNamed(t *testing.T, p pod, name string) container {
	t.Helper()
	for _, c := range p.spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("%s: no container %s", p.where, name)
	return container{}
}

// grantStrings spells grants comparably: scope (a namespace, * for the cluster),
// API groups, resources, resource names, verbs; sorted.
func grantStrings(gs []grant) []string {
	var out []string
	for _, g := range gs {
		groups := make([]string, len(g.rule.APIGroups))
		for i, a := range g.rule.APIGroups {
			groups[i] = fmt.Sprintf("%q", a)
		}
		out = append(out, fmt.Sprintf("%s %v %v %v %v", cmp.Or(g.namespace, "*"), groups, g.rule.Resources, g.rule.ResourceNames, g.rule.Verbs))
	}
	slices.Sort(out)
	return out
}

// TestDeployHelmChartCNIOff: with cni.enabled and kubeSync.enabled false (the
// default), the chart renders what it rendered before they existed, whatever the
// other cni, pods and kubeSync values say.
func TestDeployHelmChartCNIOff(t *testing.T) {
	def, err := renderChart(t, chartValues(t))
	if err != nil {
		t.Fatal(err)
	}
	values := chartValues(t)
	for k, v := range map[string]any{
		"cni.binDir": "/home/kubernetes/bin", "cni.confDir": "/etc/cni/conf.d", "cni.onAgentUnreachable": "fail",
		"cni.wait": "1m", "cni.keepInstalled": true, "pods.cluster": "pods-b", "pods.selector": "app=web",
		"pods.ttl": "1m", "pods.resync": "5m", "kubeSync.cluster": "kube-b", "kubeSync.exportNamespace": "x",
		"kubeSync.importNamespace": "y", "kubeSync.extraArgs": []any{"--log-level=debug"},
	} {
		set(t, values, k, v)
	}
	other, err := renderChart(t, values)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(def, other) {
		for f := range def {
			if def[f] != other[f] {
				t.Errorf("templates/%s renders differently with cni and kubeSync off:\n%s\n---\n%s", f, def[f], other[f])
			}
		}
	}
	for _, f := range []string{"agent-rbac.yaml", "kube-sync.yaml"} {
		if s := strings.TrimSpace(def[f]); s != "" {
			t.Errorf("templates/%s renders with cni and kubeSync off:\n%s", f, s)
		}
	}
	for f, s := range def {
		for _, no := range []string{"initContainers", "hostPath", "serviceAccountName", "--cni-", "--pod-", "--kubeconfig", "--node-name", "cni install"} {
			if strings.Contains(s, no) {
				t.Errorf("templates/%s has %q with cni off", f, no)
			}
		}
	}
	objs := decodeFiles(t, def)
	for _, o := range objs {
		switch o.Kind {
		case "ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding":
			t.Errorf("%s with cni off", o.where)
		}
	}
	p := podOf(t, objs, "DaemonSet", "switchboard-agent")
	if a := p.spec.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("agent automountServiceAccountToken %v with cni off, want false", a)
	}
}

func TestDeployHelmChartCNI(t *testing.T) {
	tests := []struct {
		name string
		set  map[string]any
		want func(*cniWant)
	}{
		{"defaults", nil, func(*cniWant) {}},
		{"kept installed, elsewhere, fail", map[string]any{"cni.keepInstalled": true, "cni.binDir": "/home/kubernetes/bin",
			"cni.confDir": "/etc/cni/conf.d", "cni.onAgentUnreachable": "fail", "cni.wait": "1m"}, func(w *cniWant) {
			w.keep, w.binDir, w.confDir = true, "/home/kubernetes/bin", "/etc/cni/conf.d"
			w.install = slices.Clone(w.install)
			w.install[5], w.install[6] = "--on-agent-unreachable=fail", "--wait=1m"
		}},
		{"pods", map[string]any{"pods.cluster": "pods-b", "pods.selector": "app in (web, api)", "pods.ttl": "1m", "pods.resync": "5m",
			"registrar.enabled": false, "agent.registrarAddress": "registrar.example.net:9443"}, func(w *cniWant) {
			w.agentArgs = []string{"--pod-cluster=pods-b", "--pod-selector=app in (web, api)", "--pod-ttl=1m", "--pod-resync=5m"}
		}},
		{"no tolerations asked for", map[string]any{"agent.tolerations": []any{}}, func(*cniWant) {}},
		{"text logs", map[string]any{"logFormat": "text"}, func(w *cniWant) {
			w.install = append(slices.Clone(w.install[:len(w.install)-1]), "--log-format=text")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			values := chartValues(t)
			set(t, values, "cni.enabled", true)
			for k, v := range tt.set {
				set(t, values, k, v)
			}
			sch, _ := chartSchema(t)
			if err := validateValues(t, sch, values); err != nil {
				t.Fatal(err)
			}
			out, err := renderChart(t, values)
			if err != nil {
				t.Fatal(err)
			}
			want := defaultCNIWant()
			tt.want(&want)
			objs := decodeFiles(t, out)
			checkCNIAgent(t, objs, want)
			for _, o := range objs {
				if (o.Kind == "ClusterRole" || o.Kind == "ClusterRoleBinding") && o.Metadata.Namespace != "" {
					t.Errorf("%s: a cluster-scoped object with a namespace", o.where)
				}
			}
		})
	}
}

// TestDeployKubernetesAgentCNI: agent-cni.yaml, in place of agent.yaml, is agent.yaml's
// agent with pod registration.
func TestDeployKubernetesAgentCNI(t *testing.T) {
	files := kubernetesFiles(t, "agent-cni.yaml")
	objs := decodeFiles(t, files)
	checkCNIAgent(t, objs, defaultCNIWant())

	plain := decodeObjects(t, "agent.yaml", []byte(kubernetesFiles(t, "")["agent.yaml"]))
	cni := decodeObjects(t, "agent-cni.yaml", []byte(files["agent.yaml"]))
	configMap := func(objs []object) map[string]string {
		for _, o := range objs {
			if o.Kind == "ConfigMap" {
				return o.Data
			}
		}
		t.Fatal("no ConfigMap")
		return nil
	}
	if !maps.Equal(configMap(plain), configMap(cni)) {
		t.Error("agent-cni.yaml's manifest ConfigMap differs from agent.yaml's")
	}
	was := containerNamed(t, podOf(t, plain, "DaemonSet", "switchboard-agent"), "agent")
	is := containerNamed(t, podOf(t, cni, "DaemonSet", "switchboard-agent"), "agent")
	for _, a := range was.Args {
		if !slices.Contains(is.Args, a) {
			t.Errorf("agent-cni.yaml's agent lacks agent.yaml's %q", a)
		}
	}
	if !reflect.DeepEqual(was.Env, is.Env) || !slices.Equal(was.Ports, is.Ports) {
		t.Errorf("agent-cni.yaml's agent env or ports differ from agent.yaml's")
	}
	for _, m := range was.VolumeMounts {
		if !slices.Contains(is.VolumeMounts, m) {
			t.Errorf("agent-cni.yaml's agent does not mount %s at %s", m.Name, m.MountPath)
		}
	}

	t.Run("the real flags", func(t *testing.T) {
		if got := mustCheck(t, objs); !slices.Equal(got, cniCommands) {
			t.Errorf("deploy/kubernetes with agent-cni.yaml runs %v, want %v", got, cniCommands)
		}
	})
}

// TestDeployCNIChecksCatchMistakes: each mistake made in a copy of agent-cni.yaml must
// be reported by the checks of deploy_checks_test.go.
func TestDeployCNIChecksCatchMistakes(t *testing.T) {
	tests := []struct {
		old, new string
		want     string
	}{
		{"path: /run/switchboard\n", "path: /var/run/switchboard\n", "is /var/run/switchboard/cni.sock on the host"},
		{"- --cni-state-dir=/var/lib/switchboard/cni", "- --cni-state-dir=/tmp/cni", "--cni-state-dir /tmp/cni: on no volume mount"},
		{"- name: cni-state\n          hostPath:\n            path: /var/lib/switchboard/cni\n            type: DirectoryOrCreate",
			"- name: cni-state\n          emptyDir: {}", "on volume cni-state, which is not a hostPath"},
		{"--socket=/run/switchboard/cni.sock", "--socket=/run/switchboard/agent.sock", "no agent in the pod serves its CNI server there"},
		{"--node-name=$(NODE_NAME)", "--node-name=$(NODE_IP)", `--node-name "192.0.2.10" is not the pod's node`},
		{"--pod-cluster=cluster-a", "--pod-cluster=cluster-b", `--pod-cluster "cluster-b", but the registrar accepts [cluster-a]`},
		{"automountServiceAccountToken: true", "automountServiceAccountToken: false", "automountServiceAccountToken is false"},
		{"      serviceAccountName: switchboard-agent\n", "", "no serviceAccountName"},
		{"  kind: ClusterRole\n  name: switchboard-agent", "  kind: ClusterRole\n  name: switchboard-agnet", "roleRef ClusterRole switchboard-agnet is not defined"},
		{"    name: switchboard-agent\n    namespace: switchboard-system", "    name: switchboard-agent\n    namespace: default",
			"subject ServiceAccount default/switchboard-agent is not defined"},
		{"- operator: Exists", "- key: dedicated\n          operator: Exists", "does not tolerate every taint"},
		{"      hostNetwork: true\n", "", "the agent is not on the host network"},
		{"--bin-dir=/host/opt/cni/bin", "--bin-dir=/opt/cni/bin", "--bin-dir /opt/cni/bin: on no volume mount"},
		{"              mountPath: /host/etc/cni/net.d\n", "              mountPath: /host/etc/cni/net.d\n              readOnly: true\n",
			"--conf-dir /host/etc/cni/net.d is on a read-only mount"},
	}
	files := kubernetesFiles(t, "agent-cni.yaml")
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if !strings.Contains(files["agent.yaml"], tt.old) {
				t.Fatalf("agent-cni.yaml no longer contains %q: update this test", tt.old)
			}
			broken := maps.Clone(files)
			broken["agent.yaml"] = strings.Replace(files["agent.yaml"], tt.old, tt.new, 1)
			_, errs := checkObjects(t, decodeFiles(t, broken))
			if !slices.ContainsFunc(errs, func(err error) bool { return strings.Contains(err.Error(), tt.want) }) {
				t.Errorf("no error containing %q; got %v", tt.want, errs)
			}
		})
	}
}

func TestDeployHelmChartKubeSync(t *testing.T) {
	full := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	jetstream := []string{"kube-sync", "--registry-backend=jetstream", "--nats-url=nats://nats.nats.svc:4222", "--create-stream=false", "--cluster=cluster-a"}
	tail := []string{"--metrics-listen=0.0.0.0:9106", "--log-format=json"}
	tests := []struct {
		name        string
		set         map[string]any
		export, imp string // "": that direction is off
		args        []string
	}{
		{"export only", map[string]any{"kubeSync.exportNamespace": "mesh"}, "mesh", "",
			slices.Concat(jetstream, []string{"--export-namespace=mesh"}, tail)},
		{"import only", map[string]any{"kubeSync.importNamespace": "apps"}, "", "apps",
			slices.Concat(jetstream, []string{"--import-namespace=apps"}, tail)},
		{"both, cluster, etcd", map[string]any{"kubeSync.exportNamespace": "mesh", "kubeSync.importNamespace": "apps",
			"kubeSync.cluster": "kube-b", "backend.name": "etcd", "kubeSync.extraArgs": []any{"--log-level=debug"}}, "mesh", "apps",
			[]string{"kube-sync", "--registry-backend=etcd", "--etcd-endpoints=etcd-0.etcd:2379,etcd-1.etcd:2379,etcd-2.etcd:2379",
				"--cluster=kube-b", "--export-namespace=mesh", "--import-namespace=apps",
				"--metrics-listen=0.0.0.0:9106", "--log-format=json", "--log-level=debug"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			values := chartValues(t)
			set(t, values, "kubeSync.enabled", true)
			for k, v := range tt.set {
				set(t, values, k, v)
			}
			sch, _ := chartSchema(t)
			if err := validateValues(t, sch, values); err != nil {
				t.Fatal(err)
			}
			out, err := renderChart(t, values)
			if err != nil {
				t.Fatal(err)
			}
			objs := decodeObjects(t, "kube-sync.yaml", []byte(out["kube-sync.yaml"]))
			p := podOf(t, objs, "Deployment", "switchboard-kube-sync")
			c := containerNamed(t, p, "kube-sync")
			if !slices.Equal(c.Args, tt.args) {
				t.Errorf("kube-sync runs %q, want %q", c.Args, tt.args)
			}
			if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 9106 {
				t.Errorf("ports %+v, want 9106 (metrics)", c.Ports)
			}
			if r := c.ReadinessProbe; r == nil || r.HTTPGet == nil || r.HTTPGet.Path != "/readyz" || r.HTTPGet.Port != "metrics" {
				t.Errorf("readinessProbe %+v, want GET /readyz on port metrics", r)
			}
			if a := p.spec.AutomountServiceAccountToken; p.spec.ServiceAccountName != "switchboard-kube-sync" || a == nil || !*a {
				t.Errorf("serviceAccountName %q, automountServiceAccountToken %v: want switchboard-kube-sync, true", p.spec.ServiceAccountName, a)
			}
			grants, errs := serviceAccountGrants(t, objs)
			for _, err := range errs {
				t.Error(err)
			}
			var want []grant
			if tt.export != "" {
				want = append(want, grant{tt.export, policyRule{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: full}},
					grant{tt.export, policyRule{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: full}})
			}
			if tt.imp != "" {
				want = append(want, grant{tt.imp, policyRule{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}}})
			}
			if got := grantStrings(grants["switchboard-system/switchboard-kube-sync"]); !slices.Equal(got, grantStrings(want)) {
				t.Errorf("kube-sync holds\n%q\nwant exactly\n%q", got, grantStrings(want))
			}
			for _, o := range objs {
				if o.Kind == "ClusterRole" || o.Kind == "ClusterRoleBinding" {
					t.Errorf("%s: kube-sync needs no cluster-wide rights", o.where)
				}
			}
		})
	}
}

// Each direction of kube-sync is opt-in: enabling it without naming a namespace to
// export to or import from is a mistake the chart names.
func TestDeployHelmChartKubeSyncNeedsADirection(t *testing.T) {
	values := chartValues(t)
	set(t, values, "kubeSync.enabled", true)
	_, err := renderChart(t, values)
	if err == nil || !strings.Contains(err.Error(), "kubeSync.exportNamespace or kubeSync.importNamespace") {
		t.Fatalf("render: %v, want it to ask for a direction", err)
	}
}
