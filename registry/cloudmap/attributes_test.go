package cloudmap

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	full := endpoint.Endpoint{
		Cluster: "prod-eu", Service: "api_gw", Protocol: "grpc", Address: "2001:db8::7", Port: 9443,
		Node: "node-7.example", Priority: 200, Weight: 30, TTL: endpoint.TTL(30 * time.Second),
		Annotations: map[string]string{"team": "edge", "note": "spaces and ünïcode", "long": strings.Repeat("ü", 1100)},
	}
	cases := map[string]struct {
		e    endpoint.Endpoint
		want map[string]string // attributes that must be present with these values; "" = absent
	}{
		"ipv4 no port": {ep("c", "s", "p", "10.0.0.1", 0), map[string]string{
			"AWS_INSTANCE_IPV4": "10.0.0.1", "AWS_INSTANCE_IPV6": "", "AWS_INSTANCE_PORT": "", "ttl": "", "expiry": "", "annotations": ""}},
		"never": {func() endpoint.Endpoint { e := ep("c", "s", "p", "10.0.0.1", 80); e.TTL = endpoint.Never; return e }(),
			map[string]string{"ttl": "never", "expiry": "", "AWS_INSTANCE_PORT": "80"}},
		"full": {full, map[string]string{
			"AWS_INSTANCE_IPV6": "2001:db8::7", "AWS_INSTANCE_IPV4": "", "cluster": "prod-eu", "node": "node-7.example",
			"priority": "200", "weight": "30", "ttl": "30s", "expiry": "1700000030000"}},
	}
	for name, c := range cases {
		a, err := encode(c.e, now)
		if err != nil {
			t.Fatalf("%s: encode: %v", name, err)
		}
		for k, v := range c.want {
			if got, ok := a[k]; (v == "" && ok) || (v != "" && got != v) {
				t.Errorf("%s: attribute %s = %q (present %v), want %q", name, k, got, ok, v)
			}
		}
		for k, v := range a {
			if utf8.RuneCountInString(v) > maxAttrValue {
				t.Errorf("%s: attribute %s has %d characters", name, k, utf8.RuneCountInString(v))
			}
		}
		d, err := decode(c.e.InstanceID(), a)
		if err != nil {
			t.Fatalf("%s: decode: %v", name, err)
		}
		if !endpoint.Equal(d.ep, c.e) {
			t.Errorf("%s: round trip\n got %+v\nwant %+v", name, d.ep, c.e)
		}
		if c.e.TTL.Duration() > 0 && !d.expiry.Equal(now.Add(c.e.TTL.Duration())) {
			t.Errorf("%s: expiry %v, want %v", name, d.expiry, now.Add(c.e.TTL.Duration()))
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	good := ep("c", "s", "p", "10.0.0.1", 80)
	attrs, _ := encode(good, time.Now())
	id := good.InstanceID()
	for name, mutate := range map[string]func(map[string]string){
		"id mismatch":   func(a map[string]string) { a["cluster"] = "other" },
		"bad port":      func(a map[string]string) { a["AWS_INSTANCE_PORT"] = "eighty" },
		"bad ttl":       func(a map[string]string) { a["ttl"] = "soon" },
		"bad expiry":    func(a map[string]string) { a["expiry"] = "tomorrow" },
		"bad json":      func(a map[string]string) { a["annotations"] = "{" },
		"no address":    func(a map[string]string) { delete(a, "AWS_INSTANCE_IPV4") },
		"bad priority":  func(a map[string]string) { a["priority"] = "0" },
		"missing proto": func(a map[string]string) { delete(a, "protocol") },
	} {
		a := map[string]string{}
		for k, v := range attrs {
			a[k] = v
		}
		mutate(a)
		if _, err := decode(id, a); err == nil {
			t.Errorf("%s: decode accepted %v", name, a)
		}
	}
}

func TestSplitKeepsCharacters(t *testing.T) {
	s := strings.Repeat("aé€😀", 700)
	parts := split(s, 1024)
	if strings.Join(parts, "") != s {
		t.Fatal("split lost text")
	}
	for i, p := range parts {
		if !utf8.ValidString(p) || utf8.RuneCountInString(p) > 1024 {
			t.Fatalf("part %d: %d characters, valid %v", i, utf8.RuneCountInString(p), utf8.ValidString(p))
		}
	}
}

// cloudMapServiceRE is Cloud Map's rule for service names (as the fake enforces it).
var cloudMapServiceRE = regexp.MustCompile(`^([a-zA-Z0-9_][a-zA-Z0-9_-]{0,61}[a-zA-Z0-9_]|[a-zA-Z0-9])(\.([a-zA-Z0-9_][a-zA-Z0-9_-]{0,61}[a-zA-Z0-9_]|[a-zA-Z0-9]))*$`)

func TestServiceName(t *testing.T) {
	long := "a" + strings.Repeat("b", 100)
	for in, want := range map[string]string{
		"web":                               "web",
		"api_gw":                            "api_gw",
		strings.Repeat("x", 63):             strings.Repeat("x", 63),
		"edge-":                             "edge.",
		long:                                long[:46] + ".",
		"a" + strings.Repeat("-", 60) + "-": "a.",
	} {
		got := serviceName(in)
		if !strings.HasPrefix(got, want) || !cloudMapServiceRE.MatchString(got) || len(got) > 127 {
			t.Errorf("serviceName(%q) = %q, want prefix %q and a valid Cloud Map name", in, got, want)
		}
	}
	if serviceName("edge-") == serviceName("edge--") {
		t.Error("distinct names mapped to one Cloud Map service")
	}
}

// FuzzServiceName: every valid endpoint service name maps to a valid Cloud Map
// service name, and valid-as-is names are kept.
func FuzzServiceName(f *testing.F) {
	for _, s := range []string{"web", "a-", "a_b-c", strings.Repeat("z", 64), "A" + strings.Repeat("-", 70)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if endpoint.ValidateName("service", s) != nil {
			return
		}
		got := serviceName(s)
		if len(got) > 127 || !cloudMapServiceRE.MatchString(got) {
			t.Fatalf("serviceName(%q) = %q is not a valid Cloud Map name", s, got)
		}
		if cloudMapServiceRE.MatchString(s) && len(s) <= 63 && got != s {
			t.Fatalf("serviceName(%q) = %q changed a valid name", s, got)
		}
	})
}

// FuzzDecode feeds arbitrary attribute maps (as JSON) to decode: it must not panic,
// and whatever it accepts must encode back to attributes that decode to the same
// endpoint.
func FuzzDecode(f *testing.F) {
	seed, _ := encode(endpoint.Endpoint{Cluster: "c", Service: "s", Protocol: "p", Address: "10.0.0.1", Port: 80, Priority: 1,
		Annotations: map[string]string{"k": "v"}, TTL: endpoint.TTL(time.Minute)}, time.Now())
	b, _ := json.Marshal(seed)
	f.Add(ep("c", "s", "p", "10.0.0.1", 80).InstanceID(), string(b))
	f.Add("x", `{"AWS_INSTANCE_IPV6":"::1","annotations":"{\"a\":","annotations.1":"\"b\"}"}`)
	f.Fuzz(func(t *testing.T, id, js string) {
		var a map[string]string
		if json.Unmarshal([]byte(js), &a) != nil {
			return
		}
		d, err := decode(id, a)
		if err != nil {
			return
		}
		again, err := encode(d.ep, time.Now())
		if err != nil {
			return // too large for Cloud Map: encode refuses, which is its job
		}
		d2, err := decode(id, again)
		if err != nil || !endpoint.Equal(d.ep, d2.ep) {
			t.Fatalf("re-encoding changed %+v: %+v, %v", d.ep, d2.ep, err)
		}
	})
}
