package kubesync

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// namedProtocols are the protocols a port name may start with, Istio's
// "<protocol>[-<suffix>]" convention: a port named "http-metrics" serves http. Any
// other name says nothing about the protocol ("metrics", "web-8080").
// grpc-web comes before grpc so that "grpc-web-ui" is grpc-web.
var namedProtocols = []string{"grpc-web", "grpc", "http2", "https", "http", "tls", "tcp", "udp", "mongo", "mysql", "redis"}

// importProtocol is the registry protocol of an EndpointSlice port: its
// appProtocol if set, else what its name says by Istio's convention, else its L4
// protocol in lower case ("tcp" when unset, as Kubernetes defaults it). The result
// may still be an invalid registry name (an odd appProtocol): the endpoint's
// validation reports it.
func importProtocol(p discoveryv1.EndpointPort) string {
	if p.AppProtocol != nil {
		if ap := appProtocolName(*p.AppProtocol); ap != "" {
			return ap
		}
	}
	if p.Name != nil {
		if proto := protocolFromPortName(*p.Name); proto != "" {
			return proto
		}
	}
	if p.Protocol != nil && *p.Protocol != "" {
		return strings.ToLower(string(*p.Protocol))
	}
	return "tcp"
}

// appProtocolName maps an appProtocol to a registry protocol: the name after a
// domain prefix ("kubernetes.io/h2c" is h2c), in lower case as IANA service names
// compare case-insensitively.
func appProtocolName(ap string) string {
	if i := strings.LastIndexByte(ap, '/'); i >= 0 {
		ap = ap[i+1:]
	}
	return strings.ToLower(ap)
}

// protocolFromPortName is the protocol a port name declares by Istio's convention,
// "" when it declares none.
func protocolFromPortName(name string) string {
	name = strings.ToLower(name)
	for _, p := range namedProtocols {
		if name == p || strings.HasPrefix(name, p+"-") {
			return p
		}
	}
	return ""
}

// maxPortName is the longest Service and EndpointSlice port name (a DNS-1123 label).
const maxPortName = validation.DNS1123LabelMaxLength

// exportPortName is the Service port name for a registry protocol: the protocol as
// a DNS-1123 label ("grpc_web" becomes "grpc-web", "HTTP" "http"), so SRV lookups
// read _http._tcp.SERVICE, and import on another cluster derives the protocol back
// from it. withPort appends "-PORT" for a protocol served on several ports, as
// names must be unique within a Service. A protocol with nothing usable becomes
// "port-PORT".
func exportPortName(proto string, port int, withPort bool) string {
	suffix := ""
	if withPort {
		suffix = "-" + strconv.Itoa(port)
	}
	base := dnsLabelPart(proto, maxPortName-len(suffix))
	if base == "" {
		return "port-" + strconv.Itoa(port)
	}
	return base + suffix
}

// dnsLabelPart turns s into at most n characters of a DNS-1123 label: lower case,
// '-' for every other character, no '-' at either end.
func dnsLabelPart(s string, n int) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			b[i] = '-'
		}
	}
	if len(b) > n {
		b = b[:n]
	}
	return strings.Trim(string(b), "-")
}

// l4Protocol is the Service port protocol for a registry protocol: UDP and SCTP by
// name, TCP for everything else (http, grpc, tls… all run over TCP).
func l4Protocol(proto string) corev1.Protocol {
	switch strings.ToLower(proto) {
	case "udp":
		return corev1.ProtocolUDP
	case "sctp":
		return corev1.ProtocolSCTP
	}
	return corev1.ProtocolTCP
}

// exportAppProtocol is the appProtocol for a registry protocol: the protocol itself
// when Kubernetes accepts it (a qualified name), else unset.
func exportAppProtocol(proto string) *string {
	if len(validation.IsQualifiedName(proto)) > 0 {
		return nil
	}
	return &proto
}
