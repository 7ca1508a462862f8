package client_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/etcd"
	sbjs "github.com/switchboard-mesh/switchboard/registry/jetstream"
)

// Registrar replicas that a test must SIGKILL run as processes of their own: the
// test binary re-executes itself with childEnv set, and the child serves one
// registrar on the etcd (or the nats-server) the parent embeds, until it is killed.

const childEnv = "SWITCHBOARD_TEST_REGISTRAR_CHILD"

// childConfig is what the parent tells a registrar process, in its environment.
type childConfig struct {
	etcd          string        // comma-separated endpoints
	nats          string        // a NATS URL: the JetStream backend instead of etcd
	maxAge        time.Duration // of the JetStream stream the child creates; 0: the default
	prefix        string
	cluster       string
	batchInterval time.Duration
	batchSize     int
	livenessTTL   time.Duration // 0: the replica holds nothing
}

func (c childConfig) env() []string {
	return []string{
		childEnv + "=1",
		"SB_CHILD_ETCD=" + c.etcd,
		"SB_CHILD_NATS=" + c.nats,
		"SB_CHILD_MAX_AGE=" + c.maxAge.String(),
		"SB_CHILD_PREFIX=" + c.prefix,
		"SB_CHILD_CLUSTER=" + c.cluster,
		"SB_CHILD_BATCH_INTERVAL=" + c.batchInterval.String(),
		"SB_CHILD_BATCH_SIZE=" + strconv.Itoa(c.batchSize),
		"SB_CHILD_LIVENESS_TTL=" + c.livenessTTL.String(),
	}
}

// runRegistrarChild is the child's main: it prints its gRPC address on stdout and
// serves until it is killed or its parent closes stdin.
func runRegistrarChild() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "registrar child:", err)
		return 1
	}
	interval, err := time.ParseDuration(os.Getenv("SB_CHILD_BATCH_INTERVAL"))
	if err != nil {
		return fail(err)
	}
	size, err := strconv.Atoi(os.Getenv("SB_CHILD_BATCH_SIZE"))
	if err != nil {
		return fail(err)
	}
	liveness, err := time.ParseDuration(os.Getenv("SB_CHILD_LIVENESS_TTL"))
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	backend, err := openChildBackend(ctx)
	if err != nil {
		return fail(err)
	}
	defer backend.Close()
	srv, err := registrar.NewServer(registrar.ServerConfig{Listen: "127.0.0.1:0", Registrar: registrar.Config{
		Cluster: os.Getenv("SB_CHILD_CLUSTER"), Backend: backend, SyncInterval: time.Second,
		BatchInterval: interval, BatchSize: size, LivenessTTL: liveness,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}})
	if err != nil {
		return fail(err)
	}
	fmt.Println(srv.Addr().String())
	// The parent holds our stdin: if it dies without killing us, stop.
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		cancel()
	}()
	if err := srv.Run(ctx); err != nil {
		return fail(err)
	}
	return 0
}

// openChildBackend opens the child's backend: JetStream when SB_CHILD_NATS names a
// server, else etcd.
func openChildBackend(ctx context.Context) (*registry.Front, error) {
	if url := os.Getenv("SB_CHILD_NATS"); url != "" {
		nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			return nil, err
		}
		maxAge, err := time.ParseDuration(os.Getenv("SB_CHILD_MAX_AGE"))
		if err != nil {
			nc.Close()
			return nil, err
		}
		r, err := sbjs.New(ctx, nc, sbjs.Options{CreateStream: true, Stream: sbjs.StreamConfig{MaxAge: maxAge}})
		if err != nil {
			nc.Close()
		}
		return r, err
	}
	return etcd.New(ctx, etcd.Options{Endpoints: strings.Split(os.Getenv("SB_CHILD_ETCD"), ","),
		Prefix: os.Getenv("SB_CHILD_PREFIX"), DialTimeout: 5 * time.Second})
}

// replicaProc is a registrar replica running as a child process.
type replicaProc struct {
	cmd  *exec.Cmd
	addr string
}

// startReplica starts a registrar process and waits for its address.
func startReplica(t *testing.T, cfg childConfig) *replicaProc {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), cfg.env()...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &replicaProc{cmd: cmd}
	t.Cleanup(func() {
		stdin.Close()
		p.kill()
	})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case p.addr = <-line:
	case <-time.After(30 * time.Second):
		t.Fatal("registrar process did not report its address within 30s")
	}
	if p.addr == "" {
		t.Fatal("registrar process exited before serving")
	}
	return p
}

// kill SIGKILLs the process and reaps it: nothing it held in memory survives.
func (p *replicaProc) kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
}
