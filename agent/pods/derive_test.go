package pods_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/switchboard-mesh/switchboard/agent/manifest"
	"github.com/switchboard-mesh/switchboard/agent/pods"
	"github.com/switchboard-mesh/switchboard/endpoint"
)

func deriveConfig() pods.DeriveConfig {
	return pods.DeriveConfig{Cluster: "prod", NodeName: node}
}

func withPorts(ports ...corev1.ContainerPort) podOpt {
	return func(p *corev1.Pod) { p.Spec.Containers[0].Ports = ports }
}

func cport(name string, n int32) corev1.ContainerPort {
	return corev1.ContainerPort{Name: name, ContainerPort: n}
}

func withPhase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func keyOf(proto, ip string, port int) string {
	return endpoint.Key{Cluster: "prod", Service: "web", Protocol: proto, Address: ip, Port: port}.String()
}

func TestDerive(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	no, yes := false, true
	ip := withIPs("10.0.0.1")
	for _, tc := range []struct {
		name string
		opts []podOpt
		ips  []string
		cfg  func(*pods.DeriveConfig)
		// want lists the entries' keys; nil with skip == "" means nothing and no reason.
		want []string
		held string
		skip string // a substring of the reason
	}{
		// Which pods are managed.
		{name: "default selector", opts: []podOpt{ip}, want: []string{key("10.0.0.1", 8080)}},
		{name: "not selected", opts: []podOpt{ip, withLabel(pods.KeyRegister, "")}},
		{name: "annotation opts in", opts: []podOpt{ip, withLabel(pods.KeyRegister, ""), withAnnotation(pods.KeyRegister, "true")}, want: []string{key("10.0.0.1", 8080)}},
		{name: "annotation opts out", opts: []podOpt{ip, withAnnotation(pods.KeyRegister, "false")}},
		{name: "annotation neither", opts: []podOpt{ip, withAnnotation(pods.KeyRegister, "yes")}, skip: `switchboard.dev/register: "yes"`},
		{name: "own selector", opts: []podOpt{ip, withLabel(pods.KeyRegister, ""), withLabel("team", "a")},
			cfg: func(c *pods.DeriveConfig) { c.Selector = labels.SelectorFromSet(labels.Set{"team": "a"}) }, want: []string{key("10.0.0.1", 8080)}},
		{name: "own selector, default label only", opts: []podOpt{ip},
			cfg: func(c *pods.DeriveConfig) { c.Selector = labels.SelectorFromSet(labels.Set{"team": "a"}) }},
		{name: "hostNetwork", opts: []podOpt{ip, func(p *corev1.Pod) { p.Spec.HostNetwork = true }}, skip: "hostNetwork"},
		{name: "hostNetwork, not managed", opts: []podOpt{ip, withLabel(pods.KeyRegister, ""), func(p *corev1.Pod) { p.Spec.HostNetwork = true }}},
		{name: "terminating: draining (TestDeriveDrainsATerminatingPod)", opts: []podOpt{ip, func(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now }},
			want: []string{key("10.0.0.1", 8080)}},
		{name: "succeeded", opts: []podOpt{ip, withPhase(corev1.PodSucceeded)}},
		{name: "failed", opts: []podOpt{ip, withPhase(corev1.PodFailed)}},

		// The service name.
		{name: "service annotation first", opts: []podOpt{ip, withAnnotation(pods.AnnotationService, "api"), withLabel(pods.LabelAppName, "x")},
			want: []string{endpoint.Key{Cluster: "prod", Service: "api", Protocol: "http", Address: "10.0.0.1", Port: 8080}.String()}},
		{name: "app.kubernetes.io/name before app", opts: []podOpt{ip, withLabel(pods.LabelAppName, "api")},
			want: []string{endpoint.Key{Cluster: "prod", Service: "api", Protocol: "http", Address: "10.0.0.1", Port: 8080}.String()}},
		{name: "no service name", opts: []podOpt{ip, withLabel("app", "")}, skip: "no service name"},
		{name: "invalid service name", opts: []podOpt{ip, withLabel("app", "my.app")}, skip: `service name from label app: invalid endpoint: service "my.app"`},

		// Ports and protocols.
		{name: "named ports only, protocol from the name", opts: []podOpt{ip, withPorts(cport("http", 80), cport("", 81), cport("grpc-api", 90))},
			want: []string{keyOf("grpc", "10.0.0.1", 90), key("10.0.0.1", 80)}},
		{name: "sidecar ports, not init containers'", opts: []podOpt{ip, func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{
				{Name: "proxy", RestartPolicy: &always, Ports: []corev1.ContainerPort{cport("envoy-admin", 15000)}},
				{Name: "init", Ports: []corev1.ContainerPort{cport("setup", 1)}},
			}
		}}, want: []string{keyOf("envoy", "10.0.0.1", 15000), key("10.0.0.1", 8080)}},
		{name: "ports annotation restricts", opts: []podOpt{ip, withPorts(cport("http", 80), cport("grpc", 90)), withAnnotation(pods.AnnotationPorts, " grpc ")},
			want: []string{keyOf("grpc", "10.0.0.1", 90)}},
		{name: "ports annotation names a missing port", opts: []podOpt{ip, withAnnotation(pods.AnnotationPorts, "http,grpc")}, skip: `no named container port "grpc"`},
		{name: "ports annotation empty", opts: []podOpt{ip, withAnnotation(pods.AnnotationPorts, "")}, skip: "empty port name"},
		{name: "ports annotation empty name", opts: []podOpt{ip, withAnnotation(pods.AnnotationPorts, "http,,")}, skip: "empty port name"},
		{name: "no named ports", opts: []podOpt{ip, withPorts(cport("", 80))}, skip: "no named container ports"},
		{name: "protocol annotation", opts: []podOpt{ip, withPorts(cport("http-metrics", 9090)), withAnnotation(pods.AnnotationProtocolPrefix+"http-metrics", "prometheus")},
			want: []string{keyOf("prometheus", "10.0.0.1", 9090)}},
		{name: "invalid protocol annotation", opts: []podOpt{ip, withAnnotation(pods.AnnotationProtocolPrefix+"http", "h2.c")}, skip: "switchboard.dev/protocol.http: invalid endpoint: protocol"},
		{name: "name prefix not a protocol", opts: []podOpt{ip, withPorts(cport("80-http", 80))}, skip: `port "80-http"`},
		{name: "one port under two names", opts: []podOpt{ip, withPorts(cport("http", 80), cport("http-alt", 80))}, want: []string{key("10.0.0.1", 80)}},

		// Priority and weight: out of range skips the whole pod.
		{name: "priority and weight", opts: []podOpt{ip, withAnnotation(pods.AnnotationPriority, "255"), withAnnotation(pods.AnnotationWeight, "65535")}, want: []string{key("10.0.0.1", 8080)}},
		{name: "priority 0", opts: []podOpt{ip, withAnnotation(pods.AnnotationPriority, "0")}, skip: `annotation switchboard.dev/priority: "0" is not a number in 1..255`},
		{name: "priority 256", opts: []podOpt{ip, withAnnotation(pods.AnnotationPriority, "256")}, skip: `switchboard.dev/priority: "256"`},
		{name: "priority not a number", opts: []podOpt{ip, withAnnotation(pods.AnnotationPriority, "high")}, skip: `switchboard.dev/priority: "high"`},
		{name: "priority with sign", opts: []podOpt{ip, withAnnotation(pods.AnnotationPriority, "+5")}, skip: `switchboard.dev/priority: "+5"`},
		{name: "weight too big", opts: []podOpt{ip, withAnnotation(pods.AnnotationWeight, "65536")}, skip: `switchboard.dev/weight: "65536" is not a number in 0..65535`},
		{name: "weight negative", opts: []podOpt{ip, withAnnotation(pods.AnnotationWeight, "-1")}, skip: `switchboard.dev/weight: "-1"`},

		// Endpoint annotations.
		{name: "annotation copied", opts: []podOpt{ip, withAnnotation(pods.AnnotationCopyPrefix+"team", "edge")}, want: []string{key("10.0.0.1", 8080)}},
		{name: "annotation with invalid key", opts: []podOpt{ip, withAnnotation(pods.AnnotationCopyPrefix+"-team", "edge")}, skip: "annotation switchboard.dev/annotation.-team: invalid endpoint"},
		{name: "annotation with empty key", opts: []podOpt{ip, withAnnotation(pods.AnnotationCopyPrefix, "edge")}, skip: "annotation switchboard.dev/annotation.: invalid endpoint"},
		{name: "annotation with a newline", opts: []podOpt{ip, withAnnotation(pods.AnnotationCopyPrefix+"team", "a\nb")}, skip: "control characters"},
		{name: "annotation the agent sets", opts: []podOpt{ip, withAnnotation(pods.AnnotationCopyPrefix+"k8s.pod", "other")}, skip: "k8s.pod is set by the agent"},

		// Addresses.
		{name: "record addresses before status", opts: []podOpt{ip}, ips: []string{"10.0.0.9", "fd00::9"}, want: []string{key("10.0.0.9", 8080), key("fd00::9", 8080)}},
		{name: "status podIPs, every (ip, port)", opts: []podOpt{withIPs("10.0.0.1", "FD00::1"), withPorts(cport("http", 80), cport("grpc", 90))},
			want: []string{keyOf("grpc", "10.0.0.1", 90), keyOf("grpc", "fd00::1", 90), key("10.0.0.1", 80), key("fd00::1", 80)}},
		{name: "status podIP only", opts: []podOpt{func(p *corev1.Pod) { p.Status.PodIP = "10.0.0.5" }}, want: []string{key("10.0.0.5", 8080)}},
		{name: "no address yet", opts: []podOpt{withPhase(corev1.PodPending), withReady(false)}},
		{name: "invalid podIP", opts: []podOpt{withIPs("10.0.0.256")}, skip: "status.podIPs[0]"},

		// Held.
		{name: "not Ready", opts: []podOpt{ip, withReady(false)}, want: []string{key("10.0.0.1", 8080)}, held: pods.HeldNotReady},
		{name: "no Ready condition", opts: []podOpt{ip, func(p *corev1.Pod) { p.Status.Conditions = nil }}, want: []string{key("10.0.0.1", 8080)}, held: pods.HeldNotReady},
		{name: "pending", opts: []podOpt{ip, withPhase(corev1.PodPending), withReady(false)}, want: []string{key("10.0.0.1", 8080)}, held: pods.HeldNotReady},
		{name: "Ready not required, Running", opts: []podOpt{ip, withReady(false)}, cfg: func(c *pods.DeriveConfig) { c.RequireReady = &no },
			want: []string{key("10.0.0.1", 8080)}},
		{name: "Ready not required, Pending", opts: []podOpt{ip, withPhase(corev1.PodPending), withReady(false)}, cfg: func(c *pods.DeriveConfig) { c.RequireReady = &no },
			want: []string{key("10.0.0.1", 8080)}, held: pods.HeldNotRunning},
		{name: "Ready required explicitly", opts: []podOpt{ip, withReady(false)}, cfg: func(c *pods.DeriveConfig) { c.RequireReady = &yes },
			want: []string{key("10.0.0.1", 8080)}, held: pods.HeldNotReady},

		// Every endpoint passes endpoint.Validate.
		{name: "invalid cluster", opts: []podOpt{ip}, cfg: func(c *pods.DeriveConfig) { c.Cluster = "" }, skip: `invalid endpoint: cluster "": is required`},
		{name: "invalid TTL", opts: []podOpt{ip}, cfg: func(c *pods.DeriveConfig) { c.TTL = 1500 * time.Millisecond }, skip: "invalid endpoint: ttl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := deriveConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			got, skip := pods.Derive(newPod("web-1", tc.opts...), tc.ips, cfg)
			if tc.skip == "" && skip != "" || !strings.Contains(skip, tc.skip) {
				t.Fatalf("skip %q, want one with %q", skip, tc.skip)
			}
			if skip != "" && got != nil {
				t.Fatalf("a skipped pod yields entries %v", got)
			}
			var keys []string
			for _, e := range got {
				keys = append(keys, e.Endpoint.Key().String())
				checkEntry(t, e, tc.held)
			}
			if !reflect.DeepEqual(keys, tc.want) {
				t.Fatalf("entries %v, want %v", keys, tc.want)
			}
		})
	}
}

// checkEntry checks what every derived entry carries.
func checkEntry(t *testing.T, e manifest.Entry, held string) {
	t.Helper()
	if err := e.Endpoint.Validate(); err != nil {
		t.Fatalf("derived an invalid endpoint: %v", err)
	}
	if e.Held != held || !e.KeepOnShutdown || len(e.Checks) != 0 {
		t.Fatalf("entry held %q keep %v checks %v; want held %q, kept on shutdown, no checks", e.Held, e.KeepOnShutdown, e.Checks, held)
	}
	if e.Endpoint.Node != node || e.Endpoint.Annotations[pods.EndpointNamespace] != "default" || e.Endpoint.Annotations[pods.EndpointPod] != "web-1" {
		t.Fatalf("entry %+v lacks its node or pod annotations", e.Endpoint)
	}
}

// The fields that are not in the key: priority, weight, TTL, copied annotations.
func TestDeriveFields(t *testing.T) {
	p := newPod("web-1", withIPs("10.0.0.1"), withAnnotation(pods.AnnotationPriority, "7"), withAnnotation(pods.AnnotationWeight, "300"),
		withAnnotation(pods.AnnotationCopyPrefix+"team", "edge"), withAnnotation("other.io/x", "not copied"))
	got, skip := pods.Derive(p, nil, deriveConfig())
	if skip != "" || len(got) != 1 {
		t.Fatalf("Derive = %v, %q", got, skip)
	}
	want := endpoint.Endpoint{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.1", Port: 8080, Node: node,
		Priority: 7, Weight: 300, TTL: endpoint.TTL(pods.DefaultTTL),
		Annotations: map[string]string{"k8s.namespace": "default", "k8s.pod": "web-1", "team": "edge"}}
	if !endpoint.Equal(got[0].Endpoint, want) {
		t.Fatalf("endpoint %+v, want %+v", got[0].Endpoint, want)
	}
	cfg := deriveConfig()
	cfg.TTL = 10 * time.Second
	got, _ = pods.Derive(newPod("web-1", withIPs("10.0.0.1")), nil, cfg)
	if e := got[0].Endpoint; e.TTL != endpoint.TTL(10*time.Second) || e.Priority != 1 || e.Weight != 0 {
		t.Fatalf("defaults: ttl %v priority %d weight %d; want 10s, 1, 0", e.TTL, e.Priority, e.Weight)
	}
	if got, skip := pods.Derive(nil, nil, cfg); got != nil || skip != "" {
		t.Fatalf("Derive(nil) = %v, %q", got, skip)
	}
}
