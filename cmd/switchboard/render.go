package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/switchboard-mesh/switchboard/agent/filesd"
	"github.com/switchboard-mesh/switchboard/agent/render"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

func init() { registryExtras = append(registryExtras, newSDCmd, newRenderCmd) }

func newSDCmd(a *app) *cobra.Command {
	var (
		f   endpoint.Filter
		out string
	)
	cmd := &cobra.Command{
		Use:   "sd",
		Short: "Print Prometheus file_sd JSON for the endpoints Prometheus should scrape",
		Long: `Print (or, with --out, write atomically) a Prometheus file_sd document: every
endpoint whose service or protocol is "prometheus" or that is annotated
prometheus.io/scrape: "true" (any other value excludes it), grouped by cluster, service
and protocol. Endpoints without a port are skipped. 'switchboard agent
--prometheus-sd' keeps such a file current.`,
		Example: "  switchboard registry sd --cluster prod --out /etc/prometheus/targets/switchboard.json",
		Args:    cobra.NoArgs,
	}
	filterFlags(cmd, &f)
	cmd.Flags().StringVar(&out, "out", "", "write to this file (atomically, only when changed) instead of stdout")
	// -o is the output format in every command; file_sd has one, JSON.
	format := cmd.Flags().StringP("output", "o", "json", "output format: json (Prometheus file_sd)")
	bf := addBackendFlags(cmd, defaultCLIBackend)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *format != "json" {
			return usagef("--output %q: want json (to write a file, use --out FILE)", *format)
		}
		if err := f.Validate(); err != nil {
			return err
		}
		return withRegistry(cmd.Context(), a, bf, func(r registry.Registry) error {
			eps, err := r.List(cmd.Context(), f)
			if err != nil {
				return err
			}
			if out != "" {
				_, err := (&filesd.Output{Path: out}).Update(cmd.Context(), eps)
				return err
			}
			data, err := filesd.Build(eps)
			if err != nil {
				return err
			}
			_, err = a.out.Write(data)
			return err
		})
	}
	return cmd
}

func newRenderCmd(a *app) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "render TEMPLATE",
		Short: "Render a Go text/template over the registry's endpoints once",
		Long: `Render TEMPLATE once and print it (or, with --out, write it atomically, only
when changed). In the template, registrations CLUSTER PROTOCOL SERVICE IP returns the
matching endpoints sorted by address then port (empty or "*" matches any); each has
.Cluster .Service .Protocol .Address .Port .Node .Priority .Weight .Annotations .TTL
and .InstanceID, and hostport ADDRESS PORT joins an address and port (IPv6 in
brackets). quote, json, shellquote, nginx and haproxy write a value escaped for
those languages. An endpoint whose node or annotation value holds control
characters is left out where the template would print that value (raw VALUE
prints it as stored). 'switchboard agent --render' keeps a file current.`,
		Example: `  switchboard registry render upstream.tmpl --out /etc/nginx/conf.d/upstream.conf

  # upstream.tmpl
  upstream web {
  {{- range registrations "prod" "http" "web" ""}}
    server {{hostport .Address .Port}};
  {{- end}}
  }`,
		Args: cobra.ExactArgs(1),
	}
	cmd.Flags().StringVar(&out, "out", "", "write to this file (atomically, only when changed) instead of stdout")
	bf := addBackendFlags(cmd, defaultCLIBackend)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		// Parse first: a broken template is bad input, reported with its file and line.
		write, err := renderTarget(a, args[0], out)
		if err != nil {
			return usageError{err}
		}
		return withRegistry(cmd.Context(), a, bf, func(r registry.Registry) error {
			eps, err := r.List(cmd.Context(), endpoint.Filter{})
			if err != nil {
				return err
			}
			return write(cmd.Context(), eps)
		})
	}
	return cmd
}

// renderTarget parses the template and returns what renders it: to stdout, or to out
// through render.Output (atomic, only when changed). Endpoints left out for a value
// the template would print with control characters are logged.
func renderTarget(a *app, tmpl, out string) (func(context.Context, []endpoint.Endpoint) error, error) {
	if out == "" {
		t, err := render.Load(tmpl)
		if err != nil {
			return nil, err
		}
		return func(_ context.Context, eps []endpoint.Endpoint) error {
			data, refused, err := t.Render(eps)
			warnRefused(a, refused)
			if err != nil {
				return err
			}
			_, err = a.out.Write(data)
			return err
		}, nil
	}
	if tmpl == out {
		return nil, fmt.Errorf("--out %s would overwrite the template", out)
	}
	o, err := render.NewOutput(render.Spec{Template: tmpl, Out: out})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, eps []endpoint.Endpoint) error {
		_, err := o.Update(ctx, eps)
		warnRefused(a, o.Refused())
		return err
	}, nil
}

func warnRefused(a *app, refused []render.Refusal) {
	for _, r := range refused {
		a.logger().Warn("endpoint left out: a value the template would print holds control characters (use raw in the template to write it as stored, or an escaping helper)",
			"endpoint", r.Endpoint.String(), "field", r.Field, "value", r.Value)
	}
}
