package render

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

func ep(cluster, service, protocol, addr string, port int) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: cluster, Service: service, Protocol: protocol, Address: addr, Port: port, Priority: 1}
}

func sample() []endpoint.Endpoint {
	eps := []endpoint.Endpoint{
		ep("prod", "web", "http", "10.0.0.2", 8080),
		ep("prod", "web", "http", "10.0.0.10", 8080),
		ep("prod", "web", "http", "10.0.0.2", 80),
		ep("prod", "web", "grpc", "10.0.0.3", 9090),
		ep("dev", "web", "http", "10.0.0.4", 8080),
		ep("prod", "db", "tcp", "2001:db8::1", 5432),
	}
	endpoint.Sort(eps)
	return eps
}

func render(t *testing.T, src string, eps []endpoint.Endpoint) (string, error) {
	t.Helper()
	tm, err := Parse("t.tmpl", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	var b bytes.Buffer
	err = tm.Execute(&b, eps)
	return b.String(), err
}

func TestRegistrations(t *testing.T) {
	const row = `{{range .}}{{hostport .Address .Port}} {{end}}`
	tests := []struct {
		call, want string
	}{
		{`registrations "prod" "http" "web" ""`, "10.0.0.2:80 10.0.0.2:8080 10.0.0.10:8080 "},
		{`registrations "*" "http" "web" "*"`, "10.0.0.2:80 10.0.0.2:8080 10.0.0.4:8080 10.0.0.10:8080 "},
		{`registrations "" "" "" ""`, "10.0.0.2:80 10.0.0.2:8080 10.0.0.3:9090 10.0.0.4:8080 10.0.0.10:8080 [2001:db8::1]:5432 "},
		{`registrations "prod" "" "web" "10.0.0.2"`, "10.0.0.2:80 10.0.0.2:8080 "},
		{`registrations "" "" "" "2001:DB8:0::1"`, "[2001:db8::1]:5432 "},
		{`registrations "" "" "cache" ""`, ""},
	}
	for _, tc := range tests {
		got, err := render(t, `{{with `+tc.call+`}}`+row+`{{end}}`, sample())
		if err != nil || got != tc.want {
			t.Errorf("%s = %q, %v; want %q", tc.call, got, err, tc.want)
		}
	}
}

func TestTemplateFields(t *testing.T) {
	e := ep("prod", "web", "http", "10.0.0.2", 8080)
	e.Annotations = map[string]string{"team": "edge"}
	e.Priority = 5
	got, err := render(t, `{{range registrations "" "" "web" ""}}{{.Cluster}}/{{.Service}}/{{.Protocol}} {{.Address}}:{{.Port}} p{{.Priority}} {{.Annotations.team}} {{index .Annotations "none"}}|{{.InstanceID}}{{end}}`, []endpoint.Endpoint{e})
	want := "prod/web/http 10.0.0.2:8080 p5 edge |" + e.InstanceID()
	if err != nil || got != want {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}
}

func TestTemplateErrorsNameFileAndLine(t *testing.T) {
	_, err := Parse("/etc/lb/upstream.tmpl", []byte("ok\n{{range registrations}}\n{{ nosuchfunc }}\n"))
	if err == nil || !strings.Contains(err.Error(), "/etc/lb/upstream.tmpl:3") {
		t.Fatalf("parse error = %v; want file and line 3", err)
	}
	for src, want := range map[string]string{
		"a\nb\n{{registrations \"prod\" \"http\" \"web\" \"not-an-ip\"}}":           `t.tmpl:3:2: executing "t.tmpl" at <registrations "prod" "http" "web" "not-an-ip">: error calling registrations: registrations: invalid endpoint: address "not-an-ip"`,
		"\n{{registrations \"bad name!\" \"\" \"\" \"\"}}":                          `t.tmpl:2:`,
		"{{range registrations \"\" \"\" \"\" \"\"}}\n{{.Annotations.team}}{{end}}": `t.tmpl:2:14`,
	} {
		out, err := render(t, src, sample())
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Execute(%q) = %v; want an error containing %q", src, err, want)
		}
		if out != "" {
			t.Errorf("failed Execute wrote %q", out)
		}
	}
}

func TestParseSpec(t *testing.T) {
	for in, want := range map[string]Spec{
		"a.tmpl:a.conf":                                {Template: "a.tmpl", Out: "a.conf"},
		"/t/a.tmpl:/o/a.conf:nginx -s reload":          {Template: "/t/a.tmpl", Out: "/o/a.conf", Command: "nginx -s reload"},
		"a:b:curl -X POST http://127.0.0.1:9/-/reload": {Template: "a", Out: "b", Command: "curl -X POST http://127.0.0.1:9/-/reload"},
	} {
		got, err := ParseSpec(in)
		if err != nil || got != want {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if got.String() != in {
			t.Errorf("String() = %q, want %q", got.String(), in)
		}
	}
	for _, in := range []string{"", "a", "a:", ":b", "a:b:", "a:b:  ", "a:a"} {
		if _, err := ParseSpec(in); err == nil || !strings.Contains(err.Error(), "render") {
			t.Errorf("ParseSpec(%q) = %v; want an error", in, err)
		}
	}
}

type fixture struct {
	dir, tmpl, out, marker string
}

func newFixture(t *testing.T, src string) fixture {
	dir := t.TempDir()
	f := fixture{dir: dir, tmpl: filepath.Join(dir, "t.tmpl"), out: filepath.Join(dir, "out.conf"), marker: filepath.Join(dir, "ran")}
	f.write(t, src)
	return f
}

func (f fixture) write(t *testing.T, src string) {
	t.Helper()
	if err := os.WriteFile(f.tmpl, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (f fixture) content(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(f.out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// runs counts how often the command ran: it appends one line to the marker per run.
func (f fixture) runs(t *testing.T) int {
	b, err := os.ReadFile(f.marker)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

const upstream = "upstream web {\n{{- range registrations \"prod\" \"http\" \"web\" \"\"}}\n  server {{hostport .Address .Port}};\n{{- end}}\n}\n"

func TestOutputWritesOnChangeAndRunsCommand(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, upstream)
	o, err := NewOutput(Spec{Template: f.tmpl, Out: f.out, Command: "echo ran >> " + f.marker})
	if err != nil {
		t.Fatal(err)
	}
	eps := sample()
	if wrote, err := o.Update(ctx, eps); err != nil || !wrote {
		t.Fatalf("first update = %v, %v", wrote, err)
	}
	want := "upstream web {\n  server 10.0.0.2:80;\n  server 10.0.0.2:8080;\n  server 10.0.0.10:8080;\n}\n"
	if got := f.content(t); got != want {
		t.Fatalf("output = %q, want %q", got, want)
	}
	if n := f.runs(t); n != 1 {
		t.Fatalf("command ran %d times after the first write, want 1", n)
	}
	// Same data, and data that changes nothing in this template: no write, no command.
	for _, eps := range [][]endpoint.Endpoint{eps, append(eps[:len(eps):len(eps)], ep("prod", "db", "tcp", "10.9.9.9", 1))} {
		endpoint.Sort(eps)
		if wrote, err := o.Update(ctx, eps); err != nil || wrote {
			t.Fatalf("unchanged update = %v, %v; want no write", wrote, err)
		}
	}
	if n := f.runs(t); n != 1 {
		t.Fatalf("command ran %d times, want still 1", n)
	}
	if wrote, err := o.Update(ctx, eps[:1]); err != nil || !wrote {
		t.Fatalf("changed update = %v, %v", wrote, err)
	}
	if n := f.runs(t); n != 2 {
		t.Fatalf("command ran %d times after the change, want 2", n)
	}
}

func TestOutputKeepsLastGoodOutput(t *testing.T) {
	ctx := context.Background()
	// The second registration is indexed: with fewer than two entries execution fails.
	f := newFixture(t, "first={{(index (registrations \"\" \"\" \"web\" \"\") 0).Address}}\nsecond={{(index (registrations \"\" \"\" \"web\" \"\") 1).Address}}\n")
	o, err := NewOutput(Spec{Template: f.tmpl, Out: f.out, Command: "echo ran >> " + f.marker})
	if err != nil {
		t.Fatal(err)
	}
	eps := sample()
	if _, err := o.Update(ctx, eps); err != nil {
		t.Fatal(err)
	}
	good := f.content(t)

	_, err = o.Update(ctx, eps[:1])
	if err == nil || !strings.Contains(err.Error(), f.tmpl+":2:") {
		t.Fatalf("update over one entry = %v; want an execution error naming %s line 2", err, f.tmpl)
	}
	if got := f.content(t); got != good {
		t.Fatalf("failed execution replaced the output with %q", got)
	}

	f.write(t, "broken {{ range }\n")
	_, err = o.Update(ctx, eps[:2])
	if err == nil || !strings.Contains(err.Error(), f.tmpl+":1:") {
		t.Fatalf("update with a broken template = %v; want a parse error naming %s line 1", err, f.tmpl)
	}
	if got := f.content(t); got != good {
		t.Fatalf("broken template replaced the output with %q", got)
	}
	if n := f.runs(t); n != 1 {
		t.Fatalf("command ran %d times, want only after the one good write", n)
	}

	f.write(t, "fixed {{len (registrations \"\" \"\" \"\" \"\")}}\n")
	if wrote, err := o.Update(ctx, eps); err != nil || !wrote || f.content(t) != "fixed 6\n" {
		t.Fatalf("after the fix = %v, %v, %q", wrote, err, f.content(t))
	}
}

func TestOutputCommandFailure(t *testing.T) {
	f := newFixture(t, "x\n")
	o, err := NewOutput(Spec{Template: f.tmpl, Out: f.out, Command: "echo reload failed >&2; exit 7"})
	if err != nil {
		t.Fatal(err)
	}
	wrote, err := o.Update(context.Background(), nil)
	if !wrote || err == nil || !strings.Contains(err.Error(), "exit status 7: reload failed") {
		t.Fatalf("Update = %v, %v; want written and the command's failure", wrote, err)
	}
}

func TestNewOutputBadTemplate(t *testing.T) {
	f := newFixture(t, "\n\n{{ end }}")
	if _, err := NewOutput(Spec{Template: f.tmpl, Out: f.out}); err == nil || !strings.Contains(err.Error(), f.tmpl+":3") {
		t.Fatalf("NewOutput = %v; want the file and line", err)
	}
	if _, err := NewOutput(Spec{Template: filepath.Join(f.dir, "missing"), Out: f.out}); err == nil {
		t.Fatal("NewOutput of a missing template succeeded")
	}
}
