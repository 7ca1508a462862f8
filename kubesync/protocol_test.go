package kubesync

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

func TestImportProtocol(t *testing.T) {
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	cases := []struct {
		name, appProtocol string
		proto             *corev1.Protocol
		want              string
	}{
		{"http", "", nil, "http"},
		{"http-web", "", nil, "http"},
		{"http2", "", nil, "http2"},
		{"https-admin", "", nil, "https"},
		{"grpc", "", nil, "grpc"},
		{"grpc-web", "", nil, "grpc-web"},
		{"grpc-web-ui", "", nil, "grpc-web"},
		{"grpcx", "", &tcp, "tcp"},
		{"tls-passthrough", "", nil, "tls"},
		{"redis", "", nil, "redis"},
		{"HTTP-Web", "", nil, "http"},
		{"metrics", "", &udp, "udp"},
		{"web-8080", "", nil, "tcp"},
		{"", "", nil, "tcp"},
		{"http", "kubernetes.io/h2c", nil, "h2c"},
		{"tcp", "HTTPS", nil, "https"},
		{"x", "example.com/custom-proto", &udp, "custom-proto"},
	}
	for _, c := range cases {
		p := discoveryv1.EndpointPort{Protocol: c.proto}
		if c.name != "" {
			p.Name = &c.name
		}
		if c.appProtocol != "" {
			p.AppProtocol = &c.appProtocol
		}
		if got := importProtocol(p); got != c.want {
			t.Errorf("importProtocol(name %q, appProtocol %q) = %q, want %q", c.name, c.appProtocol, got, c.want)
		}
	}
}

func TestExportPortName(t *testing.T) {
	long := "p" + strings.Repeat("a", 80)
	cases := []struct {
		proto    string
		port     int
		withPort bool
		want     string
	}{
		{"http", 8080, false, "http"},
		{"http", 8080, true, "http-8080"},
		{"grpc_web", 80, false, "grpc-web"},
		{"HTTP", 80, false, "http"},
		{"tcp_", 80, false, "tcp"},
		{"x__", 80, true, "x-80"},
		{long, 65535, true, long[:63-6] + "-65535"},
	}
	for _, c := range cases {
		if got := exportPortName(c.proto, c.port, c.withPort); got != c.want {
			t.Errorf("exportPortName(%q, %d, %v) = %q, want %q", c.proto, c.port, c.withPort, got, c.want)
		}
	}
}

// What export names a port, import reads back as the same protocol, for the
// protocols the port-name convention knows.
func TestPortNamesRoundTrip(t *testing.T) {
	for _, proto := range namedProtocols {
		for _, several := range []bool{false, true} {
			name := exportPortName(proto, 8080, several)
			p := discoveryv1.EndpointPort{Name: &name}
			if got := importProtocol(p); got != proto {
				t.Errorf("%s (several ports %v): exported as %q, imported as %q", proto, several, name, got)
			}
		}
	}
}

// FuzzPortName: every registry protocol and port export can meet gets a port
// name Kubernetes accepts, and one protocol's ports get distinct names.
func FuzzPortName(f *testing.F) {
	for _, s := range []string{"http", "grpc_web", "A", "a-", "x__y", "HTTP2"} {
		f.Add(s, 8080, 8443)
	}
	f.Fuzz(func(t *testing.T, proto string, port, other int) {
		if endpoint.ValidateName("protocol", proto) != nil || port < 1 || port > 65535 || other < 1 || other > 65535 {
			t.Skip()
		}
		for _, several := range []bool{false, true} {
			name := exportPortName(proto, port, several)
			if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
				t.Fatalf("exportPortName(%q, %d, %v) = %q: %v", proto, port, several, name, msgs)
			}
		}
		if a, b := exportPortName(proto, port, true), exportPortName(proto, other, true); port != other && a == b {
			t.Fatalf("ports %d and %d of %q are both named %q", port, other, proto, a)
		}
		if ap := exportAppProtocol(proto); ap != nil && len(validation.IsQualifiedName(*ap)) > 0 {
			t.Fatalf("appProtocol %q is not a qualified name", *ap)
		}
	})
}

// FuzzImportProtocol: any port name and appProtocol give a protocol, never a
// panic; a protocol the name convention gives is always a valid registry name.
func FuzzImportProtocol(f *testing.F) {
	for _, s := range [][2]string{{"http-web", ""}, {"grpc-web-ui", ""}, {"", "kubernetes.io/h2c"}, {"x", "a/b/c"}, {"", "/"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, name, appProtocol string) {
		p := discoveryv1.EndpointPort{Name: &name, AppProtocol: &appProtocol}
		got := importProtocol(p)
		if got == "" {
			t.Fatalf("importProtocol(%q, %q) is empty", name, appProtocol)
		}
		if appProtocol == "" {
			if err := endpoint.ValidateName("protocol", got); err != nil {
				t.Fatalf("importProtocol(%q) = %q: %v", name, got, err)
			}
		}
	})
}
