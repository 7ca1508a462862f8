package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/switchboard-mesh/switchboard/bench/internal/promtext"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/freeport"
	"github.com/switchboard-mesh/switchboard/registry"
	js "github.com/switchboard-mesh/switchboard/registry/jetstream"
)

// backendMembers is the shared backend's three members, each a process.
const backendMembers = 3

func memberName(i int) string { return "m" + strconv.Itoa(i+1) }

// startMembers starts the three members side by side (neither etcd nor JetStream is
// ready before a quorum is up) and returns them with their client URLs.
func startMembers(backend, dir, logDir string) ([]*proc, error) {
	ports, err := freeport.On("127.0.0.1", 2*backendMembers)
	if err != nil {
		return nil, err
	}
	var peers []string
	for i := range backendMembers {
		peers = append(peers, fmt.Sprintf("%s=127.0.0.1:%d", memberName(i), ports[2*i+1]))
	}
	kind := map[string]string{"etcd": "etcd", "jetstream": "nats"}[backend]
	members := make([]*proc, backendMembers)
	errs := make([]error, backendMembers)
	var wg sync.WaitGroup
	for i := range backendMembers {
		wg.Go(func() {
			members[i], errs[i] = startProc(memberName(i), logDir, 2*time.Minute, nil, kind,
				"-name", memberName(i), "-dir", filepath.Join(dir, memberName(i)),
				"-port", strconv.Itoa(ports[2*i]), "-peer-port", strconv.Itoa(ports[2*i+1]),
				"-peers", strings.Join(peers, ","))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, m := range members {
			if m != nil {
				m.killGroup()
			}
		}
		return nil, err
	}
	return members, nil
}

// observer reads the shared backend from the parent: how many writes it has
// committed, who leads, and which entries it holds. Every count is the backend's
// own, not the registrars' or the agents'.
type observer struct {
	backend string
	reg     registry.Registry
	*counter
}

// counter reads the backend's write counter and leader through clients of its own.
type counter struct {
	backend string
	etcd    *clientv3.Client
	nc      *nats.Conn
	js      jetstream.JetStream
}

// newCounter connects to urls only: the member phase reads through the survivors,
// so that this client's own failover is not counted as the backend's.
func newCounter(backend string, urls []string) (*counter, error) {
	c := &counter{backend: backend}
	var err error
	switch backend {
	case "etcd":
		c.etcd, err = clientv3.New(clientv3.Config{Endpoints: urls, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	case "jetstream":
		if c.nc, err = nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1)); err == nil {
			c.js, err = jetstream.New(c.nc)
		}
	}
	if err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func (c *counter) close() {
	if c.etcd != nil {
		_ = c.etcd.Close()
	}
	if c.nc != nil {
		c.nc.Close()
	}
}

func newObserver(ctx context.Context, backend string, urls []string, log *slog.Logger) (*observer, error) {
	o := &observer{backend: backend}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var err error
	if o.reg, err = openBackend(ctx, log, backend, urls, backendMembers); err != nil {
		return nil, err
	}
	if o.counter, err = newCounter(backend, urls); err != nil {
		o.close()
		return nil, err
	}
	return o, nil
}

func (o *observer) close() {
	if o.reg != nil {
		_ = o.reg.Close()
	}
	if o.counter != nil {
		o.counter.close()
	}
}

// counters are the backend's write counters at one moment.
type counters struct {
	at time.Time
	// writes is etcd's revision (one per committed transaction that changed
	// something) or the stream's last sequence (one per stored message).
	writes uint64
	// puts is etcd_mvcc_put_total of one member (one per key written); -1 when not
	// read (JetStream, or no member answered).
	puts float64
}

func (o *counter) read(ctx context.Context, members []*proc) (counters, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c := counters{at: time.Now(), puts: -1}
	switch o.backend {
	case "etcd":
		// A read of a key that does not exist returns the store's revision.
		resp, err := o.etcd.Get(ctx, "/fleet-bench/revision-probe")
		if err != nil {
			return c, err
		}
		c.writes = uint64(resp.Header.Revision)
		for _, m := range members {
			if m.alive() {
				if v, err := promtext.Fetch(ctx, http.DefaultClient, m.addr+"/metrics", "etcd_mvcc_put_total"); err == nil {
					c.puts = v
					break
				}
			}
		}
	case "jetstream":
		s, err := o.js.Stream(ctx, js.DefaultStream)
		if err != nil {
			return c, err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return c, err
		}
		c.writes = info.State.LastSeq
	}
	return c, nil
}

// leader is the index of the member that leads: etcd's Raft leader, or the leader of
// the registry stream's Raft group on JetStream.
func (o *counter) leader(ctx context.Context, members []*proc) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	switch o.backend {
	case "etcd":
		for i, m := range members {
			st, err := o.etcd.Status(ctx, m.addr)
			if err == nil && st.Leader == st.Header.MemberId {
				return i, nil
			}
		}
	case "jetstream":
		s, err := o.js.Stream(ctx, js.DefaultStream)
		if err != nil {
			return 0, err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return 0, err
		}
		if info.Cluster != nil {
			for i := range members {
				if info.Cluster.Leader == memberName(i) {
					return i, nil
				}
			}
		}
	}
	return 0, errors.New("no member says it leads")
}

// missing lists the expected entries of cluster c that the backend does not hold.
func (o *observer) missing(ctx context.Context, c, n, perAgent int) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	eps, err := o.reg.List(ctx, endpoint.Filter{Cluster: clusterName(c)})
	if err != nil {
		return nil, err
	}
	held := map[string]bool{}
	for _, e := range eps {
		held[e.Key().String()] = true
	}
	return lostEntries(expectedKeys(c, n, perAgent), nil, held), nil
}
