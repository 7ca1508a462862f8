package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// DefaultDomain is the domain served when none is configured.
const DefaultDomain = "switchboard."

// DefaultTTL is the TTL of every answer: short, so that a change reaches clients
// quickly even through caching resolvers.
const DefaultTTL = 5 * time.Second

// Options configure a Server.
type Options struct {
	// Domain is the zone answered for; default DefaultDomain.
	Domain string
	// TTL of the answers and of negative answers; default DefaultTTL.
	TTL time.Duration
	// Upstream, when set (host:port), answers the questions outside Domain; without
	// it they are refused.
	Upstream string
	// UpstreamTimeout bounds one forwarded question; default 2s.
	UpstreamTimeout time.Duration
	// Region and Zone are where this agent runs (both optional; a zone needs no
	// region), validated like an endpoint's. The agent answers its own node, so they
	// are where the querier runs too. When either is set, SRV priorities prefer
	// endpoints in this zone, then this region, within each endpoint priority, and
	// A and AAAA records come in that order (see recordPriority); when neither is,
	// answers are as without localities: the endpoint priority as is.
	Region string
	Zone   string
	Logger *slog.Logger
}

// Server answers DNS questions from the endpoints last given to Update, over UDP and
// TCP. Before the first Update every name in the domain is answered SERVFAIL: the
// registry has not been read, and "no such name" would be a lie that gets cached.
type Server struct {
	udp  net.PacketConn
	tcp  net.Listener
	opts Options
	log  *slog.Logger
	ttl  uint32
	m    *metrics

	zone   atomic.Pointer[zone]
	mu     sync.Mutex // serialises Update
	serial uint32
	stats  stats // queries answered, for the agent's page (inspect.go)
}

// New returns a server for the domain that will answer on udp and tcp (either may be
// nil). It reports a domain or TTL that cannot be served.
func New(udp net.PacketConn, tcp net.Listener, o Options) (*Server, error) {
	if o.Domain == "" {
		o.Domain = DefaultDomain
	}
	domain, err := ParseDomain(o.Domain)
	if err != nil {
		return nil, err
	}
	o.Domain = domain
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.TTL < time.Second || o.TTL > 24*time.Hour {
		return nil, fmt.Errorf("dns: TTL %s: want between 1s and 24h", o.TTL)
	}
	if o.Upstream != "" {
		if _, _, err := net.SplitHostPort(o.Upstream); err != nil {
			return nil, fmt.Errorf("dns: upstream %q: want host:port: %w", o.Upstream, err)
		}
	}
	for _, f := range [...]struct{ name, value string }{{"region", o.Region}, {"zone", o.Zone}} {
		if f.value != "" {
			if err := endpoint.ValidateName(f.name, f.value); err != nil {
				return nil, fmt.Errorf("dns: %w", err)
			}
		}
	}
	if o.UpstreamTimeout <= 0 {
		o.UpstreamTimeout = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if udp == nil && tcp == nil {
		return nil, errors.New("dns: no listener")
	}
	return &Server{udp: udp, tcp: tcp, opts: o, log: o.Logger.With("component", "dns"),
		ttl: uint32(o.TTL / time.Second), m: newMetrics()}, nil
}

// ParseDomain checks a domain name and returns it lower-case and fully qualified.
func ParseDomain(s string) (string, error) {
	d := strings.ToLower(dns.Fqdn(s))
	if d == "." {
		return "", fmt.Errorf("dns: domain %q: the root cannot be served, name a domain such as %s", s, DefaultDomain)
	}
	if _, ok := dns.IsDomainName(d); !ok {
		return "", fmt.Errorf("dns: domain %q is not a valid domain name", s)
	}
	return d, nil
}

// Listen opens UDP and TCP on one address; with port 0 both get the same free port.
func Listen(addr string) (net.PacketConn, net.Listener, error) {
	for range 10 {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("dns: listen udp %s: %w", addr, err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		if _, port, _ := net.SplitHostPort(addr); port != "0" {
			return nil, nil, fmt.Errorf("dns: listen tcp %s: %w", addr, err)
		}
		// The free UDP port was taken on TCP: try another.
	}
	return nil, nil, fmt.Errorf("dns: no port free on both UDP and TCP at %s", addr)
}

// Name identifies the server among the agent's outputs.
func (s *Server) Name() string { return "dns" }

// Domain is the zone served, fully qualified.
func (s *Server) Domain() string { return s.opts.Domain }

// Update makes eps the answers; it reports true, since every call may change them.
func (s *Server) Update(_ context.Context, eps []endpoint.Endpoint) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.serial++
	z := newZone(s.opts.Domain, s.serial, eps, place{region: s.opts.Region, zone: s.opts.Zone})
	s.zone.Store(z)
	s.m.names.Set(float64(len(z.names)))
	s.m.leftOut.Set(float64(z.leftOut))
	return true, nil
}

// Demand reports every service: DNS cannot know its questions in advance.
func (s *Server) Demand() (services []string, all bool) { return nil, true }

// DemandChanged never fires: the demand is always every service.
func (s *Server) DemandChanged() <-chan struct{} { return nil }

// ServeDNS answers one query; miekg/dns has already answered FORMERR for a message
// that does not parse.
func (s *Server) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	_, udp := w.LocalAddr().(*net.UDPAddr)
	proto := map[bool]string{true: "udp", false: "tcp"}[udp]
	var resp *dns.Msg
	z := s.zone.Load()
	switch {
	case s.opts.Upstream != "" && len(req.Question) == 1 && !dns.IsSubDomain(s.opts.Domain, strings.ToLower(req.Question[0].Name)):
		resp = s.forward(req, proto)
	case z == nil:
		resp = new(dns.Msg)
		resp.SetRcode(req, dns.RcodeServerFailure)
	default:
		resp = s.reply(z, req, udp, w.LocalAddr())
	}
	s.m.queries.WithLabelValues(proto, dns.RcodeToString[resp.Rcode]).Inc()
	s.stats.answered.Add(1)
	if err := w.WriteMsg(resp); err != nil {
		s.log.Debug("dns answer not sent", "err", err)
	}
}

// forward asks the upstream resolver, over the transport the question came on.
func (s *Server) forward(req *dns.Msg, proto string) *dns.Msg {
	c := &dns.Client{Net: proto, Timeout: s.opts.UpstreamTimeout}
	resp, _, err := c.Exchange(req, s.opts.Upstream)
	if err != nil {
		s.m.forwarded.WithLabelValues("error").Inc()
		s.log.Warn("dns upstream failed", "upstream", s.opts.Upstream, "err", err)
		resp = new(dns.Msg)
		resp.SetRcode(req, dns.RcodeServerFailure)
		return resp
	}
	s.m.forwarded.WithLabelValues("ok").Inc()
	return resp
}

// Serve answers until ctx ends, then stops both listeners, lets the queries under
// way finish, and returns nil.
func (s *Server) Serve(ctx context.Context) error {
	var servers []*dns.Server
	if s.udp != nil {
		servers = append(servers, &dns.Server{PacketConn: s.udp, Handler: s})
	}
	if s.tcp != nil {
		servers = append(servers, &dns.Server{Listener: s.tcp, Handler: s,
			// A client that holds a connection open idle is dropped.
			IdleTimeout: func() time.Duration { return 10 * time.Second }})
	}
	errc := make(chan error, len(servers))
	started := make(chan struct{}, len(servers))
	for _, srv := range servers {
		srv.NotifyStartedFunc = func() { started <- struct{}{} }
		go func() { errc <- srv.ActivateAndServe() }()
	}
	// Each server either starts or fails; only then can all be shut down without
	// one starting after its shutdown.
	var err error
	returned := 0
	for range servers {
		select {
		case <-started:
		case e := <-errc:
			returned++
			err = errors.Join(err, e)
		}
	}
	if err == nil {
		s.log.Info("serving DNS", "addr", s.addr(), "domain", s.opts.Domain)
		select {
		case err = <-errc:
			returned++
		case <-ctx.Done():
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for _, srv := range servers {
		_ = srv.ShutdownContext(sctx) // "server not started" for one that failed
	}
	for ; returned < len(servers); returned++ {
		<-errc
	}
	if err != nil {
		return fmt.Errorf("dns server: %w", err)
	}
	return nil
}

// Addr is the address the server answers on (UDP, and TCP on the same port).
func (s *Server) Addr() string { return s.addr() }

func (s *Server) addr() string {
	if s.udp != nil {
		return s.udp.LocalAddr().String()
	}
	return s.tcp.Addr().String()
}

// Describe and Collect export the server's metrics on the agent's /metrics.
func (s *Server) Describe(ch chan<- *prometheus.Desc) { s.m.Describe(ch) }

// Collect implements prometheus.Collector.
func (s *Server) Collect(ch chan<- prometheus.Metric) { s.m.Collect(ch) }
