package render

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/switchboard-mesh/switchboard/agent/internal/atomicfile"
	"github.com/switchboard-mesh/switchboard/endpoint"
)

// DefaultCommandTimeout bounds the command run after a change.
const DefaultCommandTimeout = 30 * time.Second

// Output keeps one rendered file up to date. Not safe for concurrent use: one loop
// owns it.
type Output struct {
	spec           Spec
	tmpl           *Template
	commandTimeout time.Duration
	refused        []Refusal
}

// NewOutput loads the template; a template that does not parse is an error naming the
// file and line.
func NewOutput(spec Spec) (*Output, error) {
	t, err := Load(spec.Template)
	if err != nil {
		return nil, err
	}
	return &Output{spec: spec, tmpl: t, commandTimeout: DefaultCommandTimeout}, nil
}

// Name identifies the output in logs and metrics.
func (o *Output) Name() string { return "render:" + o.spec.Out }

// Update renders the template over eps and writes the output when it changed, then
// runs the command. The template file is read again first, so an edit is picked up
// on the next update; if the edit does not parse, or the template fails to execute,
// the error is returned and the output file is left as it was. It reports whether the
// file was written.
func (o *Output) Update(ctx context.Context, eps []endpoint.Endpoint) (bool, error) {
	o.refused = nil
	if err := o.reload(); err != nil {
		return false, err
	}
	out, refused, err := o.tmpl.Render(eps)
	o.refused = refused
	if err != nil {
		return false, err
	}
	wrote, err := atomicfile.WriteIfChanged(o.spec.Out, out)
	if err != nil || !wrote {
		return false, err
	}
	if o.spec.Command != "" {
		if err := o.run(ctx); err != nil {
			return true, err
		}
	}
	return true, nil
}

// Refused lists the endpoints the last Update left out of the file, and why (see
// Template.Render).
func (o *Output) Refused() []Refusal { return o.refused }

func (o *Output) reload() error {
	src, err := os.ReadFile(o.spec.Template)
	if err != nil {
		return fmt.Errorf("template: %w", err)
	}
	if bytes.Equal(src, o.tmpl.src) {
		return nil
	}
	t, err := Parse(o.spec.Template, src)
	if err != nil {
		return err
	}
	o.tmpl = t
	return nil
}

func (o *Output) run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, o.commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", o.spec.Command)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if len(msg) > 512 {
			msg = msg[:512] + "…"
		}
		return fmt.Errorf("command %q after rendering %s: %w: %s", o.spec.Command, o.spec.Out, err, msg)
	}
	return nil
}
