package kubesync

import (
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Defaults for the zero values of Config.
const (
	DefaultResync       = 5 * time.Minute
	DefaultTTL          = 60 * time.Second
	DefaultPollInterval = 10 * time.Second
)

// ErrConfig is matched by every error New returns for a Config it cannot run.
var ErrConfig = errors.New("kubesync: invalid config")

// Config is what Run needs. At least one of Export and Import must be set.
type Config struct {
	Client   kubernetes.Interface
	Registry registry.Registry
	// Cluster is this Kubernetes cluster's name in the registry: imported entries
	// carry it, and export tells its own cluster's entries apart by it.
	Cluster string
	Export  *ExportConfig
	Import  *ImportConfig
	// Resync is how often every service is synced again without a change, to repair
	// what a missed event or another writer left behind. Zero means DefaultResync.
	Resync time.Duration
	Logger *slog.Logger
	// Metrics, if set, gets the syncer's series registered on it.
	Metrics prometheus.Registerer
}

// ExportConfig selects the registry services export writes as Services.
type ExportConfig struct {
	// Namespace receives the Services and EndpointSlices.
	Namespace string
	// Services are glob patterns (path.Match) of registry service names; empty
	// means every service.
	Services []string
	// OnlyOtherClusters leaves out this cluster's own entries: its pods reach
	// those through their own Services already.
	OnlyOtherClusters bool
	// PollInterval is how often the registry is listed when its backend has no
	// change feed. Zero means DefaultPollInterval.
	PollInterval time.Duration
}

// ImportConfig selects the EndpointSlices import registers.
type ImportConfig struct {
	// Namespace whose EndpointSlices are registered.
	Namespace string
	// TTL of each entry, refreshed every TTL/3 while the endpoint is present.
	// Whole seconds, at least one; zero means DefaultTTL.
	TTL time.Duration
}

// withDefaults returns a copy of c with the zero values filled in, checked.
func (c Config) withDefaults() (Config, error) {
	if c.Resync == 0 {
		c.Resync = DefaultResync
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Export != nil {
		e := *c.Export
		if e.PollInterval == 0 {
			e.PollInterval = DefaultPollInterval
		}
		if len(e.Services) == 0 {
			e.Services = []string{"*"}
		}
		c.Export = &e
	}
	if c.Import != nil {
		i := *c.Import
		if i.TTL == 0 {
			i.TTL = DefaultTTL
		}
		c.Import = &i
	}
	if err := c.validate(); err != nil {
		return c, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return c, nil
}

func (c Config) validate() error {
	switch {
	case c.Client == nil:
		return errors.New("Client is required")
	case c.Registry == nil:
		return errors.New("Registry is required")
	case c.Export == nil && c.Import == nil:
		return errors.New("nothing to do: set Export, Import or both")
	case c.Resync < 0:
		return fmt.Errorf("Resync %s: must be positive", c.Resync)
	}
	if err := endpoint.ValidateName("cluster", c.Cluster); err != nil {
		return err
	}
	if c.Export != nil {
		if err := c.Export.validate(); err != nil {
			return fmt.Errorf("export: %w", err)
		}
	}
	if c.Import != nil {
		if err := c.Import.validate(); err != nil {
			return fmt.Errorf("import: %w", err)
		}
	}
	return nil
}

func (e ExportConfig) validate() error {
	if err := validNamespace(e.Namespace); err != nil {
		return err
	}
	if e.PollInterval < 0 {
		return fmt.Errorf("PollInterval %s: must be positive", e.PollInterval)
	}
	for _, p := range e.Services {
		if err := ValidatePattern(p); err != nil {
			return err
		}
	}
	return nil
}

func (i ImportConfig) validate() error {
	if err := validNamespace(i.Namespace); err != nil {
		return err
	}
	return ValidateTTL(i.TTL)
}

// ValidateTTL checks an import TTL: whole seconds, at least one, as every
// registry backend must honour it.
func ValidateTTL(d time.Duration) error {
	if d < time.Second || d%time.Second != 0 {
		return fmt.Errorf("TTL %s: must be whole seconds, at least 1s", d)
	}
	return nil
}

// ValidatePattern checks a service-name glob (path.Match syntax), so a typo is
// reported at start rather than matching nothing.
func ValidatePattern(p string) error {
	if p == "" {
		return errors.New("service pattern is empty")
	}
	if _, err := path.Match(p, ""); err != nil {
		return fmt.Errorf("service pattern %q: %w", p, err)
	}
	return nil
}

// ValidateNamespace checks a namespace name (a DNS-1123 label).
func ValidateNamespace(ns string) error { return validNamespace(ns) }

func validNamespace(ns string) error {
	if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
		return fmt.Errorf("namespace %q: %s", ns, strings.Join(msgs, "; "))
	}
	return nil
}
