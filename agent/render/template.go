package render

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"text/template"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// Template is a parsed template file.
type Template struct {
	path string
	src  []byte
	t    *template.Template
}

// Load reads and parses a template file.
func Load(path string) (*Template, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	return Parse(path, src)
}

// Parse parses template source; path names the template in errors, which text/template
// reports as "template: PATH:LINE: …".
func Parse(path string, src []byte) (*Template, error) {
	// The functions are bound per Execute; parsing only needs their names.
	t, err := template.New(path).Option("missingkey=error").Funcs(funcs(nil)).Parse(string(src))
	if err != nil {
		return nil, err
	}
	return &Template{path: path, src: bytes.Clone(src), t: t}, nil
}

// Path is the template's file name.
func (t *Template) Path() string { return t.path }

// Execute renders the template over eps, which must be sorted as endpoint.Sort does.
// Nothing is written to w when execution fails part way.
func (t *Template) Execute(w io.Writer, eps []endpoint.Endpoint) error {
	var buf bytes.Buffer
	if err := t.execute(&buf, eps); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

func (t *Template) execute(buf *bytes.Buffer, eps []endpoint.Endpoint) error {
	// Clone so that concurrent renders of one template each bind their own data.
	c, err := t.t.Clone()
	if err != nil {
		return err
	}
	return c.Funcs(funcs(eps)).Execute(buf, nil)
}

// funcs returns the template functions over one snapshot of endpoints.
func funcs(eps []endpoint.Endpoint) template.FuncMap {
	return template.FuncMap{
		"registrations": func(cluster, protocol, service, ip string) ([]endpoint.Endpoint, error) {
			return Lookup(eps, endpoint.Filter{Cluster: cluster, Protocol: protocol, Service: service, Address: ip})
		},
		"hostport": func(address string, port int) string { return endpoint.HostPort(address, port) },
	}
}

// Lookup returns the endpoints of eps that match f, in eps's order (address, then
// port, for sorted input). An empty or "*" field matches anything; a field that could
// never match (a malformed address, say) is an error rather than an empty result.
func Lookup(eps []endpoint.Endpoint, f endpoint.Filter) ([]endpoint.Endpoint, error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("registrations: %w", err)
	}
	f = f.Normalize()
	out := make([]endpoint.Endpoint, 0)
	for _, e := range eps {
		if f.Match(e) {
			out = append(out, e)
		}
	}
	return out, nil
}
