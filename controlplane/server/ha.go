package server

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/controlplane/access"
	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/leader"
	"github.com/switchboard-mesh/switchboard/controlplane/reconcile"
	cpetcd "github.com/switchboard-mesh/switchboard/controlplane/store/etcd"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
	"github.com/switchboard-mesh/switchboard/nodeauth"
)

// The status detail a standby answers with; the data-plane controller reads it to go
// to the leader (dataplane.NotLeaderReason and dataplane.LeaderHintKey are the same
// strings: the data plane does not import the control plane).
const (
	notLeaderDomain = "switchboard.controlplane"
	notLeaderReason = "NOT_LEADER"
	leaderHintKey   = "leader_southbound"
	leaderNorthKey  = "leader_northbound"
)

// ha is a replica's part in high availability: present when the store is on etcd.
// Only while leading does the replica reconcile and accept node streams.
type ha struct {
	store   *cpetcd.Store
	elector *leader.Elector
	// leading opens the southbound and northbound writes: set once the store holds
	// the lead and the service has reset, cleared before anything stops.
	leading atomic.Bool
	// loadedSecrets are the group secrets the store held when the replica started.
	loadedSecrets map[string]string
}

// openHA sets up the election when the store is on etcd; the listeners must be
// bound (their addresses are the default advertised ones).
func (s *Server) openHA() error {
	es, ok := s.store.(*cpetcd.Store)
	if !ok {
		return nil
	}
	e := s.o.Config.Database.Etcd
	ttl := e.LeaseTTL
	if ttl == 0 {
		ttl = config.DefaultLeaseTTL
	}
	host, _ := os.Hostname()
	self := leader.Info{ID: host + "-" + strconv.Itoa(os.Getpid()), Southbound: e.AdvertiseSouthbound, Northbound: e.AdvertiseNorthbound}
	if self.Southbound == "" {
		self.Southbound = advertised(s.SouthboundAddr(), host)
	}
	if self.Northbound == "" {
		self.Northbound = advertised(s.NorthboundAddr(), host)
	}
	el, err := leader.New(leader.Options{Client: es.Client(), Prefix: es.Prefix() + "election", TTL: ttl, Self: self,
		Logger: s.log.With("component", "leader")})
	if err != nil {
		return fmt.Errorf("database.etcd: %w", err)
	}
	// The secrets the verifier was given at start, to know which to drop at takeover.
	loaded, err := es.ListGroupSecrets(context.Background())
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	s.ha = &ha{store: es, elector: el, loadedSecrets: loaded}
	s.metrics.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: ns, Name: "leader", Help: "1 while this replica leads (reconciles and serves nodes), 0 while it stands by.",
	}, func() float64 {
		if s.ha.leading.Load() {
			return 1
		}
		return 0
	}))
	return nil
}

// runHA campaigns until ctx ends; a lead that was won and lost ends the server (the
// process exits and its supervisor restarts it as a standby).
func (s *Server) runHA(ctx context.Context, failed chan<- error) {
	if err := s.ha.elector.Run(ctx, s.lead); err != nil {
		failed <- err
	}
}

// lead is one term as leader. The new leader takes the store's lead (re-reading it,
// fencing its writes on the election key), applies the restart rule — nodes
// re-register and rebuild links and routes, handing their live connections over
// rather than dialling again — and reconciles until the term ends. Then it refuses
// writes first, so nothing it still does reaches the store, and drops the nodes'
// streams without counting them as crashes.
func (s *Server) lead(ctx context.Context, t leader.Term) {
	start := time.Now()
	if err := s.ha.store.Lead(ctx, t.Key, t.Rev); err != nil {
		s.log.Error("taking the lead: store", "err", err)
		return
	}
	if err := s.svc.Reset(ctx); err != nil {
		s.ha.store.Follow()
		s.log.Error("taking the lead: reset", "err", err)
		return
	}
	if err := s.reloadGroupSecrets(ctx); err != nil {
		s.ha.store.Follow()
		s.log.Error("taking the lead: group secrets", "err", err)
		return
	}
	s.ha.leading.Store(true)
	s.log.Info("leading: reconciling and accepting nodes", "took", time.Since(start), "rev", t.Rev)
	var workers sync.WaitGroup
	workers.Go(func() { s.links.Run(ctx) })
	workers.Go(func() { s.routes.Run(ctx) })
	workers.Go(func() {
		reconcile.Sweep(ctx, s.o.Config.Reconciler.ReconcilePeriod, s.streams.Nodes, s.links, s.routes)
	})
	<-ctx.Done()
	s.ha.store.Follow()
	s.ha.leading.Store(false)
	s.south.Closing()
	s.sgrpc.Stop()
	workers.Wait()
	s.log.Info("stopped leading: reconcilers stopped, node streams closed", "at", time.Now().UnixNano())
}

// reloadGroupSecrets brings the registration verifier up to the secrets in the
// store: it loaded them when the replica started, and the leader of the time may
// have added, rotated or removed some since. A file's secrets stay the file's.
func (s *Server) reloadGroupSecrets(ctx context.Context) error {
	verifier, ok := s.auth.(*nodeauth.SharedSecret)
	if !ok || s.svc.Mode() != config.APIMode {
		return nil
	}
	stored, err := s.store.ListGroupSecrets(ctx)
	if err != nil {
		return err
	}
	file := s.o.Config.RegistrationAuth.Secrets
	for g := range s.ha.loadedSecrets {
		if _, still := stored[g]; !still && file[g] == "" {
			verifier.RemoveSecret(g)
		}
	}
	for g, secret := range stored {
		if file[g] != "" {
			continue
		}
		if err := verifier.SetSecret(g, secret); err != nil {
			return fmt.Errorf("stored secret of group %s: %w", g, err)
		}
	}
	return nil
}

// notLeader is a standby's answer, naming the leader when one is known.
func (s *Server) notLeader(code codes.Code) error {
	l, ok := s.ha.elector.Leader()
	msg := "this control plane replica is a standby and no leader is elected yet"
	if ok {
		msg = fmt.Sprintf("this control plane replica is a standby; the leader is %s at %s (northbound %s)", l.ID, l.Southbound, l.Northbound)
	}
	// The reason goes along also without a leader to name: a node then knows that
	// the control plane is up and electing, and retries soon.
	info := &errdetails.ErrorInfo{Domain: notLeaderDomain, Reason: notLeaderReason}
	if ok {
		info.Metadata = map[string]string{leaderHintKey: l.Southbound, leaderNorthKey: l.Northbound}
	}
	st := status.New(code, msg)
	if d, err := st.WithDetails(info); err == nil {
		st = d
	}
	return st.Err()
}

// southboundGate refuses node streams while this replica stands by, naming the
// leader so that nodes go there.
func (s *Server) southboundGate() grpc.ServerOption {
	return grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if s.ha != nil && !s.ha.leading.Load() && info.FullMethod == controllerv1.ControllerService_OpenControlChannel_FullMethodName {
			return s.notLeader(codes.Unavailable)
		}
		return h(srv, ss)
	})
}

// northboundGate refuses mutations while this replica stands by: reads are served
// from the store's copy of etcd, writes belong to the leader, whose northbound
// address the refusal names. (They are refused rather than forwarded so that a
// caller's credentials are only ever presented to the replica it dialled.)
func (s *Server) northboundGate() grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if s.ha != nil && !s.ha.leading.Load() && access.MethodRoles[info.FullMethod] == access.Admin {
			return nil, s.notLeader(codes.FailedPrecondition)
		}
		return h(ctx, req)
	})
}

// IsLeader reports whether this replica leads; a control plane without an etcd
// store always does.
func (s *Server) IsLeader() bool { return s.ha == nil || s.ha.leading.Load() }

func isEtcd(st any) bool {
	_, ok := st.(*cpetcd.Store)
	return ok
}

// advertised is the address a listener on addr is reached at: a wildcard host
// (0.0.0.0, ::) means nothing to a node, so it is replaced by the address the
// machine's name resolves to — a pod's IP in Kubernetes.
func advertised(addr, hostname string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || !net.ParseIP(host).IsUnspecified() {
		return addr
	}
	ips, err := net.LookupHost(hostname)
	if err != nil {
		return addr
	}
	for _, ip := range ips {
		if p := net.ParseIP(ip); p != nil && !p.IsLoopback() {
			return net.JoinHostPort(ip, port)
		}
	}
	return addr
}
