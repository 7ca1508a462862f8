package pods_test

import (
	"net/netip"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/agent/pods"
)

// Whatever the record decoder accepts is a valid record that survives encoding and
// decoding again unchanged; nothing makes it panic.
func FuzzDecodeRecord(f *testing.F) {
	good, err := pods.EncodeRecord(pods.Record{
		Ref: pods.Ref{Network: "net", ContainerID: "c1", IfName: "eth0"}, Pod: pods.PodRef{Namespace: "default", Name: "web-1", UID: "u"},
		Netns: "/var/run/netns/x", IPs: []string{"10.0.0.1", "fd00::1"}, Created: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":2,"ref":{}}`))
	f.Add([]byte(`{"version":1,"ref":{"network":"n","container_id":"c","ifname":"i"},"pod":{"namespace":"a","name":"b"},"ips":["::ffff:1.2.3.4","1.2.3.4"],"created":"2026-01-01T00:00:00+02:00"} {}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := pods.DecodeRecord(b)
		if err != nil {
			return
		}
		if r.Ref.Network == "" || r.Ref.ContainerID == "" || r.Ref.IfName == "" || r.Pod.Namespace == "" || r.Pod.Name == "" || len(r.IPs) == 0 || r.Created.IsZero() {
			t.Fatalf("accepted an incomplete record %+v", r)
		}
		for _, ip := range r.IPs {
			if a, err := netip.ParseAddr(ip); err != nil || a.String() != ip {
				t.Fatalf("accepted address %q, not canonical", ip)
			}
		}
		again, err := pods.EncodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		back, err := pods.DecodeRecord(again)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v\n%s", err, again)
		}
		if !back.Created.Equal(r.Created) {
			t.Fatalf("created %v became %v", r.Created, back.Created)
		}
		back.Created = r.Created
		if !reflect.DeepEqual(back, r) {
			t.Fatalf("round trip changed the record:\n%+v\n%+v", r, back)
		}
	})
}

// The annotation parsers, through Derive: whatever the annotations say, Derive never
// panics, a skipped pod yields nothing, and what it yields is valid and carries the
// priority and weight the annotations asked for.
func FuzzDeriveAnnotations(f *testing.F) {
	f.Add("true", "web", "http", "http-metrics", "prometheus", "10", "100", "team", "edge")
	f.Add("", "", "", "http", "", "", "", "", "")
	f.Add("false", "a.b", "http,,grpc", "80-x", "h2.c", "0", "-1", "k8s.pod", "x\ny")
	f.Add("yes", "web", " http , http ", "http", "grpc", "+5", "65536", "-bad", "\u2028")
	f.Fuzz(func(t *testing.T, register, service, ports, portName, protocol, priority, weight, copyKey, copyValue string) {
		p := newPod("web-1", withIPs("10.0.0.1"), withPorts(cport("http", 8080), cport(portName, 9090)))
		for k, v := range map[string]string{
			pods.KeyRegister: register, pods.AnnotationService: service, pods.AnnotationPorts: ports,
			pods.AnnotationProtocolPrefix + portName: protocol, pods.AnnotationPriority: priority,
			pods.AnnotationWeight: weight, pods.AnnotationCopyPrefix + copyKey: copyValue,
		} {
			if v != "" {
				p.Annotations[k] = v
			}
		}
		entries, skip := pods.Derive(p, nil, deriveConfig())
		if skip != "" && entries != nil {
			t.Fatalf("skipped (%s) with entries %v", skip, entries)
		}
		for _, e := range entries {
			if err := e.Endpoint.Validate(); err != nil {
				t.Fatalf("derived an invalid endpoint: %v", err)
			}
			checkNumber(t, priority, e.Endpoint.Priority, 1)
			checkNumber(t, weight, e.Endpoint.Weight, 0)
		}
	})
}

// checkNumber checks that an annotation's number made it to the endpoint, or the
// default when the annotation is absent.
func checkNumber(t *testing.T, annotation string, got, def int) {
	t.Helper()
	want := def
	if annotation != "" {
		n, err := strconv.ParseUint(annotation, 10, 32)
		if err != nil {
			t.Fatalf("registered with annotation %q, which is no number", annotation)
		}
		want = int(n)
	}
	if got != want {
		t.Fatalf("endpoint has %d, annotation %q asks %d", got, annotation, want)
	}
}
