package jetstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The crash tests need a nats-server they can SIGKILL, which an embedded server is not:
// killing it would kill the test. They build the nats-server this module depends on,
// once per test binary, and run it as a child process.
var natsBin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// natsServerBinary builds github.com/nats-io/nats-server/v2 at the version go.mod
// requires, or skips the test when there is no go command to build it with.
func natsServerBinary(t *testing.T) string {
	t.Helper()
	natsBin.once.Do(func() {
		goCmd, err := exec.LookPath("go")
		if err != nil {
			if goroot := os.Getenv("GOROOT"); goroot != "" {
				goCmd, err = filepath.Join(goroot, "bin", "go"), nil
			}
		}
		if err != nil {
			natsBin.err = fmt.Errorf("no go command to build nats-server with: %w", err)
			return
		}
		if natsBin.dir, natsBin.err = os.MkdirTemp("", "switchboard-nats-server-"); natsBin.err != nil {
			return
		}
		natsBin.path = filepath.Join(natsBin.dir, "nats-server")
		// The build cache makes this quick after the first time; a cold cache on a
		// busy machine takes a minute or two.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, goCmd, "build", "-o", natsBin.path, "github.com/nats-io/nats-server/v2")
		if out, err := cmd.CombinedOutput(); err != nil {
			natsBin.err = fmt.Errorf("go build nats-server: %w\n%s", err, out)
		}
	})
	if natsBin.err != nil {
		t.Fatal(natsBin.err)
	}
	return natsBin.path
}

// removeNATSBinary deletes what natsServerBinary built; TestMain calls it last.
func removeNATSBinary() {
	if natsBin.dir != "" {
		_ = os.RemoveAll(natsBin.dir)
	}
}

// natsProcess is a nats-server running as a child process with JetStream on
// 127.0.0.1. The store directory and the port stay the same across restarts, as for a
// server that an init system brings back after a crash.
type natsProcess struct {
	t    *testing.T
	bin  string
	dir  string
	conf string
	port int
	cmd  *exec.Cmd
	done chan struct{}
	logs *os.File
}

type natsProcessOptions struct {
	// SyncAlways sets jetstream.sync_interval: always, which fsyncs every write.
	SyncAlways bool
}

// startNATSProcess builds (once) and starts a nats-server, and kills it when the test
// ends.
func startNATSProcess(t *testing.T, ctx context.Context, o natsProcessOptions) *natsProcess {
	t.Helper()
	p := &natsProcess{t: t, bin: natsServerBinary(t), dir: t.TempDir()}
	p.conf = filepath.Join(p.dir, "nats.conf")
	logs, err := os.Create(filepath.Join(p.dir, "nats.log"))
	if err != nil {
		t.Fatal(err)
	}
	p.logs = logs
	t.Cleanup(func() {
		p.kill()
		_ = logs.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logs.Name()); err == nil {
				t.Logf("nats-server log:\n%s", tail(string(b), 12000))
			}
		}
	})
	sync := ""
	if o.SyncAlways {
		sync = "sync_interval: always"
	}
	// port -1 lets the kernel pick a free port; the ports file says which, and every
	// restart then asks for that one.
	conf := fmt.Sprintf("listen: \"127.0.0.1:-1\"\nports_file_dir: %q\njetstream {\n  store_dir: %q\n  %s\n}\n",
		p.dir, filepath.Join(p.dir, "js"), sync)
	if err := os.WriteFile(p.conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	p.start(ctx)
	return p
}

// URL is where clients connect; it does not change across restarts.
func (p *natsProcess) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", p.port) }

func (p *natsProcess) start(ctx context.Context) {
	p.t.Helper()
	args := []string{"-c", p.conf}
	if p.port != 0 {
		args = append(args, "-a", "127.0.0.1", "-p", fmt.Sprint(p.port))
	}
	cmd := exec.Command(p.bin, args...)
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start nats-server: %v", err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(p.done)
	if p.port == 0 {
		p.port = p.readPort(ctx, cmd.Process.Pid)
	}
	p.waitReady(ctx)
}

// readPort waits for the ports file the server writes once it listens.
func (p *natsProcess) readPort(ctx context.Context, pid int) int {
	p.t.Helper()
	file := filepath.Join(p.dir, fmt.Sprintf("%s_%d.ports", filepath.Base(p.bin), pid))
	for {
		if b, err := os.ReadFile(file); err == nil {
			var ports struct{ Nats []string }
			if json.Unmarshal(b, &ports) == nil && len(ports.Nats) > 0 {
				var port int
				if _, err := fmt.Sscanf(ports.Nats[0][strings.LastIndexByte(ports.Nats[0], ':')+1:], "%d", &port); err == nil {
					return port
				}
			}
		}
		select {
		case <-p.done:
			p.t.Fatal("nats-server exited before it listened")
		case <-ctx.Done():
			p.t.Fatalf("nats-server wrote no ports file: %v", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitReady returns once JetStream answers, which after a crash means the streams
// have been recovered.
func (p *natsProcess) waitReady(ctx context.Context) {
	p.t.Helper()
	for {
		if p.ready(ctx) {
			return
		}
		select {
		case <-p.done:
			p.t.Fatal("nats-server exited while starting")
		case <-ctx.Done():
			p.t.Fatalf("nats-server at %s not ready: %v", p.URL(), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (p *natsProcess) ready(ctx context.Context) bool {
	nc, err := nats.Connect(p.URL(), nats.Timeout(time.Second), nats.NoReconnect())
	if err != nil {
		return false
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return false
	}
	actx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = js.AccountInfo(actx)
	return err == nil
}

// crash SIGKILLs the server, so nothing buffered is flushed and nothing shuts down
// cleanly, and then starts it again on the same store and port.
func (p *natsProcess) crash(ctx context.Context) {
	p.t.Helper()
	p.kill()
	p.start(ctx)
}

func (p *natsProcess) kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.t.Errorf("nats-server pid %d still running 10s after SIGKILL", p.cmd.Process.Pid)
	}
	p.cmd = nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
