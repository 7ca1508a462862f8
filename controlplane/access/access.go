package access

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
)

// Options configure an Authorizer.
type Options struct {
	// Config binds identities and tokens to roles; when it binds nothing, every
	// caller may do everything (the caller decides where that is acceptable).
	Config config.Authorization
	// Logger receives denials and token reloads.
	Logger *slog.Logger
	// Audit receives one line per successful mutation; Logger when nil. Each line
	// carries audit=true.
	Audit *slog.Logger
	// Metrics receives the denial and reload counters; nil makes a private registry.
	Metrics prometheus.Registerer
}

// Authorizer decides who may call which northbound method.
type Authorizer struct {
	enabled    bool
	identities map[config.Identity]Role
	tokenFile  string
	tokens     atomic.Pointer[Tokens]
	reloadMu   sync.Mutex // one reload at a time, so Diff compares neighbours
	log, audit *slog.Logger
	denied     *prometheus.CounterVec
	reloads    *prometheus.CounterVec
}

// New builds an Authorizer and reads the token file, if one is configured.
func New(o Options) (*Authorizer, error) {
	a := &Authorizer{enabled: o.Config.Enabled(), identities: map[config.Identity]Role{}, tokenFile: o.Config.TokenFile, log: o.Logger, audit: o.Audit}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.audit == nil {
		a.audit = a.log
	}
	a.audit = a.audit.With("audit", true)
	if err := a.bind(o.Config.Identities); err != nil {
		return nil, err
	}
	if a.tokenFile != "" {
		t, err := LoadTokens(a.tokenFile)
		if err != nil {
			return nil, err
		}
		a.tokens.Store(t)
	}
	reg := o.Metrics
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	a.denied = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "switchboard_controlplane", Name: "northbound_denied_total",
		Help: "Northbound calls refused, by method and reason (unauthenticated: no valid credentials; permission_denied: the caller's role is too weak).",
	}, []string{"method", "reason"})
	a.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "switchboard_controlplane", Name: "northbound_token_reloads_total",
		Help: "Token file reloads by outcome; on error the tokens loaded before stay in force.",
	}, []string{"outcome"})
	if err := reg.Register(a.denied); err != nil {
		return nil, err
	}
	if err := reg.Register(a.reloads); err != nil {
		return nil, err
	}
	return a, nil
}

// Enabled reports whether roles are enforced.
func (a *Authorizer) Enabled() bool { return a.enabled }

// TokenCount is the number of tokens in force.
func (a *Authorizer) TokenCount() int { return a.tokens.Load().Len() }

// Reload re-reads the token file. On error the tokens in force stay, so a file
// caught half-written locks nobody out; the error is logged and counted.
func (a *Authorizer) Reload() error {
	if a.tokenFile == "" {
		a.log.Info("no northbound token file is configured: nothing to reload")
		return nil
	}
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	t, err := LoadTokens(a.tokenFile)
	if err != nil {
		a.reloads.WithLabelValues("error").Inc()
		a.log.Error("northbound token file not reloaded; the tokens loaded before stay in force", "file", a.tokenFile, "err", err)
		return err
	}
	c := Diff(a.tokens.Swap(t), t)
	a.reloads.WithLabelValues("ok").Inc()
	a.log.Info("northbound token file reloaded", "file", a.tokenFile, "tokens", c.Total,
		"added", len(c.Added), "removed", len(c.Removed), "changed", len(c.Changed),
		"added_names", c.Added, "removed_names", c.Removed, "changed_names", c.Changed)
	return nil
}

// ServerOptions install the interceptors on a gRPC server.
func (a *Authorizer) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(a.unary), grpc.ChainStreamInterceptor(a.stream)}
}

// Caller is who made a call, as the interceptor established it.
type Caller struct {
	// Who names the caller: "token:NAME", a certificate identity, or "anonymous".
	Who string
	// Via is how: "token", "certificate", or "none" when roles are not enforced.
	Via  string
	Role Role
	// Peer is the remote address.
	Peer string
}

type callerKey struct{}

// CallerFrom returns the caller of the call ctx belongs to.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

func (a *Authorizer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	caller, need, err := a.authorize(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	ctx = context.WithValue(ctx, callerKey{}, caller)
	if need < Admin {
		return handler(ctx, req)
	}
	ch := &change{}
	resp, err := handler(context.WithValue(ctx, changeKey{}, ch), req)
	if err == nil {
		a.auditLog(info.FullMethod, caller, req, resp, ch)
	}
	return resp, err
}

func (a *Authorizer) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	caller, need, err := a.authorize(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	ch := &change{}
	ctx := context.WithValue(context.WithValue(ss.Context(), callerKey{}, caller), changeKey{}, ch)
	err = handler(srv, &contextStream{ServerStream: ss, ctx: ctx})
	if err == nil && need >= Admin {
		a.auditLog(info.FullMethod, caller, nil, nil, ch)
	}
	return err
}

type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }

// authorize establishes the caller and checks its role against the method's. A
// presented token decides alone (an invalid one is refused even if a certificate
// would do): the caller chose to act as the token's holder.
func (a *Authorizer) authorize(ctx context.Context, method string) (Caller, Role, error) {
	caller := Caller{Who: "anonymous", Via: "none"}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		caller.Peer = p.Addr.String()
	}
	ids := certIdentities(ctx)
	if len(ids) > 0 {
		caller.Who = ids[0].String()
	}
	need, known := MethodRoles[method]
	if !known && openMethods[method] {
		return caller, NoRole, nil
	}
	if !known {
		need, known = introspectionRoles[method]
	}
	if !known {
		return caller, NoRole, a.deny(method, caller, codes.PermissionDenied, "no_role_defined",
			fmt.Sprintf("%s is not in the control plane's access table", method))
	}
	if !a.enabled {
		caller.Role = Admin
		return caller, need, nil
	}
	token, hasToken, err := bearer(ctx)
	switch {
	case err != nil:
		return caller, need, a.deny(method, caller, codes.Unauthenticated, "unauthenticated", err.Error())
	case hasToken:
		tok, ok := a.tokens.Load().Lookup(token)
		if !ok {
			return caller, need, a.deny(method, caller, codes.Unauthenticated, "unauthenticated", "unknown or revoked token")
		}
		caller.Who, caller.Via, caller.Role = "token:"+tok.Name, "token", tok.Role
	case len(ids) > 0:
		caller.Via = "certificate"
		if id, r := a.strongest(ids); r != NoRole {
			caller.Who, caller.Role = id.String(), r
		}
	default:
		return caller, need, a.deny(method, caller, codes.Unauthenticated, "unauthenticated",
			"no credentials: send a bearer token (switchboard ctl --token) or a client certificate bound to a role")
	}
	if caller.Role < need {
		return caller, need, a.deny(method, caller, codes.PermissionDenied, "permission_denied",
			fmt.Sprintf("%s needs role %s; %s has %s", path.Base(method), need, caller.Who, roleOf(caller.Role)))
	}
	return caller, need, nil
}

func roleOf(r Role) string {
	if r == NoRole {
		return "no role"
	}
	return "role " + r.String()
}

func (a *Authorizer) deny(method string, c Caller, code codes.Code, reason, msg string) error {
	a.denied.WithLabelValues(path.Base(method), reason).Inc()
	a.log.Warn("northbound call denied", "method", path.Base(method), "who", c.Who, "via", c.Via, "peer", c.Peer, "reason", reason, "err", msg)
	return status.Error(code, msg)
}

// bearer returns the token of an "authorization: Bearer TOKEN" header.
func bearer(ctx context.Context) (string, bool, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	switch len(vals) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", false, errors.New("more than one authorization header")
	}
	scheme, token, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(token) == "" {
		return "", false, errors.New("the authorization header must be \"Bearer TOKEN\"")
	}
	return strings.TrimSpace(token), true, nil
}

// certIdentities lists the names in the verified client certificate. Only a chain
// the TLS handshake verified counts, so nothing here comes from an unchecked claim.
func certIdentities(ctx context.Context) []config.Identity {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return nil
	}
	return LeafIdentities(ti.State.VerifiedChains[0][0])
}

// LeafIdentities lists a certificate's names, each with the field it comes from: URI
// SANs, then DNS SANs, then the common name.
func LeafIdentities(leaf *x509.Certificate) []config.Identity {
	var ids []config.Identity
	for _, u := range leaf.URIs {
		ids = append(ids, config.Identity{Kind: config.IdentityURI, Name: u.String()})
	}
	for _, d := range leaf.DNSNames {
		ids = append(ids, config.Identity{Kind: config.IdentityDNS, Name: d})
	}
	if cn := leaf.Subject.CommonName; cn != "" {
		ids = append(ids, config.Identity{Kind: config.IdentityCN, Name: cn})
	}
	return ids
}

// bind parses the authorization section's identity -> role bindings. Each binding
// keeps its kind, so it matches only names read from that certificate field.
func (a *Authorizer) bind(bindings map[string]string) error {
	for s, name := range bindings {
		id, err := config.ParseIdentity(s)
		if err != nil {
			return err
		}
		role, err := ParseRole(name)
		if err != nil {
			return fmt.Errorf("identity %s: %w", s, err)
		}
		a.identities[id] = role
	}
	return nil
}

// strongest is the strongest role bound to one of ids and the identity that has it;
// NoRole when none has one. Identities compare by kind and name: a binding never
// matches a name from another certificate field.
func (a *Authorizer) strongest(ids []config.Identity) (config.Identity, Role) {
	var best config.Identity
	var role Role
	for _, id := range ids {
		if r, ok := a.identities[id]; ok && r > role {
			best, role = id, r
		}
	}
	return best, role
}

// Identities lists the bound certificate identities by role, for the start-up log.
func (a *Authorizer) Identities() map[string][]string {
	out := map[string][]string{}
	ids := slices.SortedFunc(maps.Keys(a.identities), func(x, y config.Identity) int { return strings.Compare(x.String(), y.String()) })
	for _, id := range ids {
		r := a.identities[id].String()
		out[r] = append(out[r], id.String())
	}
	return out
}
