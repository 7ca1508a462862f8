package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// specExample is the spec's Configuration Reference with its commented sections enabled.
const specExample = `
tracing:
  log_level: info  # trace, debug, info, warn, error

northbound:
  endpoint: "0.0.0.0:50051"
  tls:
    insecure: true  # or configure mTLS

southbound:
  endpoint: "0.0.0.0:50052"
  tls:
    insecure: true

database:
  type: sqlite
  path: "/var/lib/slim/cp.db"

topology:
  links:
    - group: cloud
      neighbors: ["*"]  # cloud connects to all groups
  segments:
    - name: segment-$group
      links:
        - group: cloud
          neighbors: [$group]

registration_auth:
  type: shared_secret
  secrets:
    cluster-a: "secret-for-cluster-a-min-32-bytes-long"
    cluster-b: "secret-for-cluster-b-min-32-bytes-long"

reconciler:
  max_requeues: 15
  base_retry_delay: "200ms"
  reconcile_period: "60s"
  enable_orphan_detection: false
  workers: 4
`

func TestSpecExample(t *testing.T) {
	c, err := Parse([]byte(specExample))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Northbound.Endpoint, want.Southbound.Endpoint = "0.0.0.0:50051", "0.0.0.0:50052"
	want.Database = Database{Type: DatabaseSQLite, Path: "/var/lib/slim/cp.db"}
	want.Topology = &Topology{
		Links:    []Link{{Group: "cloud", Neighbors: []string{"*"}}},
		Segments: []Segment{{Name: "segment-$group", Links: []Link{{Group: "cloud", Neighbors: []string{"$group"}}}}},
	}
	want.RegistrationAuth = RegistrationAuth{
		Type: AuthSharedSecret, MaxTokenAge: 5 * time.Minute, Audience: "switchboard-controlplane",
		Secrets: map[string]string{
			"cluster-a": "secret-for-cluster-a-min-32-bytes-long",
			"cluster-b": "secret-for-cluster-b-min-32-bytes-long",
		},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got  %+v\nwant %+v", c, want)
	}
	if c.Mode() != ConfigMode {
		t.Fatal("topology present but not config mode")
	}
}

func TestDefaultsAndModes(t *testing.T) {
	for _, src := range []string{"", "# nothing\n", "topology: {}\n", "topology:\n", "topology: {links: [], segments: []}\n"} {
		c, err := Parse([]byte(src))
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		if c.Mode() != APIMode || c.Topology != nil {
			t.Errorf("%q: mode %s, want api", src, c.Mode())
		}
		if !reflect.DeepEqual(c, Default()) {
			t.Errorf("%q: %+v is not the default", src, c)
		}
	}
	d := Default()
	if d.Reconciler != (Reconciler{MaxRequeues: 15, BaseRetryDelay: 200 * time.Millisecond,
		ReconcilePeriod: time.Minute, Workers: 4}) {
		t.Errorf("reconciler defaults = %+v", d.Reconciler)
	}
	if d.Northbound.Endpoint != "127.0.0.1:50051" || d.Southbound.Endpoint != "127.0.0.1:50052" ||
		d.Database.Type != DatabaseInMemory || d.RegistrationAuth.Type != AuthNoop {
		t.Errorf("defaults = %+v", d)
	}
}

func TestValid(t *testing.T) {
	for _, c := range []struct {
		name, src string
		check     func(*Config) bool
	}{
		{"mtls", "northbound:\n  tls: {cert_file: c.pem, key_file: k.pem, ca_file: ca.pem}\n",
			func(c *Config) bool {
				return c.Northbound.TLS == TLS{CertFile: "c.pem", KeyFile: "k.pem", CAFile: "ca.pem"}
			}},
		{"sweep disabled", "reconciler: {reconcile_period: 0s}\n",
			func(c *Config) bool { return c.Reconciler.ReconcilePeriod == 0 }},
		{"spire", "registration_auth: {type: spire, socket_path: /run/spire.sock}\n",
			func(c *Config) bool {
				return c.RegistrationAuth.SocketPath == "/run/spire.sock" && c.RegistrationAuth.Audience == "switchboard-controlplane"
			}},
		{"named segments", `
topology:
  segments:
    - name: customer-1
      links: [{group: cloud, neighbors: [cluster-a]}]
    - name: customer-2
      links: [{group: cloud, neighbors: [cluster-b, cluster-c]}]
`, func(c *Config) bool {
			return len(c.Topology.Segments) == 2 && c.Topology.Segments[1].Links[0].Neighbors[1] == "cluster-c"
		}},
		{"chain", `
topology:
  links:
    - {group: group-a, neighbors: [group-b]}
    - {group: group-b, neighbors: [group-c]}
`, func(c *Config) bool { return len(c.Topology.Links) == 2 }},
		{"anchors", "reconciler:\n  base_retry_delay: &d \"1s\"\n  reconcile_period: *d\n",
			func(c *Config) bool { return c.Reconciler.ReconcilePeriod == time.Second }},
		{"trace level", "tracing: {log_level: trace}\n", func(c *Config) bool { return c.Tracing.Level() < -4 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse([]byte(c.src))
			if err != nil {
				t.Fatal(err)
			}
			if !c.check(cfg) {
				t.Fatalf("unexpected config %+v", cfg)
			}
		})
	}
}

// TestInvalid: every bad value is reported with the path of its key.
func TestInvalid(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"reconciler:\n  base_retry_delay: \"abc\"\n", `reconciler.base_retry_delay: "abc" is not a duration`},
		{"reconciler:\n  base_retry_delay: 200\n", `reconciler.base_retry_delay: "200" is not a duration`},
		{"reconciler:\n  base_retry_delay: 0s\n", `reconciler.base_retry_delay: "0s" must be greater than zero`},
		{"reconciler:\n  reconcile_period: -1s\n", `reconciler.reconcile_period: "-1s" is negative`},
		{"reconciler:\n  workers: 0\n", `reconciler.workers: 0 is out of range 1..1024`},
		{"reconciler:\n  max_requeues: -1\n", `reconciler.max_requeues: -1 is out of range 0..1000000`},
		{"reconciler:\n  max_requeues: ten\n", `reconciler.max_requeues: must be an integer, not the string "ten"`},
		{"reconciler:\n  enable_orphan_detection: yes please\n", `reconciler.enable_orphan_detection: must be true or false`},
		{"reconciler:\n  retries: 3\n", `reconciler.retries: unknown key (known: base_retry_delay, enable_orphan_detection, max_requeues, reconcile_period, workers)`},
		{"reconciler: 5\n", `reconciler: must be a mapping`},
		{"tracing:\n  log_level: loud\n", `tracing.log_level: "loud" is not one of trace, debug, info, warn, error`},
		{"northbound:\n  endpoint: localhost\n", `northbound.endpoint: "localhost" is not host:port`},
		{"southbound:\n  endpoint: \"h:99999\"\n", `southbound.endpoint: "h:99999" has no valid port`},
		{"northbound:\n  tls: {insecure: false}\n", `northbound.tls: cert_file and key_file are required`},
		{"northbound:\n  tls: {insecure: true, cert_file: c}\n", `northbound.tls.insecure: true contradicts`},
		{"database:\n  type: postgres\n", `database.type: "postgres" is not one of in_memory, sqlite`},
		{"database:\n  type: sqlite\n", `database.path: is required when type is sqlite`},
		{"database:\n  path: /x.db\n", `database.path: is only used when type is sqlite`},
		{"registration_auth:\n  type: shared_secret\n", `registration_auth.secrets: is required`},
		{"registration_auth:\n  type: shared_secret\n  secrets: {a: short}\n", `registration_auth.secrets.a: secret is 5 bytes, must be at least 32`},
		{"registration_auth:\n  type: spire\n", `registration_auth.socket_path: is required`},
		{"registration_auth:\n  socket_path: /s\n", `registration_auth.socket_path: is only used when type is spire`},
		{"registration_auth:\n  type: ldap\n", `registration_auth.type: "ldap" is not one of noop, shared_secret, spire`},
		{"topology:\n  links:\n    - group: cloud\n      neighbors: [a, \"b c\"]\n", `topology.links[0].neighbors[1]: "b c" is not a valid group name`},
		{"topology:\n  links:\n    - group: cloud\n", `topology.links[0].neighbors: must list at least one group`},
		{"topology:\n  links:\n    - neighbors: [a]\n", `topology.links[0].group: is required`},
		{"topology:\n  links:\n    - {group: a, neighbors: [a]}\n", `topology.links[0].neighbors: "a" cannot be its own neighbor`},
		{"topology:\n  links:\n    - {group: a, neighbors: [b, b]}\n", `topology.links[0].neighbors[1]: "b" is listed twice`},
		{"topology:\n  links:\n    - {group: cloud, neighbors: [$group]}\n", `topology.links[0].neighbors[0]: $group is only allowed inside segments`},
		{"topology:\n  links:\n    - {group: cloud, neighbors: [a], weight: 3}\n", `topology.links[0].weight: unknown key`},
		{"topology:\n  links: {group: a}\n", `topology.links: must be a list`},
		{"topology:\n  segments:\n    - links: [{group: a, neighbors: [b]}]\n", `topology.segments[0].name: is required`},
		{"topology:\n  segments:\n    - name: s\n", `topology.segments[0].links: must list at least one link`},
		{"topology:\n  segments:\n    - {name: s, links: [{group: a, neighbors: [$group]}]}\n", `topology.segments[0].name: "s" must contain $group`},
		{"topology:\n  segments:\n    - {name: \"s/1\", links: [{group: a, neighbors: [b]}]}\n", `topology.segments[0].name: "s/1" is not a valid segment name`},
		{"topology:\n  segments:\n    - {name: s, links: [{group: a, neighbors: [b]}]}\n    - {name: s, links: [{group: a, neighbors: [c]}]}\n", `topology.segments[1].name: duplicate segment name "s"`},
		{"tracing: {log_level: info}\ntracing: {log_level: debug}\n", `tracing: duplicate key`},
		{"a: 1\n---\nb: 2\n", `exactly one YAML document`},
		{"tracing: [\n", `invalid control plane config: YAML: line 1, column 10:`},
	} {
		_, err := Parse([]byte(c.src))
		if err == nil {
			t.Errorf("%q: accepted, want %s", c.src, c.want)
			continue
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v does not match ErrInvalid", c.src, err)
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got  %v\n want %s", c.src, err, c.want)
		}
	}
}

// TestAllErrorsReported: one parse names every broken key, with its line.
func TestAllErrorsReported(t *testing.T) {
	_, err := Parse([]byte("reconciler:\n  workers: 0\n  base_retry_delay: abc\nbogus: 1\n"))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Path != "reconciler.workers" || fe.Line != 2 {
		t.Fatalf("first error = %#v", fe)
	}
	for _, want := range []string{"reconciler.workers:", "reconciler.base_retry_delay:", "bogus: unknown key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v does not mention %s", err, want)
		}
	}
}

func TestSecretNotEchoed(t *testing.T) {
	_, err := Parse([]byte("registration_auth:\n  type: shared_secret\n  secrets: {a: hunter2}\n"))
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error %v leaks the secret", err)
	}
}

func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 12; i++ {
		b.WriteString("a" + strconv.Itoa(i) + ": &a" + strconv.Itoa(i) + " [")
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + strconv.Itoa(i-1))
		}
		b.WriteString("]\n")
	}
	b.WriteString("topology:\n  links:\n    - group: a\n      neighbors: *a11\n")
	if _, err := Parse([]byte(b.String())); err == nil {
		t.Fatal("alias bomb accepted")
	}
}

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.yaml")
	if err := os.WriteFile(path, []byte("topology: {}\nreconciler: {workers: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil || c.Reconciler.Workers != 2 || c.Mode() != APIMode {
		t.Fatalf("Load = %+v, %v", c, err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Fatal("missing file accepted")
	}
}

func TestSouthboundSendTimeout(t *testing.T) {
	c, err := Parse([]byte("southbound:\n  endpoint: \"127.0.0.1:50052\"\n  send_timeout: 3s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.SendTimeout != 3*time.Second {
		t.Fatalf("SendTimeout = %s, want 3s", c.SendTimeout)
	}
	if _, err := Parse([]byte("southbound:\n  send_timeout: soon\n")); err == nil || !strings.Contains(err.Error(), "southbound.send_timeout") {
		t.Fatalf("a bad send_timeout: %v, want an error naming southbound.send_timeout", err)
	}
	if c, err := Parse(nil); err != nil || c.SendTimeout != 0 {
		t.Fatalf("default SendTimeout = %v, %v; want 0 (the handler's default)", c.SendTimeout, err)
	}
}
