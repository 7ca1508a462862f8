package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
)

// backendFlags adds --registry-backend and one flag per declared backend parameter
// (--nats-url, --etcd-endpoints, …) to a command, and opens the chosen backend.
type backendFlags struct {
	name  string
	flags *pflag.FlagSet
	// oneShot: the command makes a call or two and exits, so a registrar client
	// keeps no watch stream and fails at once; timeout bounds the whole command.
	oneShot bool
	timeout time.Duration
}

// oneShotCommand marks cmd as one that makes a call or two and exits, and gives it
// --timeout.
func (b *backendFlags) oneShotCommand(cmd *cobra.Command) {
	b.oneShot = true
	cmd.Flags().DurationVar(&b.timeout, "timeout", 10*time.Second, "give up after this long (0: wait as long as it takes)")
}

func addBackendFlags(cmd *cobra.Command, defaultBackend string) *backendFlags {
	b := &backendFlags{flags: cmd.Flags()}
	var names []string
	for _, be := range registry.Backends() {
		names = append(names, be.Name)
	}
	usage := "registry backend: " + strings.Join(names, ", ")
	if defaultBackend == "" {
		usage += " (empty: none)"
	}
	cmd.Flags().StringVar(&b.name, "registry-backend", defaultBackend, usage)
	markBackendFlag(cmd.Flags().Lookup("registry-backend"))
	cmd.SetUsageTemplate(backendUsageTemplate)
	_ = cmd.RegisterFlagCompletionFunc("registry-backend", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return names, cobra.ShellCompDirectiveNoFileComp
	})
	// Parameters shared by several backends (aws-region) become one flag.
	seen := map[string][]string{}
	params := map[string]registry.Param{}
	for _, be := range registry.Backends() {
		for _, p := range be.Params {
			if _, ok := params[p.Name]; !ok {
				params[p.Name] = p
			}
			seen[p.Name] = append(seen[p.Name], be.Name)
		}
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p := params[k]
		f := cmd.Flags().VarPF(newParamValue(p.Default), p.Name, "", fmt.Sprintf("%s [%s]", p.Usage, strings.Join(seen[k], ", ")))
		if f.Value.Type() == "bool" {
			f.NoOptDefVal = "true" // a bare --flag switches it on
		}
		markBackendFlag(f)
	}
	return b
}

// Backend flags are listed in a section of their own in --help, after the command's
// own flags: there are many, and only the chosen backend's apply.
const backendFlagAnnotation = "switchboard/registry-backend"

func markBackendFlag(f *pflag.Flag) {
	f.Annotations = map[string][]string{backendFlagAnnotation: {"true"}}
}

func init() {
	cobra.AddTemplateFunc("commandFlagUsages", func(c *cobra.Command) string { return flagUsages(c, false) })
	cobra.AddTemplateFunc("backendFlagUsages", func(c *cobra.Command) string { return flagUsages(c, true) })
}

func flagUsages(c *cobra.Command, backend bool) string {
	fs := pflag.NewFlagSet(c.Name(), pflag.ContinueOnError)
	fs.SortFlags = false
	if backend {
		fs.AddFlag(c.LocalFlags().Lookup("registry-backend")) // the choice first, then its options
	}
	c.LocalFlags().VisitAll(func(f *pflag.Flag) {
		if _, ok := f.Annotations[backendFlagAnnotation]; ok == backend && f.Name != "registry-backend" {
			fs.AddFlag(f)
		}
	})
	return fs.FlagUsages()
}

// backendUsageTemplate is cobra's usage template for a leaf command, with the
// backend flags split out.
const backendUsageTemplate = `Usage:
  {{.UseLine}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}

Flags:
{{commandFlagUsages . | trimTrailingWhitespaces}}

Registry backend flags (only those of the chosen --registry-backend apply):
{{backendFlagUsages . | trimTrailingWhitespaces}}{{if .HasAvailableInheritedFlags}}

Global Flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}
`

// params returns the backend parameters the user set explicitly; defaults come from
// the backend itself, and registry.Open reports a flag of another backend set by
// mistake.
func (b *backendFlags) params() map[string]string {
	out := map[string]string{}
	b.flags.Visit(func(f *pflag.Flag) {
		if isBackendParam(f.Name) {
			out[f.Name] = f.Value.String()
		}
	})
	if _, set := out[client.ParamOneShot]; b.oneShot && b.name == "registrar" && !set {
		out[client.ParamOneShot] = "true"
	}
	return out
}

func isBackendParam(name string) bool {
	for _, be := range registry.Backends() {
		for _, p := range be.Params {
			if p.Name == name {
				return true
			}
		}
	}
	return false
}

// open opens the chosen backend. An unknown backend name is a usage error.
func (b *backendFlags) open(ctx context.Context, log *slog.Logger) (registry.Registry, error) {
	if _, err := registry.Lookup(b.name); err != nil {
		return nil, usageError{fmt.Errorf("--registry-backend: %w", err)}
	}
	return registry.Open(ctx, b.name, b.params(), log)
}

// paramValue is a backend parameter's flag. Parameters are declared as text; the
// type --help shows, and the check a value gets as it is parsed, come from the
// declared default: "false" is a bool, "3" an int, "5s" a duration. A parameter
// without a default is a string.
type paramValue struct {
	kind string
	v    string
}

func newParamValue(def string) *paramValue { return &paramValue{kind: paramKind(def), v: def} }

func paramKind(def string) string {
	if def == "true" || def == "false" {
		return "bool"
	}
	if _, err := strconv.Atoi(def); err == nil {
		return "int"
	}
	if _, err := time.ParseDuration(def); err == nil {
		return "duration"
	}
	return "string"
}

func (p *paramValue) String() string { return p.v }
func (p *paramValue) Type() string   { return p.kind }

func (p *paramValue) Set(v string) error {
	var err error
	switch p.kind {
	case "bool":
		var b bool
		if b, err = strconv.ParseBool(v); err == nil {
			v = strconv.FormatBool(b)
		} else {
			err = errors.New("want true or false")
		}
	case "int":
		if _, err = strconv.Atoi(v); err != nil {
			err = errors.New("want a whole number")
		}
	case "duration":
		if _, err = time.ParseDuration(v); err != nil {
			err = errors.New("want a duration such as 30s or 5m")
		}
	}
	if err != nil {
		return err
	}
	p.v = v
	return nil
}
