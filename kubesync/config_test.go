package kubesync

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/switchboard-mesh/switchboard/registry/memory"
)

func TestNewRefusesBadConfig(t *testing.T) {
	r := memory.New()
	defer r.Close()
	c := fake.NewClientset()
	base := func() Config {
		return Config{Client: c, Registry: r, Cluster: self, Export: &ExportConfig{Namespace: ns}, Import: &ImportConfig{Namespace: ns}}
	}
	cases := []struct {
		name   string
		change func(*Config)
		msg    string
	}{
		{"no client", func(c *Config) { c.Client = nil }, "Client"},
		{"no registry", func(c *Config) { c.Registry = nil }, "Registry"},
		{"no direction", func(c *Config) { c.Export, c.Import = nil, nil }, "nothing to do"},
		{"no cluster", func(c *Config) { c.Cluster = "" }, "cluster"},
		{"bad cluster", func(c *Config) { c.Cluster = "9west" }, "cluster"},
		{"bad export namespace", func(c *Config) { c.Export.Namespace = "Mesh" }, "namespace"},
		{"no import namespace", func(c *Config) { c.Import.Namespace = "" }, "namespace"},
		{"bad pattern", func(c *Config) { c.Export.Services = []string{"web["} }, "pattern"},
		{"empty pattern", func(c *Config) { c.Export.Services = []string{""} }, "pattern"},
		{"short TTL", func(c *Config) { c.Import.TTL = 500 * time.Millisecond }, "TTL"},
		{"fractional TTL", func(c *Config) { c.Import.TTL = 1500 * time.Millisecond }, "TTL"},
		{"negative resync", func(c *Config) { c.Resync = -time.Second }, "Resync"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base()
			tc.change(&cfg)
			_, err := New(cfg)
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("New = %v, want ErrConfig naming %q", err, tc.msg)
			}
		})
	}
	if _, err := New(base()); err != nil {
		t.Fatalf("New(valid) = %v", err)
	}
}

func TestMetricsRegisterAndLint(t *testing.T) {
	r := memory.New()
	defer r.Close()
	reg := prometheus.NewPedanticRegistry()
	s, err := New(Config{Client: fake.NewClientset(), Registry: r, Cluster: self, Import: &ImportConfig{Namespace: ns}, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) != 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
	if n, err := testutil.GatherAndCount(reg, "switchboard_kubesync_conflicts_total", "switchboard_kubesync_skipped_total"); err != nil || n != 9 {
		t.Fatalf("%d series (%v), want every label value there from the start: 2 conflict kinds, 7 skip reasons", n, err)
	}
	// Every component's series carry the switchboard_ prefix.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "switchboard_kubesync_") {
			t.Errorf("series %s: want the switchboard_kubesync_ prefix", mf.GetName())
		}
	}
	if ok, why := s.Ready(); ok || why == "" {
		t.Errorf("Ready before Run = %v %q, want false with a reason", ok, why)
	}
}
