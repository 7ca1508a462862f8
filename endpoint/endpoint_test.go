package endpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"gopkg.in/yaml.v3"
)

func valid() Endpoint {
	return Endpoint{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.2", Port: 8080, Priority: 1}
}

func TestInstanceIDVector(t *testing.T) {
	if got, want := valid().InstanceID(), "8fc546475523da4f"; got != want {
		t.Fatalf("InstanceID = %s, want %s", got, want)
	}
	// The id covers every key field: changing any one changes it.
	base := valid().InstanceID()
	for name, mutate := range map[string]func(*Endpoint){
		"cluster":  func(e *Endpoint) { e.Cluster = "prod2" },
		"service":  func(e *Endpoint) { e.Service = "web2" },
		"protocol": func(e *Endpoint) { e.Protocol = "grpc" },
		"address":  func(e *Endpoint) { e.Address = "10.0.0.3" },
		"port":     func(e *Endpoint) { e.Port = 8081 },
	} {
		e := valid()
		mutate(&e)
		if e.InstanceID() == base {
			t.Errorf("changing %s kept the instance id", name)
		}
	}
	// Non-key fields do not.
	e := valid()
	e.Priority, e.Node, e.Annotations = 9, "n1", map[string]string{"a": "b"}
	if e.InstanceID() != base {
		t.Error("a non-key field changed the instance id")
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*Endpoint)
		field  string // "" = valid
	}{
		{"valid", func(*Endpoint) {}, ""},
		{"ipv6", func(e *Endpoint) { e.Address = "2001:db8::1" }, ""},
		{"port zero", func(e *Endpoint) { e.Port = 0 }, ""},
		{"max fields", func(e *Endpoint) { e.Port, e.Priority, e.Weight = 65535, 255, 65535 }, ""},
		{"ttl never", func(e *Endpoint) { e.TTL = Never }, ""},
		{"ttl 30s", func(e *Endpoint) { e.TTL = TTL(30 * time.Second) }, ""},
		{"names with _ and -", func(e *Endpoint) { e.Service, e.Cluster = "api_gw-2", "eu-west-1" }, ""},
		{"annotation keys", func(e *Endpoint) { e.Annotations = map[string]string{"prometheus.io/scrape": "true", "a": ""} }, ""},
		{"empty cluster", func(e *Endpoint) { e.Cluster = "" }, "cluster"},
		{"service starts with digit", func(e *Endpoint) { e.Service = "1web" }, "service"},
		{"protocol with dot", func(e *Endpoint) { e.Protocol = "h.ttp" }, "protocol"},
		{"service with space", func(e *Endpoint) { e.Service = "we b" }, "service"},
		{"service with wildcard", func(e *Endpoint) { e.Service = "*" }, "service"},
		{"name too long", func(e *Endpoint) { e.Service = "a" + strings.Repeat("b", 253) }, "service"},
		{"empty address", func(e *Endpoint) { e.Address = "" }, "address"},
		{"hostname", func(e *Endpoint) { e.Address = "example.com" }, "address"},
		{"bad ipv4", func(e *Endpoint) { e.Address = "10.0.0.256" }, "address"},
		{"non-canonical ipv6", func(e *Endpoint) { e.Address = "2001:DB8::1" }, "address"},
		{"zone", func(e *Endpoint) { e.Address = "fe80::1%eth0" }, "address"},
		{"negative port", func(e *Endpoint) { e.Port = -1 }, "port"},
		{"port too big", func(e *Endpoint) { e.Port = 65536 }, "port"},
		{"priority zero", func(e *Endpoint) { e.Priority = 0 }, "priority"},
		{"priority too big", func(e *Endpoint) { e.Priority = 256 }, "priority"},
		{"negative weight", func(e *Endpoint) { e.Weight = -1 }, "weight"},
		{"node with space", func(e *Endpoint) { e.Node = "node 1" }, "node"},
		{"bad annotation key", func(e *Endpoint) { e.Annotations = map[string]string{"-x": "1"} }, "annotations"},
		{"bad annotation value", func(e *Endpoint) { e.Annotations = map[string]string{"x": "\xff"} }, "annotations[x]"},
		{"ttl too short", func(e *Endpoint) { e.TTL = TTL(500 * time.Millisecond) }, "ttl"},
		{"ttl fractional", func(e *Endpoint) { e.TTL = TTL(1500 * time.Millisecond) }, "ttl"},
		{"ttl negative", func(e *Endpoint) { e.TTL = TTL(-5 * time.Second) }, "ttl"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := valid()
			c.mutate(&e)
			err := e.Validate()
			if c.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Fatalf("Validate() = %v, want a FieldError on %s", err, c.field)
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("error %q must match ErrInvalid and name %s", err, c.field)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	e := valid()
	e.Address = "2001:DB8:0:0::1"
	e.Normalize()
	if e.Address != "2001:db8::1" || e.Validate() != nil {
		t.Fatalf("Normalize gave %q", e.Address)
	}
	e.Address = "not-an-ip"
	e.Normalize()
	if e.Address != "not-an-ip" {
		t.Fatal("Normalize must leave unparseable addresses for Validate to report")
	}
}

func TestTTL(t *testing.T) {
	for _, c := range []struct {
		in   string
		want TTL
		err  bool
	}{
		{"", 0, false}, {"never", Never, false}, {"NEVER", Never, false}, {"30s", TTL(30 * time.Second), false},
		{"1m30s", TTL(90 * time.Second), false}, {" 5s ", TTL(5 * time.Second), false},
		{"0.5s", 0, true}, {"1.5s", 0, true}, {"-1s", 0, true}, {"forever", 0, true}, {"30", 0, true},
	} {
		got, err := ParseTTL(c.in)
		if (err != nil) != c.err || (!c.err && got != c.want) {
			t.Errorf("ParseTTL(%q) = %v, %v; want %v, err=%v", c.in, got, err, c.want, c.err)
		}
		if err != nil && !strings.Contains(err.Error(), "ttl") {
			t.Errorf("ParseTTL(%q) error %q does not say ttl", c.in, err)
		}
	}
	for _, ttl := range []TTL{0, Never, TTL(30 * time.Second)} {
		b, err := json.Marshal(ttl)
		if err != nil {
			t.Fatal(err)
		}
		var back TTL
		if err := json.Unmarshal(b, &back); err != nil || back != ttl {
			t.Errorf("JSON round trip of %v via %s = %v, %v", ttl, b, back, err)
		}
		y, err := yaml.Marshal(struct{ TTL TTL }{ttl})
		if err != nil {
			t.Fatal(err)
		}
		var yb struct{ TTL TTL }
		if err := yaml.Unmarshal(y, &yb); err != nil || yb.TTL != ttl {
			t.Errorf("YAML round trip of %v via %s = %v, %v", ttl, y, yb.TTL, err)
		}
	}
	if err := json.Unmarshal([]byte(`30`), new(TTL)); err == nil {
		t.Error("a JSON number must be rejected: the unit would be a guess")
	}
	var y struct{ TTL TTL }
	err := yaml.Unmarshal([]byte("ttl: [1]\n"), &y)
	if err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("YAML error %v must name the line", err)
	}
}

func TestJSONForm(t *testing.T) {
	e := valid()
	e.Annotations = map[string]string{"team": "edge"}
	e.TTL = TTL(30 * time.Second)
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.2","port":8080,"priority":1,"annotations":{"team":"edge"},"ttl":"30s"}`
	if string(b) != want {
		t.Fatalf("JSON form\n got %s\nwant %s", b, want)
	}
	back, err := DecodeJSON(b)
	if err != nil || !Equal(back, e) {
		t.Fatalf("DecodeJSON = %+v, %v", back, err)
	}
	// Readers tolerate fields added by newer writers.
	if _, err := DecodeJSON([]byte(`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.2","port":1,"priority":1,"zone":"a"}`)); err != nil {
		t.Fatalf("unknown field: %v", err)
	}
	if _, err := DecodeJSON([]byte(`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.2","port":1,"priority":0}`)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("DecodeJSON must validate, got %v", err)
	}
	if _, err := DecodeJSON([]byte(`{"port":"x"}`)); err == nil || !strings.Contains(err.Error(), "endpoint JSON") {
		t.Fatalf("malformed JSON error %v", err)
	}
}

func TestProtoRoundTrip(t *testing.T) {
	for _, ttl := range []TTL{0, Never, TTL(time.Minute)} {
		e := valid()
		e.Node, e.Weight, e.Priority, e.TTL = "n1", 7, 3, ttl
		e.Annotations = map[string]string{"k": "v"}
		p := e.ToProto()
		if p.GetInstanceId() != e.InstanceID() {
			t.Fatal("ToProto must fill the instance id")
		}
		b, err := proto.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var q = p.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(b, q); err != nil {
			t.Fatal(err)
		}
		back, err := FromProto(p)
		if err != nil || !Equal(back, e) {
			t.Fatalf("proto round trip = %+v, %v; want %+v", back, err, e)
		}
	}
	if _, err := FromProto(nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("FromProto(nil) = %v", err)
	}
	bad := valid().ToProto()
	bad.Service = "9"
	if _, err := FromProto(bad); err == nil || !strings.Contains(err.Error(), "service") {
		t.Fatalf("FromProto must validate: %v", err)
	}
	upper := valid().ToProto()
	upper.Address = "2001:DB8::1"
	if e, err := FromProto(upper); err != nil || e.Address != "2001:db8::1" {
		t.Fatalf("FromProto must normalize the address: %v %v", e.Address, err)
	}
}

func TestSort(t *testing.T) {
	mk := func(addr string, port int) Endpoint { e := valid(); e.Address, e.Port = addr, port; return e }
	eps := []Endpoint{mk("2001:db8::1", 1), mk("10.0.0.10", 1), mk("::1", 1), mk("10.0.0.2", 443), mk("9.1.1.1", 1), mk("10.0.0.2", 80)}
	Sort(eps)
	var got []string
	for _, e := range eps {
		got = append(got, HostPort(e.Address, e.Port))
	}
	want := "9.1.1.1:1 10.0.0.2:80 10.0.0.2:443 10.0.0.10:1 [::1]:1 [2001:db8::1]:1"
	if strings.Join(got, " ") != want {
		t.Fatalf("Sort = %s, want %s", strings.Join(got, " "), want)
	}
	if Compare(mk("10.0.0.2", 1), mk("10.0.0.10", 1)) >= 0 {
		t.Fatal("Compare must order numerically")
	}
}

func TestFilter(t *testing.T) {
	e := valid()
	e.Address = "2001:db8::1"
	for _, c := range []struct {
		f    Filter
		want bool
	}{
		{Filter{}, true},
		{Filter{Cluster: "*", Service: "*", Protocol: "*", Address: "*"}, true},
		{Filter{Cluster: "prod", Service: "web", Protocol: "http", Address: "2001:DB8::1"}, true},
		{Filter{Cluster: "dev"}, false},
		{Filter{Service: "db"}, false},
		{Filter{Protocol: "grpc"}, false},
		{Filter{Address: "2001:db8::2"}, false},
	} {
		if got := c.f.Match(e); got != c.want {
			t.Errorf("%+v.Match = %v, want %v", c.f, got, c.want)
		}
	}
	if err := (Filter{Service: "bad name"}).Validate(); err == nil || !strings.Contains(err.Error(), "service") {
		t.Errorf("Filter.Validate = %v", err)
	}
	if err := (Filter{Address: "x"}).Validate(); err == nil {
		t.Error("Filter.Validate accepted a bad address")
	}
	if err := (Filter{Service: "*", Address: "2001:DB8::1"}).Validate(); err != nil {
		t.Errorf("Filter.Validate = %v", err)
	}
}

func TestHostPort(t *testing.T) {
	if got := HostPort("2001:db8::1", 80); got != "[2001:db8::1]:80" {
		t.Fatal(got)
	}
	if got := HostPort("10.0.0.1", 80); got != "10.0.0.1:80" {
		t.Fatal(got)
	}
	if got := (Key{"c", "s", "p", "::1", 9}).String(); got != "c/s/p/[::1]:9" {
		t.Fatal(got)
	}
}

// A key's endpoint has the key's fields and nothing else.
func TestKeyEndpoint(t *testing.T) {
	k := Key{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.1", Port: 80}
	got := k.Endpoint()
	if got.Key() != k || !Equal(got, Endpoint{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.1", Port: 80}) {
		t.Fatalf("Key.Endpoint() = %+v", got)
	}
}

// IsSorted agrees with Sort.
func TestIsSorted(t *testing.T) {
	eps := make([]Endpoint, 50)
	for i := range eps {
		eps[i] = valid()
		eps[i].Address = fmt.Sprintf("10.0.%d.%d", (i*7)%5, (i*31)%256)
		eps[i].Port = i % 3
	}
	if IsSorted(eps) {
		t.Fatal("IsSorted says an unsorted list is sorted")
	}
	Sort(eps)
	if !IsSorted(eps) || !IsSorted(nil) || !IsSorted(eps[:1]) {
		t.Fatal("IsSorted says a sorted list is not")
	}
}
