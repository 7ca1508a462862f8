package aether

import (
	"maps"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/switchboard-mesh/switchboard/endpoint"
	aetherregistryv1 "github.com/switchboard-mesh/switchboard/gen/aether/registry/v1"
)

// Aether → Switchboard → Aether gives back the message, and the fields land in
// ours as docs/registrar.md says.
func TestToEndpointAndBack(t *testing.T) {
	in := endpointWant()
	in.Ip = "FD00::0:1" // any spelling of an address; stored canonical
	e, err := ToEndpoint("web", aetherregistryv1.Service_HTTP, in, "west")
	if err != nil {
		t.Fatal(err)
	}
	want := endpoint.Endpoint{Cluster: "east", Service: "web", Protocol: "http", Address: "fd00::1", Port: 8080, Weight: 25,
		Priority: 1, Region: "eu-west-1", Zone: "eu-west-1b", Annotations: map[string]string{
			"team": "payments", AnnotationContainerID: "c0ffee", AnnotationNetworkNamespace: "/var/run/netns/x",
			AnnotationPodNamespace: "shop", AnnotationPodName: "web-7"}}
	if !endpoint.Equal(e, want) {
		t.Fatalf("ToEndpoint = %+v\nwant %+v", e, want)
	}
	svc, p, back, ok := FromEndpoint(e)
	in.Ip = "fd00::1"
	if !ok || svc != "web" || p != aetherregistryv1.Service_HTTP || !proto.Equal(back, in) {
		t.Fatalf("FromEndpoint = %s %v %v %v\nwant %v", svc, p, back, ok, in)
	}
}

// An endpoint without a cluster is of the registrar's; one without the optional
// parts comes back without them.
func TestToEndpointMinimal(t *testing.T) {
	e, err := ToEndpoint("web", aetherregistryv1.Service_HTTP, &aetherregistryv1.ServiceEndpoint{Ip: "10.0.0.1"}, "east")
	if err != nil {
		t.Fatal(err)
	}
	if want := (endpoint.Endpoint{Cluster: "east", Service: "web", Protocol: "http", Address: "10.0.0.1", Priority: 1}); !endpoint.Equal(e, want) {
		t.Fatalf("got %+v, want %+v", e, want)
	}
	_, _, back, _ := FromEndpoint(e)
	if want := (&aetherregistryv1.ServiceEndpoint{Ip: "10.0.0.1", ClusterName: "east"}); !proto.Equal(back, want) {
		t.Fatalf("back: %v, want %v", back, want)
	}
}

// Health travels in metadata under a reserved key, both ways.
func TestHealthInMetadata(t *testing.T) {
	e, err := ToEndpoint("web", aetherregistryv1.Service_HTTP, &aetherregistryv1.ServiceEndpoint{Ip: "10.0.0.1",
		Metadata: map[string]string{AnnotationHealth: "Draining"}}, "east")
	if err != nil || e.Health != endpoint.Draining || len(e.Annotations) != 0 {
		t.Fatalf("got %+v (%v), want a draining endpoint without annotations", e, err)
	}
	_, _, back, _ := FromEndpoint(e)
	if back.GetMetadata()[AnnotationHealth] != "draining" {
		t.Fatalf("metadata %v, want health draining", back.GetMetadata())
	}
	e.Health = endpoint.Healthy
	if _, _, back, _ := FromEndpoint(e); back.GetMetadata() != nil {
		t.Fatalf("a healthy endpoint's metadata is %v, want none", back.GetMetadata())
	}
}

// Endpoints of protocols Aether cannot name are left out.
func TestFromEndpointLeavesOutOtherProtocols(t *testing.T) {
	if _, _, _, ok := FromEndpoint(endpoint.Endpoint{Cluster: "east", Service: "db", Protocol: "tcp", Address: "10.0.0.1", Priority: 1}); ok {
		t.Fatal("a tcp endpoint converted")
	}
}

// Bad input is an error naming the field as Aether's API names it.
func TestToEndpointErrorsNameTheField(t *testing.T) {
	ep := func(f func(*aetherregistryv1.ServiceEndpoint)) *aetherregistryv1.ServiceEndpoint {
		e := &aetherregistryv1.ServiceEndpoint{Ip: "10.0.0.1", Port: 80}
		f(e)
		return e
	}
	for _, tc := range []struct {
		name, service, field string
		p                    aetherregistryv1.Service_Protocol
		ep                   *aetherregistryv1.ServiceEndpoint
	}{
		{"no protocol", "web", "protocol", 0, ep(func(*aetherregistryv1.ServiceEndpoint) {})},
		{"unknown protocol", "web", "protocol", 7, ep(func(*aetherregistryv1.ServiceEndpoint) {})},
		{"no endpoint", "web", "endpoint", 1, nil},
		{"empty ip", "web", "endpoint.ip", 1, ep(func(e *aetherregistryv1.ServiceEndpoint) { e.Ip = "" })},
		{"bad ip", "web", "endpoint.ip", 1, ep(func(e *aetherregistryv1.ServiceEndpoint) { e.Ip = "10.0.0" })},
		{"ip with zone", "web", "endpoint.ip", 1, ep(func(e *aetherregistryv1.ServiceEndpoint) { e.Ip = "fe80::1%eth0" })},
		{"port", "web", "endpoint.port", 1, ep(func(e *aetherregistryv1.ServiceEndpoint) { e.Port = 65536 })},
		{"weight", "web", "endpoint.weight", 1, ep(func(e *aetherregistryv1.ServiceEndpoint) { e.Weight = 1 << 20 })},
		{"service", "-web", "service_name", 1, ep(func(*aetherregistryv1.ServiceEndpoint) {})},
		{"empty service", "", "service_name", 1, ep(func(*aetherregistryv1.ServiceEndpoint) {})},
		{"cluster", "web", "endpoint.cluster_name", 1, ep(func(e *aetherregistryv1.ServiceEndpoint) { e.ClusterName = "east west" })},
		{"zone", "web", "endpoint.locality.zone", 1, ep(func(e *aetherregistryv1.ServiceEndpoint) {
			e.Locality = &aetherregistryv1.ServiceEndpoint_Locality{Zone: "eu/1a"}
		})},
		{"region", "web", "endpoint.locality.region", 1, ep(func(e *aetherregistryv1.ServiceEndpoint) {
			e.Locality = &aetherregistryv1.ServiceEndpoint_Locality{Region: "1eu"}
		})},
		{"metadata key", "web", "endpoint.metadata[bad key]", 1, ep(func(e *aetherregistryv1.ServiceEndpoint) { e.Metadata = map[string]string{"bad key": "v"} })},
		{"metadata value", "web", "endpoint.metadata[k]", 1, ep(func(e *aetherregistryv1.ServiceEndpoint) { e.Metadata = map[string]string{"k": "a\nb"} })},
		{"reserved key", "web", "endpoint.metadata[" + AnnotationPrefix + "x]", 1, ep(func(e *aetherregistryv1.ServiceEndpoint) {
			e.Metadata = map[string]string{AnnotationPrefix + "x": "v"}
		})},
		{"our reserved key", "web", "endpoint.metadata[" + endpoint.ReservedAnnotationPrefix + "x]", 1, ep(func(e *aetherregistryv1.ServiceEndpoint) {
			e.Metadata = map[string]string{endpoint.ReservedAnnotationPrefix + "x": "v"}
		})},
		{"health", "web", "endpoint.metadata[" + AnnotationHealth + "]", 1, ep(func(e *aetherregistryv1.ServiceEndpoint) {
			e.Metadata = map[string]string{AnnotationHealth: "sick"}
		})},
		{"container id", "web", "endpoint.container_metadata.container_id", 1, ep(func(e *aetherregistryv1.ServiceEndpoint) {
			e.ContainerMetadata = &aetherregistryv1.ServiceEndpoint_ContainerMetadata{ContainerId: "a\x00b"}
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ToEndpoint(tc.service, tc.p, tc.ep, "east")
			if err == nil || !strings.HasPrefix(err.Error(), tc.field) {
				t.Fatalf("err %v, want one naming %s", err, tc.field)
			}
		})
	}
}

// FuzzToEndpoint: whatever a registration holds, ToEndpoint either refuses it or
// returns an endpoint the registrar would store, which converts back to a
// registration that converts to the same endpoint.
func FuzzToEndpoint(f *testing.F) {
	seed, _ := proto.Marshal(&aetherregistryv1.ServiceEndpoint{Ip: "10.0.0.1", Port: 80, Metadata: map[string]string{"a": "b", AnnotationHealth: "unhealthy"}})
	f.Add("web", int32(1), seed)
	full, _ := proto.Marshal(endpointWant())
	f.Add("web", int32(1), full)
	f.Add("", int32(0), []byte{0x0a, 0x00})
	f.Add("shop/web", int32(1), seed)
	f.Add("web__shop", int32(1), seed)
	f.Add("a__b__c", int32(1), seed)
	f.Fuzz(func(t *testing.T, svc string, p int32, b []byte) {
		var ep aetherregistryv1.ServiceEndpoint
		if proto.Unmarshal(b, &ep) != nil {
			return
		}
		e, err := ToEndpoint(svc, aetherregistryv1.Service_Protocol(p), &ep, "east")
		if err != nil {
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("ToEndpoint returned an invalid endpoint %+v: %v", e, err)
		}
		svc2, p2, back, ok := FromEndpoint(e)
		if !ok {
			t.Fatalf("an endpoint of ToEndpoint does not convert back: %+v", e)
		}
		if svc2 != svc {
			t.Fatalf("service %q is stored as %q and reads back as %q", svc, e.Service, svc2)
		}
		e2, err := ToEndpoint(svc2, p2, back, "other")
		if err != nil || !endpoint.Equal(e, e2) {
			t.Fatalf("round trip: %+v (%v), want %+v", e2, err, e)
		}
	})
}

// Aether's "NS/NAME" is our NAME__NS, both ways; an unqualified Aether name is
// itself; names that would not come back as they went are refused.
func TestServiceNameMapping(t *testing.T) {
	for _, tc := range []struct{ aether, ours string }{
		{"shop/web", "web__shop"},
		{"kube-system/core-dns", "core-dns__kube-system"},
		{"0ns/a", "a__0ns"}, // a namespace may begin with a digit, a name may not
		{"web", "web"},
		{"Web_1", "Web_1"},
		{"a___b", "a___b"},     // not NAME__NS: the namespace part begins with '_'
		{"a__b__c", "a__b__c"}, // nor this: "b__c" is no label
		{"A__b", "A__b"},       // nor this: "A" is no DNS label
		{"a__B", "a__B"},
		{"a__b-", "a__b-"},
		{"a-__b", "a-__b"},
		{"a__", "a__"},
	} {
		ours, err := OurService(tc.aether)
		if err != nil || ours != tc.ours {
			t.Errorf("OurService(%q) = %q, %v; want %q", tc.aether, ours, err, tc.ours)
		}
		if back := AetherService(tc.ours); back != tc.aether {
			t.Errorf("AetherService(%q) = %q, want %q", tc.ours, back, tc.aether)
		}
	}
	for _, bad := range []string{
		"", "/", "shop/", "/web", "a/b/c", "Shop/web", "shop/Web", "shop/1web", "shop/web_1", "sh_op/web", "-shop/web",
		"shop/web-", strings.Repeat("n", 64) + "/web", "shop/" + strings.Repeat("w", 64), "1web", "web.1",
		"web__shop", "a__0ns", // would read back as shop/web, 0ns/a
	} {
		if ours, err := OurService(bad); err == nil {
			t.Errorf("OurService(%q) = %q, want an error", bad, ours)
		}
	}
}

// Keys under aether.switchboard.dev/ but the mapping's own (and ours under
// endpoint.switchboard.dev/) never reach Aether's metadata: Aether's
// RegisterEndpoint refuses them, so an agent re-registering what it was sent
// would fail.
func TestMetadataLeavesOutReservedKeys(t *testing.T) {
	e := endpoint.Endpoint{Cluster: "east", Service: "web", Protocol: "http", Address: "10.0.0.1", Priority: 1, Health: endpoint.Draining,
		Annotations: map[string]string{"team": "a", AnnotationPrefix + "written-by-ours": "x", AnnotationPodName: "web-0", AnnotationHealth: "unhealthy"}}
	_, _, ep, _ := FromEndpoint(e)
	want := map[string]string{"team": "a", AnnotationHealth: "draining"}
	if !maps.Equal(ep.GetMetadata(), want) {
		t.Fatalf("metadata %v, want %v", ep.GetMetadata(), want)
	}
	svc, p, _, _ := FromEndpoint(e)
	if _, err := ToEndpoint(svc, p, ep, "east"); err != nil {
		t.Fatalf("re-registering what Aether was sent: %v", err)
	}
}

// FuzzServiceName: an Aether name OurService takes is a valid name of ours that
// AetherService gives back; every name of ours comes back from Aether's as it
// went.
func FuzzServiceName(f *testing.F) {
	for _, s := range []string{"shop/web", "web", "web__shop", "a__b__c", "a___b", "0/a", "A__b", "a/b/c", "/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ours, err := OurService(s); err == nil {
			if err := endpoint.ValidateName("service", ours); err != nil {
				t.Fatalf("OurService(%q) = %q, not a valid name: %v", s, ours, err)
			}
			if back := AetherService(ours); back != s {
				t.Fatalf("OurService(%q) = %q, which reads back as %q", s, ours, back)
			}
		}
		if endpoint.ValidateName("service", s) == nil {
			a := AetherService(s)
			if ours, err := OurService(a); err != nil || ours != s {
				t.Fatalf("AetherService(%q) = %q, which OurService takes to %q (%v)", s, a, ours, err)
			}
		}
	})
}
