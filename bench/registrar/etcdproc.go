package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
)

// etcdProcess is an etcd server run as a process of its own (-etcd-process), as every
// deployment runs it: its heap and its collections are not the registrar's. The
// process is this program again (-role etcd) serving an embedded etcd, as the
// scenarios' watchers are and as the soak bench runs its etcd.
type etcdProcess struct {
	c        *child
	endpoint string // its client URL
}

// startEtcdProcess runs one member with its data in dir.
func startEtcdProcess(ctx context.Context, dir string, fsync bool) (*etcdProcess, error) {
	c, err := startChild(ctx, []string{"-role", "etcd", "-etcd-dir", dir, "-fsync=" + strconv.FormatBool(fsync)}, "")
	if err != nil {
		return nil, err
	}
	if !c.lines.Scan() {
		return nil, errors.Join(fmt.Errorf("etcd child printed no endpoint: %v", c.lines.Err()), c.wait())
	}
	return &etcdProcess{c: c, endpoint: c.lines.Text()}, nil
}

// stop ends the member (closing its stdin) and waits for it; a failed exit is logged.
func (p *etcdProcess) stop() {
	if err := p.c.wait(); err != nil {
		log.Printf("etcd process: %v", err)
	}
}

// etcdChild is -role etcd: it serves an embedded etcd in dir, prints "ready" and its
// client URL, and stops when its stdin closes.
func etcdChild(dir string, fsync bool) (err error) {
	c, err := embedetcd.Start(context.Background(), embedetcd.Options{Dir: dir, Fsync: fsync})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, c.Close()) }()
	fmt.Println("ready")
	fmt.Println(c.Endpoints()[0])
	_, err = io.Copy(io.Discard, os.Stdin)
	return err
}

// requests is grpc_server_msg_received_total from the member's /metrics.
func (p *etcdProcess) requests() (float64, error) {
	resp, err := http.Get(p.endpoint + "/metrics")
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
