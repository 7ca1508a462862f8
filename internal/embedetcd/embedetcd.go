package embedetcd

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/switchboard-mesh/switchboard/internal/freeport"
)

// Options configure a cluster. The zero value is one member without TLS.
type Options struct {
	// Members is the cluster size; default 1.
	Members int
	// Dir is where the cluster's data directory is created. Empty means the system
	// temporary directory, and Close removes the data.
	Dir string
	// Fsync turns fsync back on; benchmarks that want realistic write latency set it.
	Fsync bool
	// TLS, when set, serves clients over TLS (https:// endpoints).
	TLS *TLS
	// Configure, when set, adjusts each member's configuration last (for example
	// MaxTxnOps, BcryptCost or auto-compaction).
	Configure func(*embed.Config)
}

// TLS names the PEM files a member serves clients with.
type TLS struct {
	CertFile, KeyFile string
	// CAFile verifies client certificates; with ClientCertAuth they are required.
	CAFile         string
	ClientCertAuth bool
}

// Cluster is a running set of members. Close stops every member.
type Cluster struct {
	members []*Member
	dir     string
	ownDir  bool
}

// Member is one etcd server of a cluster. Stop and Restart are safe for concurrent
// use.
type Member struct {
	name      string
	dir       string
	clientURL url.URL
	peerURL   url.URL
	initial   string // the initial-cluster string shared by every member
	token     string
	opts      Options

	life     sync.Mutex // serializes Stop and Restart
	mu       sync.Mutex // guards etcd
	etcd     *embed.Etcd
	stopping atomic.Bool // silences the member's logs while it shuts down
}

// startAttempts bounds retries when a free port is taken between being found and
// being bound, which another process on the machine can do.
const startAttempts = 3

// Start starts a cluster and waits until every member serves clients, or ctx ends.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Members == 0 {
		opts.Members = 1
	}
	if opts.Members < 0 {
		return nil, fmt.Errorf("embedetcd: Members %d: must be positive", opts.Members)
	}
	var err error
	for range startAttempts {
		var c *Cluster
		c, err = start(ctx, opts)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil || !isAddrInUse(err) {
			break
		}
	}
	return nil, err
}

func start(ctx context.Context, opts Options) (*Cluster, error) {
	// Each attempt gets a fresh directory: a member directory left by a failed
	// attempt would make etcd think the member already belongs to a cluster.
	dir, err := os.MkdirTemp(opts.Dir, "embedetcd-*")
	if err != nil {
		return nil, fmt.Errorf("embedetcd: data dir: %w", err)
	}
	c := &Cluster{dir: dir, ownDir: opts.Dir == ""}
	fail := func(err error) (*Cluster, error) {
		_ = c.Close()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := c.plan(opts); err != nil {
		return fail(err)
	}
	// Every member must be starting before any can become ready: a cluster needs a
	// quorum to elect its first leader.
	for _, m := range c.members {
		if err := m.launch(); err != nil {
			return fail(err)
		}
	}
	for _, m := range c.members {
		if err := m.waitReady(ctx); err != nil {
			return fail(err)
		}
	}
	return c, nil
}

// plan picks ports and names for every member.
func (c *Cluster) plan(opts Options) error {
	// etcd must be told its peer URLs before it starts (every member lists every
	// other), so ":0" cannot be used; Start retries if another process wins the race.
	ports, err := freeport.On("127.0.0.1", 2*opts.Members)
	if err != nil {
		return fmt.Errorf("embedetcd: %w", err)
	}
	scheme := "http"
	if opts.TLS != nil {
		scheme = "https"
	}
	token := fmt.Sprintf("embedetcd-%d-%d", os.Getpid(), time.Now().UnixNano())
	var initial []string
	for i := range opts.Members {
		m := &Member{
			name:      fmt.Sprintf("m%d", i),
			clientURL: url.URL{Scheme: scheme, Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i])},
			peerURL:   url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])},
			token:     token,
			opts:      opts,
		}
		m.dir = filepath.Join(c.dir, m.name)
		initial = append(initial, m.name+"="+m.peerURL.String())
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		m.initial = strings.Join(initial, ",")
	}
	return nil
}

// Endpoints returns every member's client URL, for clientv3.Config.Endpoints.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.Endpoint()
	}
	return out
}

// Members returns the members in a fixed order.
func (c *Cluster) Members() []*Member { return c.members }

// Member returns member i.
func (c *Cluster) Member(i int) *Member { return c.members[i] }

// Close stops every member and removes the data unless Options.Dir was given.
// It is idempotent.
func (c *Cluster) Close() error {
	var wg sync.WaitGroup
	for _, m := range c.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.Stop()
		}()
	}
	wg.Wait()
	if c.ownDir {
		c.ownDir = false
		if err := os.RemoveAll(c.dir); err != nil {
			return fmt.Errorf("embedetcd: remove data dir: %w", err)
		}
	}
	return nil
}

// Name returns the member's name (m0, m1, …).
func (m *Member) Name() string { return m.name }

// Endpoint returns the member's client URL.
func (m *Member) Endpoint() string { return m.clientURL.String() }

// Running reports whether the member is started.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.etcd != nil
}

// Stop shuts the member down, keeping its data for Restart. Stopping a stopped
// member does nothing.
func (m *Member) Stop() {
	m.life.Lock()
	defer m.life.Unlock()
	m.stop()
}

func (m *Member) stop() {
	m.mu.Lock()
	e := m.etcd
	m.etcd = nil
	m.mu.Unlock()
	if e != nil {
		m.stopping.Store(true)
		e.Close()
	}
}

// Restart starts a stopped member on the same ports and data, and waits until it
// serves clients (in a cluster: until it has rejoined a quorum).
func (m *Member) Restart(ctx context.Context) error {
	m.life.Lock()
	defer m.life.Unlock()
	if m.Running() {
		return fmt.Errorf("embedetcd: member %s is running", m.name)
	}
	if err := m.launch(); err != nil {
		return err
	}
	if err := m.waitReady(ctx); err != nil {
		m.stop()
		return err
	}
	return nil
}

func (m *Member) launch() error {
	m.stopping.Store(false)
	e, err := embed.StartEtcd(m.config())
	if err != nil {
		return fmt.Errorf("embedetcd: start member %s: %w", m.name, err)
	}
	m.mu.Lock()
	m.etcd = e
	m.mu.Unlock()
	return nil
}

func (m *Member) waitReady(ctx context.Context) error {
	m.mu.Lock()
	e := m.etcd
	m.mu.Unlock()
	if e == nil {
		return fmt.Errorf("embedetcd: member %s is stopped", m.name)
	}
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("embedetcd: member %s failed: %w", m.name, err)
	case <-ctx.Done():
		return fmt.Errorf("embedetcd: member %s not ready: %w", m.name, ctx.Err())
	}
}

// config builds a fresh configuration each launch: embed.StartEtcd keeps state in
// the one it is given, so a restart cannot reuse it.
func (m *Member) config() *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.ListenClientUrls = []url.URL{m.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{m.clientURL}
	cfg.ListenPeerUrls = []url.URL{m.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{m.peerURL}
	cfg.InitialCluster = m.initial
	cfg.InitialClusterToken = m.token
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(memberLogger(&m.stopping))
	cfg.UnsafeNoFsync = !m.opts.Fsync
	cfg.EnableGRPCGateway = false
	if t := m.opts.TLS; t != nil {
		cfg.ClientTLSInfo.CertFile = t.CertFile
		cfg.ClientTLSInfo.KeyFile = t.KeyFile
		cfg.ClientTLSInfo.TrustedCAFile = t.CAFile
		cfg.ClientTLSInfo.ClientCertAuth = t.ClientCertAuth
	}
	if m.opts.Configure != nil {
		m.opts.Configure(cfg)
	}
	return cfg
}

func isAddrInUse(err error) bool {
	return err != nil && strings.Contains(err.Error(), "address already in use")
}
