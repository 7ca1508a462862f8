package kubetest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
	"github.com/switchboard-mesh/switchboard/internal/freeport"
	"github.com/switchboard-mesh/switchboard/internal/toolbin"
)

// readyTimeout bounds the wait for /readyz; the server is ready in about 3 s on an
// idle machine, so a minute only fails a server that is truly stuck.
const readyTimeout = 60 * time.Second

// Cluster is a running kube-apiserver on its own etcd. It is stopped when the test
// that started it ends.
type Cluster struct {
	// URL is the server's https address on 127.0.0.1.
	URL string
	// Config authenticates as an admin (group system:masters) and trusts the
	// server's self-signed certificate. Copy it (rest.CopyConfig) before changing it.
	Config *rest.Config
	// Clientset is built from Config.
	Clientset *kubernetes.Clientset
	// Token is the admin bearer token.
	Token string

	proc *toolbin.Process
}

// Option adjusts how Start runs the server.
type Option func(*options)

type options struct {
	args []string
}

// WithArgs appends kube-apiserver flags; a later flag overrides an earlier one, so
// this can also replace Start's defaults (for example --authorization-mode).
func WithArgs(args ...string) Option {
	return func(o *options) { o.args = append(o.args, args...) }
}

// Start runs kube-apiserver for the test and waits until it is ready; it skips the
// test when no binary is available (see Binary) and fails it if the server does not
// come up within readyTimeout.
func Start(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	bin := Binary(t)
	etcd := embedetcd.New(t, embedetcd.Options{})
	creds, err := writeCredentials(t.TempDir())
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	c, err := startServer(t, bin, etcd.Endpoints()[0], creds, o.args)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	return c
}

// startAttempts retries when the free port found for the server is taken before it
// binds it, which another process on the machine can do.
const startAttempts = 3

func startServer(t testing.TB, bin, etcdURL string, creds *credentials, extra []string) (*Cluster, error) {
	var err error
	for range startAttempts {
		var c *Cluster
		c, err = startOnce(t, bin, etcdURL, creds, extra)
		if err == nil || c == nil || !c.proc.AddrInUse() {
			return c, err
		}
	}
	return nil, err
}

// startOnce starts the process and waits for readiness; on failure it has already
// stopped the process, the error carries the end of its log, and the Cluster (nil if
// the process never started) tells startServer whether to retry.
func startOnce(t testing.TB, bin, etcdURL string, creds *credentials, extra []string) (*Cluster, error) {
	ports, err := freeport.On("127.0.0.1", 1)
	if err != nil {
		return nil, err
	}
	port := ports[0]
	args := append(serverArgs(port, etcdURL, creds), extra...)
	proc, err := toolbin.StartProcess(toolbin.Command{
		Bin:     bin,
		Args:    args,
		LogPath: filepath.Join(creds.dir, "kube-apiserver.log"),
		// kube-apiserver logs hundreds of lines while starting, and the cause of a
		// failure is near the end.
		LogTailLines: 60,
	})
	if err != nil {
		return nil, err
	}
	c := &Cluster{URL: "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Token: creds.token, proc: proc}
	start := time.Now()
	if err := c.waitReady(creds); err != nil {
		proc.Stop()
		return c, fmt.Errorf("kube-apiserver not ready: %w\n--- kube-apiserver log (tail) ---\n%s", err, proc.LogTail())
	}
	t.Logf("kubetest: kube-apiserver ready at %s in %s", c.URL, time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() { c.stop(t) })
	return c, nil
}

// serverArgs are the flags a lone API server on loopback needs.
func serverArgs(port int, etcdURL string, creds *credentials) []string {
	return []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		// A loopback advertise address is refused by the endpoint reconciler, which
		// would publish it as the kubernetes Service's endpoint.
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + creds.certDir,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + creds.saKey,
		"--service-account-signing-key-file=" + creds.saKey,
		"--token-auth-file=" + creds.tokenFile,
		"--authorization-mode=RBAC",
		// No controller-manager creates each namespace's default ServiceAccount,
		// which this admission plugin would demand of every pod.
		"--disable-admission-plugins=ServiceAccount",
	}
}

// waitReady polls /readyz until it answers 200, the process exits, or readyTimeout.
func (c *Cluster) waitReady(creds *credentials) error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	var last error
	for {
		if c.proc.Exited() {
			return fmt.Errorf("process exited: %v", c.proc.ExitErr())
		}
		if cfg, err := c.clientConfig(creds); err != nil {
			last = err // the certificate is written a moment after the process starts
		} else if last = probeReady(ctx, cfg); last == nil {
			return c.finish(cfg)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no /readyz within %s: %w", readyTimeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// finish fills in the clients once the server is ready.
func (c *Cluster) finish(cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	c.Config, c.Clientset = cfg, cs
	return nil
}

// clientConfig trusts the self-signed certificate the server generated in
// --cert-dir, rather than skipping verification, so clients exercise real TLS.
func (c *Cluster) clientConfig(creds *credentials) (*rest.Config, error) {
	ca, err := creds.serverCA()
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host:            c.URL,
		BearerToken:     c.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca},
		// Tests create objects in bursts; client-go's default 5 QPS would throttle.
		QPS:   100,
		Burst: 200,
	}, nil
}

// probeReady asks /readyz once.
func probeReady(ctx context.Context, cfg *rest.Config) error {
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/readyz", nil)
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: rt, Timeout: 5 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}

// stop ends the server, showing its log if the test failed so the server's side of
// the failure is visible.
func (c *Cluster) stop(t testing.TB) {
	c.proc.Stop()
	if t.Failed() {
		t.Logf("--- kube-apiserver log (tail) ---\n%s", c.proc.LogTail())
	}
}

// Pid returns the server's process id, for tests that measure it.
func (c *Cluster) Pid() int { return c.proc.Pid() }
