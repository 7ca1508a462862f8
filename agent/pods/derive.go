package pods

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/switchboard-mesh/switchboard/agent/manifest"
	"github.com/switchboard-mesh/switchboard/endpoint"
)

// The labels and annotations a pod speaks to the agent with (docs/kubernetes.md).
const (
	// KeyRegister is the label the default selector matches (value "true") and the
	// annotation that opts a pod in ("true") or out ("false") whatever its labels.
	KeyRegister = "switchboard.dev/register"
	// AnnotationService names the service; else LabelAppName, else LabelApp.
	AnnotationService = "switchboard.dev/service"
	LabelAppName      = "app.kubernetes.io/name"
	LabelApp          = "app"
	// AnnotationPorts restricts the ports to a comma-separated list of port names.
	AnnotationPorts = "switchboard.dev/ports"
	// AnnotationProtocolPrefix + a port name sets that port's protocol.
	AnnotationProtocolPrefix = "switchboard.dev/protocol."
	AnnotationPriority       = "switchboard.dev/priority"
	AnnotationWeight         = "switchboard.dev/weight"
	// AnnotationCopyPrefix + KEY is copied to the endpoints as annotation KEY.
	AnnotationCopyPrefix = "switchboard.dev/annotation."
	// The endpoint annotations the agent sets on every pod's endpoints.
	EndpointNamespace = "k8s.namespace"
	EndpointPod       = "k8s.pod"
)

// Why a pod's entries are held (manifest.Entry.Held).
const (
	HeldNotReady   = "pod not Ready"
	HeldNotRunning = "pod not Running"
)

// DefaultTTL is the TTL of a pod's endpoints unless configured: short, because it
// bounds how long they outlive an agent that died and lost a DEL.
const DefaultTTL = 30 * time.Second

// DefaultSelector is switchboard.dev/register=true.
func DefaultSelector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{KeyRegister: "true"})
}

// DeriveConfig is what Derive needs beyond the pod.
type DeriveConfig struct {
	Cluster string
	// NodeName is every endpoint's Node: the node owns its pods' endpoints.
	NodeName string
	// Selector picks the pods to register; nil means DefaultSelector.
	Selector labels.Selector
	// TTL of the endpoints; 0 means DefaultTTL.
	TTL time.Duration
	// RequireReady holds a pod's entries until its Ready condition is True; nil
	// means true. False publishes a Running pod at once.
	RequireReady *bool
}

func (c DeriveConfig) selector() labels.Selector {
	if c.Selector == nil {
		return DefaultSelector()
	}
	return c.Selector
}

func (c DeriveConfig) ttl() endpoint.TTL {
	if c.TTL == 0 {
		return endpoint.TTL(DefaultTTL)
	}
	return endpoint.TTL(c.TTL)
}

func (c DeriveConfig) requireReady() bool { return c.RequireReady == nil || *c.RequireReady }

// Derive turns a pod into the entries the agent publishes for it: one per (address,
// named port), by the rules of docs/kubernetes.md. ips are the pod's addresses from its CNI
// records; empty means the pod's status.podIPs. A pod that is not managed, is done,
// or has no address yet yields nothing and no reason; one being deleted yields its
// entries as draining if they were published, else nothing. A managed
// pod that cannot be registered as a whole yields nothing and skip says why: a pod is
// never half-registered.
func Derive(pod *corev1.Pod, ips []string, cfg DeriveConfig) (entries []manifest.Entry, skip string) {
	if pod == nil {
		return nil, ""
	}
	if ok, skip := managed(pod, cfg.selector()); !ok {
		return nil, skip
	}
	if done(pod) {
		return nil, ""
	}
	if pod.Spec.HostNetwork {
		return nil, "hostNetwork pod: its address is the node's, not the pod's"
	}
	t, skip := podTemplate(pod, cfg)
	if skip != "" {
		return nil, skip
	}
	addrs, skip := podAddresses(pod, ips)
	if skip != "" || len(addrs) == 0 {
		return nil, skip
	}
	h := held(pod, cfg)
	if pod.DeletionTimestamp == nil {
		return t.entries(addrs, h)
	}
	if h != "" {
		return nil, "" // going, and never published: nothing to drain
	}
	return t.draining(addrs)
}

// managed reports whether the pod asked to be registered: the annotation decides
// when present, else the selector.
func managed(pod *corev1.Pod, sel labels.Selector) (bool, string) {
	v, ok := pod.Annotations[KeyRegister]
	switch {
	case !ok:
		return sel.Matches(labels.Set(pod.Labels)), ""
	case v == "true":
		return true, ""
	case v == "false":
		return false, ""
	}
	return false, fmt.Sprintf("annotation %s: %q is neither \"true\" nor \"false\"", KeyRegister, v)
}

// done reports whether the pod's containers have ended: its endpoints are removed.
// A pod being deleted is not done: until it is, it finishes its requests, and its
// endpoints are draining (Derive).
func done(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

func held(pod *corev1.Pod, cfg DeriveConfig) string {
	if cfg.requireReady() {
		if !podReady(pod) {
			return HeldNotReady
		}
		return ""
	}
	if pod.Status.Phase != corev1.PodRunning {
		return HeldNotRunning
	}
	return ""
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// template is what a pod's entries share, and the ports they differ by.
type template struct {
	base  endpoint.Endpoint // without protocol, address and port
	ports []port
}

type port struct {
	name     string
	number   int
	protocol string
}

func podTemplate(pod *corev1.Pod, cfg DeriveConfig) (template, string) {
	service, skip := serviceName(pod)
	if skip != "" {
		return template{}, skip
	}
	priority, skip := intAnnotation(pod.Annotations, AnnotationPriority, 1, 255, 1)
	if skip != "" {
		return template{}, skip
	}
	weight, skip := intAnnotation(pod.Annotations, AnnotationWeight, 0, 65535, 0)
	if skip != "" {
		return template{}, skip
	}
	annotations, skip := endpointAnnotations(pod)
	if skip != "" {
		return template{}, skip
	}
	ports, skip := podPorts(pod)
	if skip != "" {
		return template{}, skip
	}
	base := endpoint.Endpoint{Cluster: cfg.Cluster, Service: service, Node: cfg.NodeName, Priority: priority,
		Weight: weight, Annotations: annotations, TTL: cfg.ttl()}
	return template{base: base, ports: ports}, ""
}

// serviceName is the annotation's, else app.kubernetes.io/name's, else app's.
func serviceName(pod *corev1.Pod) (string, string) {
	for _, src := range [...]struct{ what, value string }{
		{"annotation " + AnnotationService, pod.Annotations[AnnotationService]},
		{"label " + LabelAppName, pod.Labels[LabelAppName]},
		{"label " + LabelApp, pod.Labels[LabelApp]},
	} {
		if src.value == "" {
			continue
		}
		if err := endpoint.ValidateName("service", src.value); err != nil {
			return "", fmt.Sprintf("service name from %s: %v", src.what, err)
		}
		return src.value, ""
	}
	return "", "no service name (annotation " + AnnotationService + ", label " + LabelAppName + " or label " + LabelApp + ")"
}

// intAnnotation parses a decimal annotation in lo..hi; def when absent.
func intAnnotation(ann map[string]string, key string, lo, hi, def int) (int, string) {
	v, ok := ann[key]
	if !ok {
		return def, ""
	}
	n, err := parseBounded(v, lo, hi)
	if err != nil {
		return 0, fmt.Sprintf("annotation %s: %q %v", key, v, err)
	}
	return n, ""
}

// parseBounded parses a plain decimal number (no sign, no spaces) in lo..hi.
func parseBounded(v string, lo, hi int) (int, error) {
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil || int(n) < lo || int(n) > hi {
		return 0, fmt.Errorf("is not a number in %d..%d", lo, hi)
	}
	return int(n), nil
}

// endpointAnnotations are k8s.namespace, k8s.pod and every switchboard.dev/annotation.
// KEY, each checked by the endpoint rules so that the reason names the pod's
// annotation rather than the endpoint's.
func endpointAnnotations(pod *corev1.Pod) (map[string]string, string) {
	out := map[string]string{EndpointNamespace: pod.Namespace, EndpointPod: pod.Name}
	for _, k := range slices.Sorted(maps.Keys(pod.Annotations)) {
		key, ok := strings.CutPrefix(k, AnnotationCopyPrefix)
		if !ok {
			continue
		}
		if key == EndpointNamespace || key == EndpointPod {
			return nil, fmt.Sprintf("annotation %s: %s is set by the agent", k, key)
		}
		if err := validAnnotation(key, pod.Annotations[k]); err != nil {
			return nil, fmt.Sprintf("annotation %s: %v", k, err)
		}
		out[key] = pod.Annotations[k]
	}
	return out, ""
}

// validAnnotation checks one key and value by the rules package endpoint holds, on an
// endpoint that is otherwise valid.
func validAnnotation(k, v string) error {
	probe := endpoint.Endpoint{Cluster: "c", Service: "s", Protocol: "p", Address: "127.0.0.1", Priority: 1,
		Annotations: map[string]string{k: v}}
	return probe.Validate()
}

// podPorts returns the named ports to register, each with its protocol.
func podPorts(pod *corev1.Pod) ([]port, string) {
	named := namedPorts(pod)
	chosen := named
	if v, ok := pod.Annotations[AnnotationPorts]; ok {
		names, err := parsePortNames(v)
		if err != nil {
			return nil, fmt.Sprintf("annotation %s: %q: %v", AnnotationPorts, v, err)
		}
		chosen = nil
		for _, name := range names {
			n := len(chosen)
			for _, p := range named {
				if p.name == name {
					chosen = append(chosen, p)
				}
			}
			if len(chosen) == n {
				return nil, fmt.Sprintf("annotation %s: no named container port %q", AnnotationPorts, name)
			}
		}
	}
	if len(chosen) == 0 {
		return nil, "no named container ports"
	}
	for i := range chosen {
		proto, skip := portProtocol(pod.Annotations, chosen[i].name)
		if skip != "" {
			return nil, skip
		}
		chosen[i].protocol = proto
	}
	return chosen, ""
}

// namedPorts lists the named container ports of the containers and of the sidecars
// (init containers that keep running: restartPolicy Always), without repeats.
func namedPorts(pod *corev1.Pod) []port {
	var out []port
	add := func(cs []corev1.Container, sidecarsOnly bool) {
		for _, c := range cs {
			if sidecarsOnly && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
				continue
			}
			for _, cp := range c.Ports {
				p := port{name: cp.Name, number: int(cp.ContainerPort)}
				if p.name != "" && !slices.Contains(out, p) {
					out = append(out, p)
				}
			}
		}
	}
	add(pod.Spec.Containers, false)
	add(pod.Spec.InitContainers, true)
	return out
}

// parsePortNames parses "http, grpc": names separated by commas, spaces around them
// ignored, repeats dropped; an empty list or name is an error (a typo, most likely).
func parsePortNames(v string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(v, ",") {
		name := strings.TrimSpace(f)
		if name == "" {
			return nil, fmt.Errorf("empty port name")
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out, nil
}

// portProtocol is the port's annotation, else its name up to the first '-' (Istio's
// convention: http-metrics speaks http).
func portProtocol(ann map[string]string, name string) (string, string) {
	key := AnnotationProtocolPrefix + name
	if v, ok := ann[key]; ok {
		if err := endpoint.ValidateName("protocol", v); err != nil {
			return "", fmt.Sprintf("annotation %s: %v", key, err)
		}
		return v, ""
	}
	prefix, _, _ := strings.Cut(name, "-")
	if err := endpoint.ValidateName("protocol", prefix); err != nil {
		return "", fmt.Sprintf("port %q: the protocol its name implies (before the first '-') is not valid: %v; set annotation %s", name, err, key)
	}
	return prefix, ""
}

// podAddresses are the record's addresses, else the pod's status.podIPs (a pod
// added while the agent was down has no record).
func podAddresses(pod *corev1.Pod, ips []string) ([]string, string) {
	field := "CNI record ips"
	if len(ips) == 0 {
		field = "status.podIPs"
		for _, pip := range pod.Status.PodIPs {
			ips = append(ips, pip.IP)
		}
		if len(ips) == 0 && pod.Status.PodIP != "" {
			ips = []string{pod.Status.PodIP}
		}
	}
	if len(ips) == 0 {
		return nil, ""
	}
	out, err := canonicalIPs(field, ips)
	if err != nil {
		return nil, err.Error()
	}
	return out, ""
}

// draining is entries, each marked draining: a pod being deleted.
func (t template) draining(addrs []string) ([]manifest.Entry, string) {
	out, skip := t.entries(addrs, "")
	for i := range out {
		out[i].Endpoint.Health = endpoint.Draining
	}
	return out, skip
}

// entries is one entry per (address, port), each validated: one invalid endpoint
// skips the pod.
func (t template) entries(addrs []string, held string) ([]manifest.Entry, string) {
	out := make([]manifest.Entry, 0, len(addrs)*len(t.ports))
	seen := map[endpoint.Key]bool{}
	for _, a := range addrs {
		for _, p := range t.ports {
			e := t.base.Clone()
			e.Protocol, e.Address, e.Port = p.protocol, a, p.number
			e.Normalize()
			if err := e.Validate(); err != nil {
				return nil, err.Error()
			}
			if seen[e.Key()] {
				continue // two port names for one port and protocol: one endpoint
			}
			seen[e.Key()] = true
			out = append(out, manifest.Entry{Endpoint: e, Held: held, KeepOnShutdown: true})
		}
	}
	slices.SortFunc(out, func(a, b manifest.Entry) int { return compareKeys(a.Endpoint.Key(), b.Endpoint.Key()) })
	return out, ""
}

func compareKeys(a, b endpoint.Key) int {
	return cmp.Or(strings.Compare(a.Cluster, b.Cluster), strings.Compare(a.Service, b.Service),
		strings.Compare(a.Protocol, b.Protocol), strings.Compare(a.Address, b.Address), cmp.Compare(a.Port, b.Port))
}
