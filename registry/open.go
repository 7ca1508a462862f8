package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// OpenFunc opens a backend's driver from its parameters; Open puts it behind a Front.
type OpenFunc func(ctx context.Context, cfg Config) (Driver, error)

// Param declares one backend parameter. Commands turn every declared parameter into a
// flag of the same name, so `--nats-url` reaches the jetstream backend as "nats-url".
type Param struct {
	Name    string
	Default string
	Usage   string
}

// Backend is what a backend package registers.
type Backend struct {
	Name        string
	Description string
	Params      []Param
	Open        OpenFunc
	// Init prepares the backend's storage (a stream, a table, a namespace) for
	// `switchboard registry init`; nil when there is nothing to prepare.
	Init func(ctx context.Context, cfg Config) error
	// Plan lists, one line each, what Init would change, and changes nothing
	// (`registry init --dry-run`); nil when the backend cannot say beforehand.
	Plan func(ctx context.Context, cfg Config) ([]string, error)
}

// Config is what Open hands a backend: its parameters, and the logger to use.
type Config struct {
	Params map[string]string
	Logger *slog.Logger
}

var (
	mu       sync.RWMutex
	backends = map[string]Backend{}
)

// RegisterBackend makes a backend available to Open. It panics if the name is taken or
// the backend is incomplete, like sql.Register: both are programming errors.
func RegisterBackend(b Backend) {
	mu.Lock()
	defer mu.Unlock()
	if b.Name == "" || b.Open == nil {
		panic("registry: RegisterBackend needs a name and an Open func")
	}
	if _, dup := backends[b.Name]; dup {
		panic("registry: RegisterBackend called twice for " + b.Name)
	}
	backends[b.Name] = b
}

// Backends lists the registered backends sorted by name.
func Backends() []Backend {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]Backend, 0, len(backends))
	for _, b := range backends {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Open opens the backend called name, behind a Front. Parameters the backend does not
// declare are rejected, so a misspelt option is reported instead of ignored;
// undeclared-but-empty values are tolerated because commands pass every backend's
// flags.
func Open(ctx context.Context, name string, params map[string]string, logger *slog.Logger) (*Front, error) {
	b, cfg, err := lookup(name, params, logger)
	if err != nil {
		return nil, err
	}
	d, err := b.Open(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open %s registry: %w", name, err)
	}
	return NewFront(name, d), nil
}

// Init prepares the storage of the backend called name (see Backend.Init).
func Init(ctx context.Context, name string, params map[string]string, logger *slog.Logger) error {
	b, cfg, err := lookup(name, params, logger)
	if err != nil {
		return err
	}
	if b.Init == nil {
		return fmt.Errorf("registry backend %q has no storage to initialise", name)
	}
	if err := b.Init(ctx, cfg); err != nil {
		return fmt.Errorf("init %s registry: %w", name, err)
	}
	return nil
}

// Plan lists what Init would change on backend name's storage, changing nothing.
func Plan(ctx context.Context, name string, params map[string]string, logger *slog.Logger) ([]string, error) {
	b, cfg, err := lookup(name, params, logger)
	if err != nil {
		return nil, err
	}
	if b.Plan == nil {
		return nil, fmt.Errorf("%w: registry backend %q cannot list what init would change", ErrNoPlan, name)
	}
	changes, err := b.Plan(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("plan %s registry init: %w", name, err)
	}
	return changes, nil
}

// ErrNoPlan: the backend cannot say beforehand what its Init would change.
var ErrNoPlan = errors.New("no dry run")

// Lookup returns the backend called name.
func Lookup(name string) (Backend, error) {
	mu.RLock()
	b, ok := backends[name]
	mu.RUnlock()
	if !ok {
		names := make([]string, 0)
		for _, b := range Backends() {
			names = append(names, b.Name)
		}
		return Backend{}, fmt.Errorf("%w %q (known: %s)", ErrUnknownBackend, name, strings.Join(names, ", "))
	}
	return b, nil
}

func lookup(name string, params map[string]string, logger *slog.Logger) (Backend, Config, error) {
	b, err := Lookup(name)
	if err != nil {
		return Backend{}, Config{}, err
	}
	cfg := Config{Params: map[string]string{}, Logger: logger}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	for _, p := range b.Params {
		cfg.Params[p.Name] = p.Default
	}
	for k, v := range params {
		declared := slices.ContainsFunc(b.Params, func(p Param) bool { return p.Name == k })
		if !declared {
			if v != "" {
				return Backend{}, Config{}, fmt.Errorf("%w: registry backend %q has no parameter %q", ErrBadParam, name, k)
			}
			continue
		}
		cfg.Params[k] = v
	}
	return b, cfg, nil
}

// String returns a parameter's value.
func (c Config) String(name string) string { return c.Params[name] }

// Strings returns a comma-separated parameter as a list, without empty items.
func (c Config) Strings(name string) []string {
	var out []string
	for _, s := range strings.Split(c.Params[name], ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Int parses an integer parameter; the error names the parameter.
func (c Config) Int(name string) (int, error) {
	v := c.Params[name]
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %q is not an integer", ErrBadParam, name, v)
	}
	return n, nil
}

// Duration parses a duration parameter; the error names the parameter.
func (c Config) Duration(name string) (time.Duration, error) {
	v := c.Params[name]
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %q is not a duration such as 5s", ErrBadParam, name, v)
	}
	return d, nil
}

// Bool parses a boolean parameter; the error names the parameter.
func (c Config) Bool(name string) (bool, error) {
	v := c.Params[name]
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%w: %s %q is not true or false", ErrBadParam, name, v)
	}
	return b, nil
}
