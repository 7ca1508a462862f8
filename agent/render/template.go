package render

import (
	"bytes"
	"fmt"
	"io"
	"maps"
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
	// The functions are bound per execution; parsing only needs their names.
	t, err := template.New(path).Option("missingkey=error").Funcs(newPass(nil, nil, false).funcs()).Parse(string(src))
	if err != nil {
		return nil, err
	}
	return &Template{path: path, src: bytes.Clone(src), t: t}, nil
}

// Path is the template's file name.
func (t *Template) Path() string { return t.path }

// Execute renders the template over eps (see Render) and writes the result to w.
// Nothing is written to w when execution fails part way.
func (t *Template) Execute(w io.Writer, eps []endpoint.Endpoint) error {
	out, _, err := t.Render(eps)
	if err != nil {
		return err
	}
	_, err = w.Write(out)
	return err
}

// Render renders the template over eps, which must be sorted as endpoint.Sort does. It
// leaves out every endpoint with a value that holds control characters and that the
// template would print (see the package documentation), and says which and why.
func (t *Template) Render(eps []endpoint.Endpoint) ([]byte, []Refusal, error) {
	leaveOut := map[endpoint.Key]Refusal{}
	for n := 1; ; n++ {
		p := newPass(eps, leaveOut, n > maxGuidedPasses)
		out, err := t.run(p)
		if !p.widen(err) {
			return out, sortedRefusals(leaveOut), err
		}
	}
}

// run executes the template once; its output is nil when it failed.
func (t *Template) run(p *pass) ([]byte, error) {
	// Clone so that concurrent renders of one template each bind their own data.
	c, err := t.t.Clone()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := c.Funcs(p.funcs()).Execute(&buf, nil); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// funcs returns the template functions over the pass's snapshot of endpoints.
func (p *pass) funcs() template.FuncMap {
	fm := maps.Clone(helpers)
	fm["registrations"] = p.registrations
	fm["index"] = index
	fm["hostport"] = func(address string, port int) string { return endpoint.HostPort(address, port) }
	return fm
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
