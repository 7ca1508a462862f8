package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

func init() { subcommands = append(subcommands, newRegistryCmd) }

// registryExtras are further `registry` subcommands defined in other files.
var registryExtras []func(*app) *cobra.Command

// defaultCLIBackend is the backend `switchboard dev` serves, so the registry commands
// work right after it starts.
const defaultCLIBackend = "jetstream"

func newRegistryCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "registry",
		Short: "Register, look up and watch endpoints in any registry backend",
		Long: `Drive a registry backend directly. Choose it with --registry-backend; every
backend's connection flags are listed under each command.`,
	}
	cmd.AddCommand(newRegisterCmd(a), newUnregisterCmd(a), newLookupCmd(a), newWatchCmd(a), newInitCmd(a))
	for _, extra := range registryExtras {
		cmd.AddCommand(extra(a))
	}
	return cmd
}

// keyFlags binds the flags that identify an endpoint.
func keyFlags(cmd *cobra.Command, e *endpoint.Endpoint) {
	cmd.Flags().StringVar(&e.Cluster, "cluster", "", "cluster the endpoint belongs to (required)")
	cmd.Flags().StringVar(&e.Service, "service", "", "service name (required)")
	cmd.Flags().StringVar(&e.Protocol, "protocol", "", "protocol, e.g. http, grpc, tcp (required)")
	cmd.Flags().StringVar(&e.Address, "address", "", "IPv4 or IPv6 address (required)")
	cmd.Flags().IntVar(&e.Port, "port", 0, "port, 0..65535 (0: no port)")
	for _, f := range []string{"cluster", "service", "protocol", "address"} {
		_ = cmd.MarkFlagRequired(f)
	}
}

func newRegisterCmd(a *app) *cobra.Command {
	var (
		e           endpoint.Endpoint
		ttl, health string
		annotations []string
	)
	cmd := &cobra.Command{
		Use:   "register",
		Short: "Register (or update) one endpoint",
		Example: `  switchboard registry register --cluster prod --service web --protocol http \
    --address 10.0.0.2 --port 8080 --ttl 30s --annotation team=edge --zone eu-west-1a
  # take it out of rotation by hand: clients send it no new work
  switchboard registry register --cluster prod --service web --protocol http \
    --address 10.0.0.2 --port 8080 --ttl 30s --zone eu-west-1a --health draining`,
		Args: cobra.NoArgs,
	}
	keyFlags(cmd, &e)
	cmd.Flags().StringVar(&e.Node, "node", "", "node that serves the endpoint")
	cmd.Flags().IntVar(&e.Priority, "priority", 1, "priority, 1..255")
	cmd.Flags().IntVar(&e.Weight, "weight", 0, "weight, 0..65535")
	cmd.Flags().StringVar(&ttl, "ttl", "", `how long the entry lives unless refreshed: a duration such as 30s, or "never" (default: the backend's)`)
	cmd.Flags().StringArrayVar(&annotations, "annotation", nil, "annotation key=value (repeatable)")
	cmd.Flags().StringVar(&e.Region, "region", "", "region the endpoint is in (a name; optional)")
	cmd.Flags().StringVar(&e.Zone, "zone", "", "zone the endpoint is in (a name; optional)")
	cmd.Flags().StringVar(&health, "health", "healthy", "healthy, draining (finishes its work, takes no new work) or unhealthy (takes none)")
	completeHealth(cmd)
	bf := addBackendFlags(cmd, defaultCLIBackend)
	bf.oneShotCommand(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		var err error
		if e.TTL, err = endpoint.ParseTTL(ttl); err != nil {
			return usagef("--ttl: %v", err)
		}
		if e.Health, err = endpoint.ParseHealth(health); err != nil {
			return usagef("--health: %v", err)
		}
		if e.Annotations, err = parseAnnotations(annotations); err != nil {
			return err
		}
		e.Normalize()
		if err := e.Validate(); err != nil {
			return err
		}
		if err := bf.refuseOneShotWrite("register"); err != nil {
			return err
		}
		return withOneShotRegistry(cmd.Context(), a, bf, func(ctx context.Context, r registry.Registry) error {
			if err := r.Apply(ctx, []registry.Op{registry.Register(e)}); err != nil {
				return err
			}
			_, err := fmt.Fprintf(a.out, "registered %s (instance %s)\n", e.Key(), e.InstanceID())
			return err
		})
	}
	return cmd
}

func newUnregisterCmd(a *app) *cobra.Command {
	var e endpoint.Endpoint
	cmd := &cobra.Command{
		Use:   "unregister",
		Short: "Remove one endpoint (not an error if it is absent)",
		Args:  cobra.NoArgs,
	}
	keyFlags(cmd, &e)
	bf := addBackendFlags(cmd, defaultCLIBackend)
	bf.oneShotCommand(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		e.Normalize()
		if err := e.Key().Validate(); err != nil {
			return err
		}
		if err := bf.refuseOneShotWrite("unregister"); err != nil {
			return err
		}
		return withOneShotRegistry(cmd.Context(), a, bf, func(ctx context.Context, r registry.Registry) error {
			if err := r.Apply(ctx, []registry.Op{registry.Unregister(e)}); err != nil {
				return err
			}
			_, err := fmt.Fprintf(a.out, "unregistered %s\n", e.Key())
			return err
		})
	}
	return cmd
}

// filterFlags binds the flags that select endpoints; unset or "*" matches any.
func filterFlags(cmd *cobra.Command, f *endpoint.Filter) {
	cmd.Flags().StringVar(&f.Cluster, "cluster", "", "only this cluster (empty or * = any)")
	cmd.Flags().StringVar(&f.Service, "service", "", "only this service (empty or * = any)")
	cmd.Flags().StringVar(&f.Protocol, "protocol", "", "only this protocol (empty or * = any)")
	cmd.Flags().StringVar(&f.Address, "address", "", "only this address (empty or * = any)")
}

func newLookupCmd(a *app) *cobra.Command {
	var (
		f      endpoint.Filter
		lf     localityFilter
		output string
	)
	cmd := &cobra.Command{
		Use:   "lookup",
		Short: "List the endpoints that match a filter, sorted by address then port",
		Example: `  switchboard registry lookup --service web -o json
  switchboard registry lookup --service web --zone eu-west-1a --health healthy
  switchboard registry lookup --service web --region eu-west`,
		Args: cobra.NoArgs,
	}
	filterFlags(cmd, &f)
	lf.register(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
	bf := addBackendFlags(cmd, defaultCLIBackend)
	bf.oneShotCommand(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if output != "table" && output != "json" && output != "yaml" {
			return usagef("--output %q: want table, json or yaml", output)
		}
		if err := f.Validate(); err != nil {
			return err
		}
		if err := lf.parse(); err != nil {
			return err
		}
		return withOneShotRegistry(cmd.Context(), a, bf, func(ctx context.Context, r registry.Registry) error {
			eps, err := r.List(ctx, f)
			if err != nil {
				return err
			}
			eps = lf.apply(eps)
			switch output {
			case "json":
				return writeJSON(a.out, eps)
			case "yaml":
				return writeYAML(a.out, eps)
			}
			return writeTable(a.out, eps)
		})
	}
	return cmd
}

func newWatchCmd(a *app) *cobra.Command {
	var (
		f  endpoint.Filter
		lf localityFilter
	)
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Print the matching endpoints, then every change, as one JSON event per line",
		Long: `Print one JSON object per line: first {"type":"added",...} for every matching
endpoint, then {"type":"synced"}, then each change as it happens. Runs until
interrupted. Backends without a change feed (dynamodb, cloudmap) are refused.

With --region, --zone or --health, an endpoint that stops matching (its health
changes, say) is printed as removed, and one that starts matching as added.`,
		Example: `  switchboard registry watch --service web
  switchboard registry watch --service web --zone eu-west-1a --health healthy`,
		Args: cobra.NoArgs,
	}
	filterFlags(cmd, &f)
	lf.register(cmd)
	bf := addBackendFlags(cmd, defaultCLIBackend)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := f.Validate(); err != nil {
			return err
		}
		if err := lf.parse(); err != nil {
			return err
		}
		// Refused before the backend is opened: opening an AWS backend walks the
		// credential chain, instance metadata service included, for nothing.
		if noChangeFeed[bf.name] {
			return usageError{fmt.Errorf("--registry-backend %s: %w; poll it with 'switchboard registry lookup'", bf.name, registry.ErrNoWatch)}
		}
		return withRegistry(cmd.Context(), a, bf, func(r registry.Registry) error {
			w, ok := r.(registry.Watcher)
			if !ok {
				return usageError{fmt.Errorf("--registry-backend %s: %w; poll it with 'switchboard registry lookup'", bf.name, registry.ErrNoWatch)}
			}
			ch, err := w.Watch(cmd.Context(), f)
			if err != nil {
				return err
			}
			enc := json.NewEncoder(a.out)
			view := lf.watch()
			for ev := range ch {
				ev, ok := view(ev)
				if !ok {
					continue
				}
				if err := enc.Encode(eventJSON(ev)); err != nil {
					return err
				}
			}
			if cmd.Context().Err() == nil {
				return errors.New("watch ended: the backend closed the change feed")
			}
			return nil // interrupted: a normal end
		})
	}
	return cmd
}

func newInitCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create or update the backend's storage (JetStream stream, DynamoDB table, Cloud Map namespace)",
		Example: `  switchboard registry init --replicas 3 --max-age 24h --storage file
  switchboard registry init --registry-backend dynamodb --dynamodb-table endpoints`,
		Args: cobra.NoArgs,
	}
	bf := addBackendFlags(cmd, defaultCLIBackend)
	var dryRun bool
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what init would create or change, one line each, and change nothing (jetstream)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if _, err := registry.Lookup(bf.name); err != nil {
			return usageError{err}
		}
		if dryRun {
			return planInit(cmd.Context(), a, bf)
		}
		if err := registry.Init(cmd.Context(), bf.name, bf.params(), a.logger()); err != nil {
			return err
		}
		_, err := fmt.Fprintf(a.out, "%s registry initialised\n", bf.name)
		return err
	}
	return cmd
}

// planInit prints what init would change: "no changes", or a line each.
func planInit(ctx context.Context, a *app, bf *backendFlags) error {
	changes, err := registry.Plan(ctx, bf.name, bf.params(), a.logger())
	if errors.Is(err, registry.ErrNoPlan) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	if len(changes) == 0 {
		changes = []string{"no changes"}
	}
	for _, c := range changes {
		if _, err := fmt.Fprintln(a.out, c); err != nil {
			return err
		}
	}
	return nil
}

// noChangeFeed are the backends without a change feed, known before opening them
// (a test opens each against its stand-in server and checks this list).
var noChangeFeed = map[string]bool{"dynamodb": true, "cloudmap": true}

// ephemeralBackends keep their data in the process that opened them.
var ephemeralBackends = map[string]bool{"memory": true}

// refuseOneShotWrite refuses a write from a command that exits right after it to a
// backend that forgets everything when the command exits: it would succeed and keep
// nothing.
func (b *backendFlags) refuseOneShotWrite(what string) error {
	if !ephemeralBackends[b.name] {
		return nil
	}
	return usagef("--registry-backend %s: the %s backend lives inside this command and is gone when it exits, so %s would keep nothing; run 'switchboard dev' and use its JetStream (the default backend) or its registrar (--registry-backend registrar)", b.name, b.name, what)
}

// withOneShotRegistry is withRegistry for a command that makes one call and exits:
// its --timeout bounds everything, opening the backend included (0: no bound).
func withOneShotRegistry(ctx context.Context, a *app, bf *backendFlags, fn func(context.Context, registry.Registry) error) error {
	if bf.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, bf.timeout)
		defer cancel()
	}
	return withRegistry(ctx, a, bf, func(r registry.Registry) error { return fn(ctx, r) })
}

func withRegistry(ctx context.Context, a *app, bf *backendFlags, fn func(registry.Registry) error) error {
	r, err := bf.open(ctx, a.logger())
	if err != nil {
		return err
	}
	defer r.Close()
	return fn(r)
}

func parseAnnotations(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("--annotation %q: want key=value", kv)
		}
		out[k] = v
	}
	return out, nil
}

type jsonEvent struct {
	Type     string             `json:"type"`
	Endpoint *endpoint.Endpoint `json:"endpoint,omitempty"`
}

func eventJSON(ev registry.Event) jsonEvent {
	out := jsonEvent{Type: ev.Type.String()}
	if ev.Type != registry.Synced {
		e := ev.Endpoint
		out.Endpoint = &e
	}
	return out
}

// writeYAML writes eps as YAML with the JSON form's field names, as ctl does.
func writeYAML(w io.Writer, eps []endpoint.Endpoint) error {
	var b bytes.Buffer
	if err := writeJSON(&b, eps); err != nil {
		return err
	}
	return jsonToYAML(w, b.Bytes())
}

func writeJSON(w io.Writer, eps []endpoint.Endpoint) error {
	if eps == nil {
		eps = []endpoint.Endpoint{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(eps)
}

func writeTable(w io.Writer, eps []endpoint.Endpoint) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tSERVICE\tPROTOCOL\tADDRESS\tPORT\tPRIORITY\tTTL\tREGION\tZONE\tHEALTH\tNODE")
	for _, e := range eps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", e.Cluster, e.Service, e.Protocol, e.Address, e.Port, e.Priority,
			orDash(e.TTL.String()), orDash(e.Region), orDash(e.Zone), e.Health, e.Node)
	}
	return tw.Flush()
}

// orDash keeps an empty cell visible, so that columns still line up by eye.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// localityFilter selects by region, zone and health, which endpoint.Filter does not
// hold, among what the backend lists: the backends index none of them.
type localityFilter struct {
	region, zone, health string
	h                    endpoint.Health
}

func (lf *localityFilter) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&lf.region, "region", "", "only endpoints in this region, as stored (empty or * = any)")
	cmd.Flags().StringVar(&lf.zone, "zone", "", "only endpoints in this zone, as stored (empty or * = any)")
	cmd.Flags().StringVar(&lf.health, "health", "", "only endpoints in this state: healthy, draining or unhealthy (empty or * = any)")
	completeHealth(cmd)
}

// completeHealth completes --health with the states' names.
func completeHealth(cmd *cobra.Command) {
	_ = cmd.RegisterFlagCompletionFunc("health", cobra.FixedCompletions(healthNames, cobra.ShellCompDirectiveNoFileComp))
}

// healthNames are the states, in the order --help gives them.
var healthNames = []string{endpoint.Healthy.String(), endpoint.Draining.String(), endpoint.Unhealthy.String()}

// parse checks the flags, so that a typo is reported instead of matching nothing.
// The region and zone are held to the read rules, not the name rules: a backend may
// hold a place another writer stored (Azure's zone "1", a region "dc1.eu").
func (lf *localityFilter) parse() error {
	for _, l := range [...]struct{ flag, value string }{{"region", lf.region}, {"zone", lf.zone}} {
		if !endpoint.Any(l.value) && (len(l.value) > 253 || strings.ContainsFunc(l.value, unicode.IsSpace) || endpoint.HasControl(l.value)) {
			return usagef("--%s %q: want at most 253 printable characters without spaces", l.flag, l.value)
		}
	}
	if endpoint.Any(lf.health) {
		return nil
	}
	var err error
	if lf.h, err = endpoint.ParseHealth(lf.health); err != nil {
		return usagef("--health: %v", err)
	}
	return nil
}

// all reports whether lf matches every endpoint.
func (lf localityFilter) all() bool {
	return endpoint.Any(lf.region) && endpoint.Any(lf.zone) && endpoint.Any(lf.health)
}

// match reports whether lf keeps e.
func (lf localityFilter) match(e endpoint.Endpoint) bool {
	return (endpoint.Any(lf.region) || e.Region == lf.region) && (endpoint.Any(lf.zone) || e.Zone == lf.zone) &&
		(endpoint.Any(lf.health) || e.Health == lf.h)
}

// apply keeps the endpoints that match, in their order.
func (lf localityFilter) apply(eps []endpoint.Endpoint) []endpoint.Endpoint {
	if lf.all() {
		return eps
	}
	out := eps[:0]
	for _, e := range eps {
		if lf.match(e) {
			out = append(out, e)
		}
	}
	return out
}

// watch returns the filter of a watch's events, which keeps the printed view what
// lookup would list: an endpoint that starts matching is added, one that stops
// matching (or is removed) while shown is removed, and events of endpoints never
// shown are dropped (ok false). Synced passes.
func (lf localityFilter) watch() func(registry.Event) (ev registry.Event, ok bool) {
	shown := map[endpoint.Key]bool{}
	return func(ev registry.Event) (registry.Event, bool) {
		if lf.all() || ev.Type != registry.Added && ev.Type != registry.Updated && ev.Type != registry.Removed {
			return ev, true
		}
		k := ev.Endpoint.Key()
		was := shown[k]
		if ev.Type == registry.Removed || !lf.match(ev.Endpoint) {
			delete(shown, k)
			ev.Type = registry.Removed
			return ev, was
		}
		shown[k] = true
		if !was {
			ev.Type = registry.Added
		}
		return ev, true
	}
}
