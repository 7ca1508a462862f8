package render

import (
	"crypto/rand"
	"regexp"
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// costly matches what could make one execution run long: a number of four digits or
// more (a range over it, a printf width).
var costly = regexp.MustCompile(`[0-9]{4}`)

// FuzzRenderRefusesControlCharacters runs templates over endpoints whose annotation
// and node hold a value with control characters. Rendering never panics, and unless the
// template asks for values raw, the value never appears in the output. A random
// suffix makes the value one no template can spell out by itself.
func FuzzRenderRefusesControlCharacters(f *testing.F) {
	each := `{{range registrations "" "" "" ""}}`
	for _, src := range []string{
		nginxUpstream,
		each + `{{.Address}} {{.Annotations.team}} {{.Node}}{{end}}`,
		each + `{{printf "%s|%v|%q|%x|%d|%#v" .Annotations.team .Node .Annotations .Annotations.team .Node .}}{{end}}`,
		each + `{{print .}}{{println .Annotations}}{{html .Node}}{{js .Node}}{{urlquery .Annotations.team}}{{end}}`,
		each + `{{range $k, $v := .Annotations}}{{$k}}={{$v}};{{end}}{{end}}`,
		each + `{{with .Annotations.team}}{{.}}{{else}}none{{end}}{{end}}`,
		each + `{{if eq .Annotations.team "x"}}{{.Node}}{{end}}{{len .Node}}{{end}}`,
		each + `{{index .Annotations "team"}}{{index .Annotations "none"}}{{end}}`,
		each + `{{quote .Node}}{{json .}}{{shellquote .Annotations.team}}{{nginx .Node}}{{haproxy .Annotations.team}}{{end}}`,
		each + `{{raw .Annotations.team}}{{end}}`,
		each + `{{$x := .Annotations.team}}{{and 1 $x}}{{or $x 1}}{{end}}`,
		`{{define "e"}}{{.Node}}{{end}}` + each + `{{template "e" .}}{{end}}`,
		`{{$all := registrations "" "" "" ""}}{{index $all 1}}{{slice $all 1}}`,
	} {
		f.Add(src, "edge\n}\nserver {")
		f.Add(src, "\x1b[31m")
	}
	f.Add(each+`{{.Annotations.team}}{{end}}`, "tab\tc1\u0085del\x7f")
	f.Fuzz(func(t *testing.T, src, value string) {
		if len(src) > 2000 || costly.MatchString(src) {
			t.Skip()
		}
		tm, err := Parse("fuzz.tmpl", []byte(src))
		if err != nil {
			return
		}
		value = strings.ToValidUTF8(value, "?") + "\n" + rand.Text()
		out, _, err := tm.Render(hostileSample(value))
		if err != nil || strings.Contains(src, "raw") {
			return
		}
		if strings.Contains(string(out), value) {
			t.Fatalf("template %q printed the refused value %q:\n%s", src, value, out)
		}
	})
}

// hostileSample is a clean endpoint, one whose annotation "team" holds value, and one
// whose node does.
func hostileSample(value string) []endpoint.Endpoint {
	clean := ep("prod", "web", "http", "10.0.0.1", 80)
	clean.Node, clean.Annotations = "n1", map[string]string{"team": "web"}
	ann := ep("prod", "web", "http", "10.0.0.2", 80)
	ann.Node, ann.Annotations = "n2", map[string]string{"team": value}
	node := ep("prod", "web", "grpc", "10.0.0.3", 80)
	node.Node, node.Annotations = value, map[string]string{"team": "api"}
	eps := []endpoint.Endpoint{clean, ann, node}
	endpoint.Sort(eps)
	return eps
}
