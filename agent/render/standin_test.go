package render

import (
	"reflect"
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// TestStandInHasEveryEndpointField: a template sees the same fields whether or not an
// endpoint has a refused value; a field added to endpoint.Endpoint and not to the
// stand-in would make templates that use it fail on such endpoints only.
func TestStandInHasEveryEndpointField(t *testing.T) {
	st := reflect.TypeFor[standIn]()
	for f := range reflect.TypeFor[endpoint.Endpoint]().Fields() {
		if !f.IsExported() {
			continue
		}
		if _, ok := st.FieldByName(f.Name); !ok {
			t.Errorf("standIn lacks endpoint.Endpoint's field %s", f.Name)
		}
	}
}

// TestStandInCarriesLocalityAndHealth: an endpoint with a refused annotation still
// renders its zone and health, and its JSON form carries them.
func TestStandInCarriesLocalityAndHealth(t *testing.T) {
	b := ep("prod", "web", "http", "10.0.0.2", 80)
	b.Region, b.Zone, b.Health = "eu", "eu-b", endpoint.Draining
	b.Annotations = map[string]string{"pem": "x\ny"}
	for tmpl, want := range map[string]string{
		`{{- range registrations "prod" "http" "web" "" }}{{ .Address }} {{ .Region }} {{ .Zone }} {{ .Health }}{{ end }}`: "10.0.0.2 eu eu-b draining",
		`{{- range registrations "prod" "http" "web" "" }}{{ json . }}{{ end }}`:                                           `"health":"draining"`,
	} {
		tp, err := Parse("t", []byte(tmpl))
		if err != nil {
			t.Fatal(err)
		}
		out, refused, err := tp.Render([]endpoint.Endpoint{b})
		if err != nil || len(refused) != 0 || !strings.Contains(string(out), want) {
			t.Errorf("%s: rendered %q, refused %v, %v; want %s", tmpl, out, refused, err, want)
		}
	}
}
