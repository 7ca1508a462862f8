package jetstream

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

func codecSamples() []endpoint.Endpoint {
	return []endpoint.Endpoint{
		{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.1", Port: 80, Priority: 1},
		{Cluster: "prod-eu", Service: "api_gw", Protocol: "grpc", Address: "2001:db8::7", Port: 9443,
			Node: "node-7.example", Priority: 200, Weight: 30, TTL: endpoint.Never,
			Annotations: map[string]string{"team": "edge", "prometheus.io/scrape": "true", "note": "spaces and ünïcode", "html": "<a&b>", "q": `"\`}},
		{Cluster: "c", Service: "s", Protocol: "p", Address: "::", Port: 0, Priority: 255, TTL: endpoint.TTL(90 * time.Second),
			Annotations: map[string]string{}},
		{Cluster: "c", Service: "s", Protocol: "p", Address: "1.2.3.4", Port: 65535, Priority: 7, Annotations: map[string]string{"bad": "\xff\x00"}},
	}
}

// localitySamples are endpoints with region, zone or health, which the payload
// carries as reserved annotations (locality.go).
func localitySamples() []endpoint.Endpoint {
	return []endpoint.Endpoint{
		{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.1", Port: 80, Priority: 1,
			Region: "eu-west", Zone: "eu-west-1a", Health: endpoint.Draining},
		{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.2", Port: 80, Priority: 1, Zone: "b",
			Health: endpoint.Unhealthy, Annotations: map[string]string{"a": "1", "endpoint.switchboard.dev": "x", "z": "2", "team": "edge"}},
		{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.3", Port: 80, Priority: 1, Region: "us",
			Annotations: map[string]string{}, TTL: endpoint.Never},
	}
}

// TestAppendJSONMatchesMarshal: the hand-written encoder writes what encoding/json
// writes for the payload's form of the endpoint (wireForm): for an endpoint without
// locality, e.MarshalJSON's bytes; for one with, no top-level region, zone or health.
func TestAppendJSONMatchesMarshal(t *testing.T) {
	for _, e := range append(codecSamples(), localitySamples()...) {
		want, err := wireForm(e).MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		got := appendJSON(nil, e)
		if !bytes.Equal(got, want) {
			t.Errorf("appendJSON =\n%s\nwant\n%s", got, want)
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(got, &top); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"region", "zone", "health"} {
			if _, ok := top[k]; ok {
				t.Errorf("appendJSON wrote a top-level %q: %s", k, got)
			}
		}
	}
	for _, e := range codecSamples() {
		if want, _ := e.MarshalJSON(); !bytes.Equal(appendJSON(nil, e), want) {
			t.Errorf("without locality, appendJSON = %s, want e.MarshalJSON's %s", appendJSON(nil, e), want)
		}
	}
}

func TestDecodeJSONAgreesWithEndpoint(t *testing.T) {
	for _, e := range codecSamples() {
		data, _ := e.MarshalJSON()
		want, wantErr := endpoint.DecodeJSON(data)
		got, err := decodeJSON(data, &interner{})
		if (err == nil) != (wantErr == nil) || (err == nil && !endpoint.Equal(got, want)) {
			t.Errorf("decodeJSON(%s) = %+v, %v; endpoint.DecodeJSON = %+v, %v", data, got, err, want, wantErr)
		}
	}
	// Forms the fast path declines must still decode, through encoding/json.
	for _, data := range []string{
		`{"Cluster":"c","service":"s","protocol":"p","address":"1.2.3.4","port":1,"priority":1}`,
		`{"cluster":"c","service":"s","protocol":"p","address":"1.2.3.4","port":1,"priority":1,"future":[1,2]}`,
		`{"cluster":"\u0063","service":"s","protocol":"p","address":"1.2.3.4","port":1,"priority":1}`,
		`{"cluster":"c","service":"s","protocol":"p","address":"1.2.3.4","port":1.0e0,"priority":1,"ttl":null}`,
	} {
		if _, ok := fastDecode([]byte(data), nil); ok {
			t.Errorf("fastDecode accepted %s, which it should leave to encoding/json", data)
		}
		got, err := decodeJSON([]byte(data), nil)
		want, wantErr := endpoint.DecodeJSON([]byte(data))
		if (err == nil) != (wantErr == nil) || !endpoint.Equal(got, want) {
			t.Errorf("decodeJSON(%s) = %+v, %v; want %+v, %v", data, got, err, want, wantErr)
		}
	}
}

// FuzzAppendJSON: the hand-written encoder writes exactly what encoding/json does
// for the payload's form of the endpoint (wireForm, which moves region, zone and
// health into reserved annotations), and a reader gets a valid endpoint back whole.
func FuzzAppendJSON(f *testing.F) {
	f.Add("prod", "web", "node-1", "team", "edge", 80, 1, 0, int64(0), "", "", uint8(0))
	f.Add("c<", "s&", "", "k", "\xff", 0, 255, 3, int64(-1), "r", "", uint8(7))
	f.Add("c", "s", "n\"", "a/b", "ü\u2028", 65535, 9, 65535, int64(30*time.Second), "eu-west", "eu-west-1a", uint8(2))
	f.Add("c", "s", "", annZone, "x", 1, 1, 0, int64(0), "", "z", uint8(1))
	f.Add("c", "s", "", "endpoint.switchboard.dev/region", "x", 1, 1, 0, int64(0), "", "", uint8(0))
	f.Fuzz(func(t *testing.T, cluster, service, node, k, v string, port, prio, weight int, ttl int64, region, zone string, health uint8) {
		e := endpoint.Endpoint{Cluster: cluster, Service: service, Protocol: "p", Address: "10.0.0.1", Port: port,
			Node: node, Priority: prio, Weight: weight, TTL: endpoint.TTL(ttl), Region: region, Zone: zone, Health: endpoint.Health(health)}
		if k != "" {
			e.Annotations = map[string]string{k: v, "z" + k: v + v}
		}
		want, err := wireForm(e).MarshalJSON()
		if err != nil {
			t.Skip()
		}
		got := appendJSON(nil, e)
		if !bytes.Equal(got, want) {
			t.Fatalf("appendJSON =\n%q\nwant\n%q", got, want)
		}
		if e.Validate() != nil {
			return
		}
		if back, err := decodeJSON(got, &interner{}); err != nil || !endpoint.Equal(back, e) {
			t.Fatalf("decodeJSON(appendJSON(%+v)) = %+v, %v", e, back, err)
		}
	})
}

// FuzzFastDecode: whatever the fast path accepts, encoding/json reads the same way
// (through the reader's lenient payload type, loose.go).
func FuzzFastDecode(f *testing.F) {
	for _, e := range codecSamples() {
		data, _ := e.MarshalJSON()
		f.Add(data)
	}
	f.Add([]byte(` { "cluster" : "c" , "service":"s","protocol":"p","address":"1.2.3.4","port":01,"priority":1} `))
	f.Add([]byte(`{"cluster":"c","cluster":"d"}`))
	f.Add([]byte(`{"annotations":{"a":"b","a":"c"}}`))
	f.Add([]byte(`{"port":-1}`))
	f.Add([]byte(`{"port":9999999999}`))
	f.Add([]byte(`{"ttl":"never"} x`))
	f.Add([]byte(`{"ttl":"1.5s","annotations":{"__meta_x":"1"}}`))
	for _, e := range localitySamples() {
		f.Add(appendJSON(nil, e))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := fastDecode(data, &interner{})
		if !ok {
			return
		}
		var p loosePayload
		if err := json.Unmarshal(data, &p); err != nil {
			t.Fatalf("fastDecode accepted %q, encoding/json rejects it: %v", data, err)
		}
		want := endpoint.Endpoint{Cluster: p.Cluster, Service: p.Service, Protocol: p.Protocol, Address: p.Address,
			Node: p.Node, Priority: p.Priority, Weight: p.Weight, Annotations: p.Annotations, TTL: endpoint.TTL(p.TTL)}
		if p.Port != nil {
			want.Port = *p.Port
		}
		if !endpoint.Equal(got, want) {
			t.Fatalf("fastDecode(%q) = %+v, encoding/json = %+v", data, got, want)
		}
	})
}

// FuzzDecodeJSON: a reader's decoding (the fast path where it applies, with its
// shortened validation) accepts exactly the payloads the general decoder (encoding/json
// through loose.go, with validForRead) accepts, and reads them the same way, with a
// key as our writes validate it (the address canonical, however it was spelled). Two
// payloads go through one interner, as consecutive messages of a read do.
func FuzzDecodeJSON(f *testing.F) {
	for _, e := range codecSamples() {
		data, _ := e.MarshalJSON()
		f.Add(data, data)
	}
	typical, _ := typicalEndpoint().MarshalJSON()
	f.Add(typical, []byte(`{"cluster":"prod","service":"svc043","protocol":"http","address":"10.0.3.8","port":8080,"priority":1,"annotations":{"prometheus.io/scrape":"false"}}`))
	f.Add([]byte(`{"cluster":"c","service":"s","protocol":"p","address":"2001:db8::1","port":null,"priority":1,"ttl":1500000000.5}`),
		[]byte(`{"cluster":"c","service":"s","protocol":"p","address":"1.2.3.4","port":1,"priority":1,"annotations":{"a":"\u00e9","__x":""},"future":true}`))
	// Another writer's spelling of an IPv6 address reads in canonical form, by either path.
	f.Add([]byte(`{"cluster":"c","service":"s","protocol":"p","address":"2001:DB8::5","port":1,"priority":1}`),
		[]byte(`{"cluster":"c","service":"s","protocol":"p","address":"2001:0db8:0:0::5","port":1,"priority":1,"x":0}`))
	f.Add([]byte(`{"cluster":"c","service":"s","protocol":"p","address":"1.2.3.4","port":1,"priority":0}`),
		[]byte(`{"cluster":"c","service":"s","protocol":"p","address":"1.2.3.4","port":1,"priority":1,"annotations":{"k":"\xff"}}`))
	// Reserved annotations, lifted by both paths: odd values too.
	for _, e := range localitySamples() {
		f.Add(appendJSON(nil, e), []byte(`{"cluster":"c","service":"s","protocol":"p","address":"1.2.3.4","port":1,"priority":1,`+
			`"annotations":{"endpoint.switchboard.dev/health":"quarantined","endpoint.switchboard.dev/region":"9bad","endpoint.switchboard.dev/zone":""},"region":"top"}`))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		in := &interner{}
		for _, data := range [][]byte{a, b} {
			got, err := decodeJSON(data, in)
			want, wantErr := decodeLoose(data)
			if (err == nil) != (wantErr == nil) || (err == nil && !endpoint.Equal(got, want)) {
				t.Fatalf("decodeJSON(%q) = %+v, %v; the general decoder = %+v, %v", data, got, err, want, wantErr)
			}
			if err == nil && got.Key().Validate() != nil {
				t.Fatalf("decodeJSON(%q) = %+v, whose key is not canonical: %v", data, got, got.Key().Validate())
			}
		}
	})
}

// The per-entry decoding cost of a lookup, by the hand-written path (with its
// validation) and by encoding/json (endpoint.DecodeJSON).
func BenchmarkDecodeJSON(b *testing.B) {
	data := appendJSON(nil, typicalEndpoint())
	b.Run("fast", func(b *testing.B) {
		in := &interner{}
		for b.Loop() {
			if _, err := decodeJSON(data, in); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			if _, err := endpoint.DecodeJSON(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkAppendJSON(b *testing.B) {
	e := typicalEndpoint()
	b.Run("fast", func(b *testing.B) {
		buf := make([]byte, 0, 512)
		for b.Loop() {
			buf = appendJSON(buf[:0], e)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			if _, err := e.MarshalJSON(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// typicalEndpoint is an entry as agents write them: ASCII names, one annotation.
func typicalEndpoint() endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: "prod", Service: "svc042", Protocol: "http", Address: "10.0.3.7", Port: 8080,
		Node: "node-17", Priority: 1, Weight: 10, TTL: endpoint.TTL(30 * time.Second),
		Annotations: map[string]string{"prometheus.io/scrape": "true"}}
}
