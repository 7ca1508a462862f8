package cpharness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
)

// The switchboard binary, built at most once per test run, into binDir (removed by
// TestMain).
var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	binErr    error
)

func switchboardBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "switchboard-e2e-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "switchboard")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "build", "-o", binPath, "github.com/switchboard-mesh/switchboard/cmd/switchboard").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build ./cmd/switchboard: %w\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func removeBinary(int) {
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
}

// cpProcess is `switchboard controlplane` running in a process of its own.
type cpProcess struct {
	t            *testing.T
	cmd          *exec.Cmd
	north, south string
	done         chan error
	mu           sync.Mutex
	log          strings.Builder // its stderr, shown when a test fails
}

// processConfig is an API mode control plane on SQLite at db with fast retries and no
// periodic sweep, so that nothing but the reconcilers' own passes repairs anything.
func processConfig(south, db string) string {
	return fmt.Sprintf(`northbound:
  endpoint: "127.0.0.1:0"
  tls:
    insecure: true
southbound:
  endpoint: %q
  tls:
    insecure: true
database:
  type: sqlite
  path: %q
reconciler:
  max_requeues: 15
  base_retry_delay: "10ms"
  reconcile_period: "0s"
  enable_orphan_detection: false
  workers: 4
`, south, db)
}

// startCPProcess runs the binary with a config for southbound address south ("…:0" for
// any port) and database db, and waits until it prints its addresses.
func startCPProcess(t *testing.T, south, db string) *cpProcess {
	t.Helper()
	return startCPProcessWith(t, processConfig(south, db))
}

// startCPProcessWith runs the binary with the config text, and waits until it
// prints its addresses.
func startCPProcessWith(t *testing.T, config string) *cpProcess {
	t.Helper()
	bin := switchboardBinary(t)
	cfg := filepath.Join(t.TempDir(), "controlplane.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &cpProcess{t: t, done: make(chan error, 1)}
	p.cmd = exec.Command(bin, "controlplane", "--config", cfg, "--metrics-listen", "", "--log-level", "debug")
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = writerFunc(func(b []byte) (int, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.log.Write(b)
	})
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan [2]string, 1)
	go func() {
		var north, south string
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 2 && f[0] == "northbound":
				north = f[1]
			case len(f) == 2 && f[0] == "southbound":
				south = f[1]
				addrs <- [2]string{north, south}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() && os.Getenv("E2E_LOG") != "" {
			p.mu.Lock()
			t.Logf("control plane process log:\n%s", p.log.String())
			p.mu.Unlock()
		}
	})
	select {
	case a := <-addrs:
		p.north, p.south = a[0], a[1]
	case err := <-p.done:
		p.done <- err
		t.Fatalf("control plane process exited before serving: %v\n%s", err, p.stderr())
	case <-time.After(60 * time.Second):
		t.Fatalf("control plane process did not print its addresses\n%s", p.stderr())
	}
	return p
}

func (p *cpProcess) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// stop ends the process as an operator would, with SIGTERM, and waits for it; a
// process that does not stop in time is killed and the test fails.
func (p *cpProcess) stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			p.t.Errorf("control plane process: %v", err)
		}
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Error("control plane process ignored SIGTERM")
	}
}

func (p *cpProcess) northbound(t *testing.T) controlplanev1.ControlPlaneServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(p.north, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return controlplanev1.NewControlPlaneServiceClient(conn)
}

type writerFunc func([]byte) (int, error)

func (w writerFunc) Write(b []byte) (int, error) { return w(b) }

// desired reads the control plane's links and routes (deleted ones included) through
// its northbound API, in the store's types.
func desired(ctx context.Context, nb controlplanev1.ControlPlaneServiceClient) ([]store.Link, []store.Route, error) {
	lr, err := nb.ListLinks(ctx, &controlplanev1.ListLinksRequest{})
	if err != nil {
		return nil, nil, err
	}
	rr, err := nb.ListRoutes(ctx, &controlplanev1.ListRoutesRequest{})
	if err != nil {
		return nil, nil, err
	}
	var links []store.Link
	for _, l := range lr.GetLinks() {
		st, err := store.ParseLinkStatus(l.GetStatus())
		if err != nil {
			return nil, nil, err
		}
		links = append(links, store.Link{
			ID: l.GetLinkId(), SourceNodeID: l.GetSourceNodeId(), DestGroup: l.GetDestGroup(), DestNodeID: l.GetDestNodeId(),
			DestEndpoint: l.GetDestEndpoint(), ConnConfig: l.GetConnectionConfig(), Status: st,
			StatusMessage: l.GetStatusMessage(), Deleted: l.GetDeleted(),
		})
	}
	var routes []store.Route
	for _, r := range rr.GetRoutes() {
		st, err := store.ParseRouteStatus(r.GetStatus())
		if err != nil {
			return nil, nil, err
		}
		c := strings.SplitN(r.GetName(), "/", 3)
		if len(c) != 3 {
			return nil, nil, fmt.Errorf("route %d: name %q", r.GetId(), r.GetName())
		}
		name := store.NewName(c[0], c[1], c[2])
		if r.ComponentId != nil {
			name = name.WithID(r.GetComponentId())
		}
		routes = append(routes, store.Route{
			ID: r.GetId(), SourceNodeID: r.GetSourceNodeId(), DestNodeID: r.GetDestNodeId(), Name: name,
			LinkID: r.GetLinkId(), Status: st, StatusMessage: r.GetStatusMessage(), Deleted: r.GetDeleted(),
		})
	}
	return links, routes, nil
}
