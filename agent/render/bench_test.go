package render

import (
	"fmt"
	"io"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// entries returns n endpoints over 4 services, sorted as List returns them.
func entries(n int) []endpoint.Endpoint {
	eps := make([]endpoint.Endpoint, n)
	services := []string{"web", "api", "db", "cache"}
	for i := range eps {
		eps[i] = endpoint.Endpoint{
			Cluster: "prod", Service: services[i%len(services)], Protocol: "http",
			Address: fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff), Port: 8080, Priority: 1,
			Annotations: map[string]string{"team": "edge"},
		}
	}
	endpoint.Sort(eps)
	return eps
}

// benchTemplate is an nginx config with one upstream per service.
var benchTemplate = func() string {
	var s string
	for _, svc := range []string{"web", "api", "db", "cache"} {
		s += `upstream ` + svc + ` {
{{- range registrations "prod" "http" "` + svc + `" ""}}
  server {{hostport .Address .Port}} weight={{.Priority}}; # {{.Annotations.team}}
{{- end}}
}
`
	}
	return s
}()

// BenchmarkRender10k renders a four-upstream nginx config over 10,000 entries.
func BenchmarkRender10k(b *testing.B) {
	eps := entries(10000)
	t, err := Parse("bench.tmpl", []byte(benchTemplate))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := t.Execute(io.Discard, eps); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRender10kAll ranges once over all 10,000 entries.
func BenchmarkRender10kAll(b *testing.B) {
	eps := entries(10000)
	t, err := Parse("bench.tmpl", []byte(`{{range registrations "" "" "" ""}}{{hostport .Address .Port}}
{{end}}`))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := t.Execute(io.Discard, eps); err != nil {
			b.Fatal(err)
		}
	}
}
