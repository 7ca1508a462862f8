package filesd

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

func ep(cluster, service, protocol, addr string, port int, ann ...string) endpoint.Endpoint {
	e := endpoint.Endpoint{Cluster: cluster, Service: service, Protocol: protocol, Address: addr, Port: port, Priority: 1}
	for i := 0; i+1 < len(ann); i += 2 {
		if e.Annotations == nil {
			e.Annotations = map[string]string{}
		}
		e.Annotations[ann[i]] = ann[i+1]
	}
	return e
}

func TestScraped(t *testing.T) {
	tests := []struct {
		name string
		e    endpoint.Endpoint
		want bool
	}{
		{"service prometheus", ep("c", "prometheus", "http", "10.0.0.1", 9090), true},
		{"protocol prometheus", ep("c", "node", "prometheus", "10.0.0.1", 9100), true},
		{"annotation true", ep("c", "web", "http", "10.0.0.1", 80, ScrapeAnnotation, "true"), true},
		{"neither", ep("c", "web", "http", "10.0.0.1", 80), false},
		{"annotation false excludes", ep("c", "web", "prometheus", "10.0.0.1", 80, ScrapeAnnotation, "false"), false},
		{"annotation True excludes", ep("c", "prometheus", "http", "10.0.0.1", 80, ScrapeAnnotation, "True"), false},
		{"annotation empty excludes", ep("c", "prometheus", "http", "10.0.0.1", 80, ScrapeAnnotation, ""), false},
		{"no port", ep("c", "prometheus", "http", "10.0.0.1", 0), false},
		{"no port, annotated", ep("c", "web", "http", "10.0.0.1", 0, ScrapeAnnotation, "true"), false},
	}
	for _, tc := range tests {
		if got := Scraped(tc.e); got != tc.want {
			t.Errorf("%s: Scraped = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestLabelName(t *testing.T) {
	for s, want := range map[string]bool{
		"team": true, "_x": true, "A9_b": true, "": false, "9a": false, "__meta": false, "__address__": false,
		"prometheus.io/scrape": false, "a-b": false, "a.b": false, "é": false,
	} {
		if got := LabelName(s); got != want {
			t.Errorf("LabelName(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestGroups(t *testing.T) {
	eps := []endpoint.Endpoint{
		ep("prod", "node", "prometheus", "10.0.0.1", 9100, "team", "edge", "prometheus.io/path", "/m", "__address__", "evil:1"),
		ep("prod", "node", "prometheus", "10.0.0.2", 9100, "team", "edge"),
		ep("prod", "node", "prometheus", "10.0.0.3", 9100, "team", "core"),
		ep("prod", "node", "prometheus", "10.0.0.4", 0), // no port: skipped
		ep("prod", "web", "http", "10.0.0.5", 8080, ScrapeAnnotation, "true", "cluster", "spoofed"),
		ep("prod", "web", "http", "10.0.0.6", 8080), // not scraped
		ep("dev", "prometheus", "http", "2001:db8::1", 9090),
		ep("prod", "node", "prometheus", "2001:db8::2", 9100, "team", "edge"),
	}
	endpoint.Sort(eps)
	got := Groups(eps)
	want := []TargetGroup{
		{Targets: []string{"[2001:db8::1]:9090"}, Labels: map[string]string{"cluster": "dev", "service": "prometheus", "protocol": "http"}},
		{Targets: []string{"10.0.0.3:9100"}, Labels: map[string]string{"cluster": "prod", "service": "node", "protocol": "prometheus", "team": "core"}},
		{Targets: []string{"10.0.0.1:9100", "10.0.0.2:9100", "[2001:db8::2]:9100"}, Labels: map[string]string{"cluster": "prod", "service": "node", "protocol": "prometheus", "team": "edge"}},
		{Targets: []string{"10.0.0.5:8080"}, Labels: map[string]string{"cluster": "prod", "service": "web", "protocol": "http"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Groups =\n%+v\nwant\n%+v", got, want)
	}
	data, err := Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := Parse(data)
	if err != nil {
		t.Fatalf("our own output fails the file SD rules: %v\n%s", err, data)
	}
	if !reflect.DeepEqual(parsed, want) {
		t.Errorf("round trip = %+v", parsed)
	}
	for _, g := range parsed {
		for k := range g.Labels {
			if strings.HasPrefix(k, "__") {
				t.Errorf("reserved label %q in output", k)
			}
		}
	}
}

func TestMarshalEmpty(t *testing.T) {
	data, err := Build(nil)
	if err != nil || string(data) != "[]\n" {
		t.Fatalf("Build(nil) = %q, %v; want []", data, err)
	}
	if g, err := Parse(data); err != nil || len(g) != 0 {
		t.Fatalf("Parse([]) = %v, %v", g, err)
	}
}

func TestParseRejects(t *testing.T) {
	for doc, want := range map[string]string{
		`{}`:                                      "cannot unmarshal",
		`null`:                                    "got null",
		`[{"targets":["10.0.0.1"]}]`:              "missing port",
		`[{"targets":["2001:db8::1:80"]}]`:        "too many colons",
		`[{"targets":[":80"]}]`:                   "no host",
		`[{"targets":["a:0"]}]`:                   "port must be",
		`[{"targets":["a:http"]}]`:                "port must be",
		`[{"targets":[],"labels":{"a.b":"x"}}]`:   `label name "a.b"`,
		`[{"targets":[],"labels":{"a":1}}]`:       "cannot unmarshal",
		`[{"targets":[],"extra":1}]`:              "unknown field",
		`[] []`:                                   "after the JSON list",
		`[{"targets":["a:1"],"labels":{"9":""}}]`: `label name "9"`,
	} {
		if _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s) = %v, want an error containing %q", doc, err, want)
		}
	}
}

func TestOutput(t *testing.T) {
	path := filepath.Join(t.TempDir(), "targets.json")
	o := &Output{Path: path}
	eps := []endpoint.Endpoint{ep("c", "prometheus", "http", "::1", 9090)}
	for i, want := range []bool{true, false} {
		wrote, err := o.Update(context.Background(), eps)
		if err != nil || wrote != want {
			t.Fatalf("update %d = %v, %v; want wrote=%v", i, wrote, err, want)
		}
	}
	data, _ := os.ReadFile(path)
	g, err := Parse(data)
	if err != nil || len(g) != 1 || g[0].Targets[0] != "[::1]:9090" {
		t.Fatalf("file = %s (%v)", data, err)
	}
	if wrote, err := o.Update(context.Background(), nil); err != nil || !wrote {
		t.Fatalf("emptying = %v, %v", wrote, err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`[{"targets":["10.0.0.1:9100","[::1]:80"],"labels":{"team":"edge"}}]`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`[{"targets":null,"labels":null}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		groups, err := Parse(data)
		if err != nil {
			return
		}
		// Anything accepted must survive our own writer and be accepted again.
		out, err := Marshal(groups)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(out); err != nil {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
	})
}
