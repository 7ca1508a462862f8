package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchboard-mesh/switchboard/internal/freeport"
)

// etcdProcess is an etcd server run as a process of its own (-etcd-process), as
// every deployment runs it: its heap and its collections are not the registrar's.
// The binary is built from the etcd module this one depends on.
type etcdProcess struct {
	cmd      *exec.Cmd
	endpoint string // host:port of its client URL
	done     chan error
}

// startEtcdProcess builds etcd into dir and runs one member with its data there.
func startEtcdProcess(ctx context.Context, dir string, fsync bool) (*etcdProcess, error) {
	bin := filepath.Join(dir, "etcd")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "go.etcd.io/etcd/server/v3")
	// In the module this file is in, wherever the bench runs from.
	if _, file, _, ok := runtime.Caller(0); ok {
		build.Dir = filepath.Dir(file)
	}
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build etcd: %v: %s", err, out)
	}
	ports, err := freeport.On("127.0.0.1", 2)
	if err != nil {
		return nil, err
	}
	client, peer := ports[0], ports[1]
	clientURL, peerURL := "http://127.0.0.1:"+strconv.Itoa(client), "http://127.0.0.1:"+strconv.Itoa(peer)
	cmd := exec.Command(bin, "--name", "bench", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "bench="+peerURL, "--log-level", "error",
		"--unsafe-no-fsync="+strconv.FormatBool(!fsync))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &etcdProcess{cmd: cmd, endpoint: "127.0.0.1:" + strconv.Itoa(client), done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	if err := p.waitReady(ctx); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// waitReady waits up to 30 s for the member to answer a read.
func (p *etcdProcess) waitReady(ctx context.Context) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.endpoint}, DialTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer closeQuietly(cli)
	deadline := time.Now().Add(30 * time.Second)
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Get(rctx, "/bench/ready-probe")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case err := <-p.done:
			p.done <- err
			return fmt.Errorf("etcd exited before it was ready: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd not ready within 30s: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends the member (SIGTERM, then SIGKILL after 10 s) and waits for it; an
// exit other than SIGTERM's clean one is logged.
func (p *etcdProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	kill := time.AfterFunc(10*time.Second, func() { _ = p.cmd.Process.Kill() })
	defer kill.Stop()
	if err := <-p.done; err != nil && !terminated(p.cmd) {
		log.Printf("etcd process: %v", err)
	}
}

// terminated reports whether the process ended on SIGTERM, as etcd does when asked.
func terminated(cmd *exec.Cmd) bool {
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM
}

// requests is grpc_server_msg_received_total from the member's /metrics.
func (p *etcdProcess) requests() (float64, error) {
	resp, err := http.Get("http://" + p.endpoint + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, err
	}
	f, ok := fams["grpc_server_msg_received_total"]
	if !ok {
		return 0, errors.New("etcd's /metrics has no grpc_server_msg_received_total")
	}
	sum := 0.0
	for _, m := range f.GetMetric() {
		sum += m.GetCounter().GetValue()
	}
	return sum, nil
}
