package aether

import (
	"errors"
	"fmt"
	"strings"

	"github.com/switchboard-mesh/switchboard/endpoint"
	aetherregistryv1 "github.com/switchboard-mesh/switchboard/gen/aether/registry/v1"
)

// protocolHTTP is the one protocol of ours Aether's enum names (HTTP). Endpoints
// of any other protocol are left out of Aether's watch and list.
const protocolHTTP = "http"

// Reserved annotation keys: the parts of Aether's ServiceEndpoint, and the
// endpoint's health, that Switchboard's endpoint has no field for. An endpoint
// registered through Aether's API keeps them here, and they come back as the
// fields, so Aether → Switchboard → Aether round-trips the message. Under a prefix
// of their own, which Aether's metadata may not use otherwise: a key there always
// means what this package put there.
const (
	AnnotationPrefix = "aether.switchboard.dev/"

	AnnotationContainerID      = AnnotationPrefix + "container-id"
	AnnotationNetworkNamespace = AnnotationPrefix + "network-namespace"
	AnnotationPodNamespace     = AnnotationPrefix + "kubernetes-namespace"
	AnnotationPodName          = AnnotationPrefix + "kubernetes-pod-name"
	// AnnotationHealth carries a health other than healthy in Aether's metadata
	// (Aether's agents do not act on it); a registration may set it.
	AnnotationHealth = AnnotationPrefix + "health"
)

// reservedField is the Aether field each reserved key carries, for errors.
var reservedField = map[string]string{
	AnnotationContainerID:      "endpoint.container_metadata.container_id",
	AnnotationNetworkNamespace: "endpoint.container_metadata.network_namespace",
	AnnotationPodNamespace:     "endpoint.kubernetes_metadata.namespace",
	AnnotationPodName:          "endpoint.kubernetes_metadata.pod_name",
	AnnotationHealth:           "endpoint.metadata[" + AnnotationHealth + "]",
}

// defaultPriority is the priority of an endpoint registered through Aether's API,
// which has none: the registrar's default for an unset one.
const defaultPriority = 1

// ToEndpoint converts a registration of Aether's into our endpoint, validated as
// the registrar validates its own writes (but for Node, which the caller's
// identity sets). cluster is the registrar's, for an endpoint that names none.
// The error names the field in Aether's terms (endpoint.ip, endpoint.port, …).
func ToEndpoint(service string, p aetherregistryv1.Service_Protocol, ep *aetherregistryv1.ServiceEndpoint, cluster string) (endpoint.Endpoint, error) {
	if p != aetherregistryv1.Service_HTTP {
		return endpoint.Endpoint{}, fmt.Errorf("protocol %s: must be HTTP, the one protocol Aether's API names", p)
	}
	if ep == nil {
		return endpoint.Endpoint{}, errors.New("endpoint: is required")
	}
	addr, err := parseIP(ep.GetIp())
	if err != nil {
		return endpoint.Endpoint{}, fmt.Errorf("endpoint.ip %q: %v", ep.GetIp(), err)
	}
	if err := checkRanges(ep); err != nil {
		return endpoint.Endpoint{}, err
	}
	svc, err := OurService(service)
	if err != nil {
		return endpoint.Endpoint{}, errors.New(serviceError("service_name", service, err))
	}
	e := endpoint.Endpoint{
		Cluster:  ep.GetClusterName(),
		Service:  svc,
		Protocol: protocolHTTP,
		Address:  addr,
		Port:     int(ep.GetPort()),
		Priority: defaultPriority,
		Weight:   int(ep.GetWeight()),
		Region:   ep.GetLocality().GetRegion(),
		Zone:     ep.GetLocality().GetZone(),
	}
	if e.Cluster == "" {
		e.Cluster = cluster
	}
	if e.Annotations, e.Health, err = annotationsOf(ep); err != nil {
		return endpoint.Endpoint{}, err
	}
	if err := e.Validate(); err != nil {
		return endpoint.Endpoint{}, errors.New(fieldMessage(err))
	}
	return e, nil
}

// checkRanges checks the numbers endpoint.Endpoint would otherwise hold
// truncated or out of range.
func checkRanges(ep *aetherregistryv1.ServiceEndpoint) error {
	if ep.GetPort() > 65535 {
		return fmt.Errorf("endpoint.port %d: must be 0..65535", ep.GetPort())
	}
	if ep.GetWeight() > 65535 {
		return fmt.Errorf("endpoint.weight %d: must be 0..65535", ep.GetWeight())
	}
	return nil
}

// annotationsOf returns an Aether endpoint's metadata, container and Kubernetes
// metadata as our annotations, and the health its metadata sets.
func annotationsOf(ep *aetherregistryv1.ServiceEndpoint) (map[string]string, endpoint.Health, error) {
	md := ep.GetMetadata()
	health := endpoint.Healthy
	out := make(map[string]string, len(md)+4)
	for k, v := range md {
		switch {
		case k == AnnotationHealth:
			h, err := endpoint.ParseHealth(v)
			if err != nil {
				return nil, 0, fmt.Errorf("endpoint.metadata[%s] %q: must be healthy, unhealthy or draining", k, v)
			}
			health = h
		case strings.HasPrefix(k, AnnotationPrefix):
			return nil, 0, fmt.Errorf("endpoint.metadata[%s]: the key prefix %s is reserved for fields of the endpoint", k, AnnotationPrefix)
		default:
			out[k] = v
		}
	}
	for k, v := range map[string]string{
		AnnotationContainerID:      ep.GetContainerMetadata().GetContainerId(),
		AnnotationNetworkNamespace: ep.GetContainerMetadata().GetNetworkNamespace(),
		AnnotationPodNamespace:     ep.GetKubernetesMetadata().GetNamespace(),
		AnnotationPodName:          ep.GetKubernetesMetadata().GetPodName(),
	} {
		if v != "" {
			out[k] = v
		}
	}
	if len(out) == 0 {
		out = nil
	}
	return out, health, nil
}

// fieldMessage renders a validation error of package endpoint with the field
// named as Aether's API names it.
func fieldMessage(err error) string {
	var fe *endpoint.FieldError
	if !errors.As(err, &fe) {
		return err.Error()
	}
	field, value := fe.Field, fe.Value
	switch {
	case field == "annotations" && strings.Contains(fe.Rule, "key"):
		field, value = metadataField(fe.Value), "" // the value is the key
	case strings.HasPrefix(field, "annotations["):
		field = metadataField(strings.TrimSuffix(strings.TrimPrefix(field, "annotations["), "]"))
	default:
		field = aetherField(field)
	}
	if value == "" {
		return fmt.Sprintf("%s: %s", field, fe.Rule)
	}
	return fmt.Sprintf("%s %q: %s", field, value, fe.Rule)
}

// metadataField is the Aether field an annotation key comes from.
func metadataField(key string) string {
	if f, ok := reservedField[key]; ok {
		return f
	}
	return "endpoint.metadata[" + key + "]"
}

// aetherField is the Aether field each field of our endpoint comes from.
func aetherField(ours string) string {
	switch ours {
	case "cluster":
		return "endpoint.cluster_name"
	case "service":
		return "service_name"
	case "address":
		return "endpoint.ip"
	case "port", "weight":
		return "endpoint." + ours
	case "region", "zone":
		return "endpoint.locality." + ours
	case "annotations":
		return "endpoint.metadata"
	case "node":
		return "node (from the client certificate)"
	}
	return ours
}

// FromEndpoint converts one of our endpoints into Aether's: its service (Aether's
// name of it, AetherService), protocol and ServiceEndpoint. ok is false for an endpoint whose protocol Aether's enum
// cannot name (any but http), which Aether's API leaves out.
func FromEndpoint(e endpoint.Endpoint) (service string, p aetherregistryv1.Service_Protocol, ep *aetherregistryv1.ServiceEndpoint, ok bool) {
	if e.Protocol != protocolHTTP {
		return "", 0, nil, false
	}
	ep = &aetherregistryv1.ServiceEndpoint{
		Ip:          e.Address,
		ClusterName: e.Cluster,
		Port:        uint32(e.Port),   //nolint:gosec // validated 0..65535
		Weight:      uint32(e.Weight), //nolint:gosec // validated 0..65535
	}
	if e.Region != "" || e.Zone != "" {
		ep.Locality = &aetherregistryv1.ServiceEndpoint_Locality{Region: e.Region, Zone: e.Zone}
	}
	ep.Metadata = metadataOf(e)
	ann := e.Annotations
	if id, ns := ann[AnnotationContainerID], ann[AnnotationNetworkNamespace]; id != "" || ns != "" {
		ep.ContainerMetadata = &aetherregistryv1.ServiceEndpoint_ContainerMetadata{ContainerId: id, NetworkNamespace: ns}
	}
	if ns, pod := ann[AnnotationPodNamespace], ann[AnnotationPodName]; ns != "" || pod != "" {
		ep.KubernetesMetadata = &aetherregistryv1.ServiceEndpoint_KubernetesMetadata{Namespace: ns, PodName: pod}
	}
	return AetherService(e.Service), aetherregistryv1.Service_HTTP, ep, true
}

// metadataOf is Aether's metadata of e: its annotations, and its health when not
// healthy. Keys under AnnotationPrefix are left out, as those under our own
// endpoint.ReservedAnnotationPrefix: the reserved keys of fields come back as the
// fields, and any other (which our API may write) ToEndpoint would refuse, so an
// agent could not re-register what it was sent.
func metadataOf(e endpoint.Endpoint) map[string]string {
	var md map[string]string
	for k, v := range e.Annotations {
		if strings.HasPrefix(k, AnnotationPrefix) || strings.HasPrefix(k, endpoint.ReservedAnnotationPrefix) {
			continue
		}
		if md == nil {
			md = make(map[string]string, len(e.Annotations))
		}
		md[k] = v
	}
	if e.Health != endpoint.Healthy {
		if md == nil {
			md = map[string]string{}
		}
		md[AnnotationHealth] = e.Health.String()
	}
	return md
}
