package registrar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
	"github.com/switchboard-mesh/switchboard/internal/rpcinput"
	"github.com/switchboard-mesh/switchboard/internal/tracing"
	"github.com/switchboard-mesh/switchboard/registrar/internal/hub"
	"github.com/switchboard-mesh/switchboard/registrar/internal/view"
	"github.com/switchboard-mesh/switchboard/registrar/token"
	"github.com/switchboard-mesh/switchboard/registry"
)

// MaxWriteEndpoints caps the endpoints of one Register or Unregister request.
const MaxWriteEndpoints = 10000

// grpcService adapts a Registrar to the generated server interface.
type grpcService struct {
	registrarv1.UnimplementedRegistrarServer
	r *Registrar
}

// RegisterService registers the Registrar API on s, which must have been made with
// ServerOptions.
func (r *Registrar) RegisterService(s grpc.ServiceRegistrar) {
	desc := rpcinput.Service(&registrarv1.Registrar_ServiceDesc)
	desc.Streams = slices.Clone(desc.Streams)
	for i := range desc.Streams {
		switch desc.Streams[i].StreamName {
		case "WatchEndpoints":
			desc.Streams[i].Handler = watchHandler
		case "WatchEndpointsScoped":
			desc.Streams[i].Handler = watchScopedHandler
		}
	}
	s.RegisterService(desc, grpcService{r: r})
}

func (g grpcService) RegisterEndpoint(ctx context.Context, req *registrarv1.RegisterEndpointRequest) (*registrarv1.RegisterEndpointResponse, error) {
	ops, err := g.r.writeOps(req.GetEndpoints(), registry.OpRegister)
	if err != nil {
		return nil, err
	}
	if err := validSession(req.GetSession()); err != nil {
		return nil, err
	}
	v, held, err := g.r.acceptHeld(ctx, ops, g.r.sessionKey(ctx, req.GetSession()))
	if err != nil {
		return nil, err
	}
	return &registrarv1.RegisterEndpointResponse{Version: v.String(), Held: held}, nil
}

func (g grpcService) UnregisterEndpoint(ctx context.Context, req *registrarv1.UnregisterEndpointRequest) (*registrarv1.UnregisterEndpointResponse, error) {
	ops, err := g.r.writeOps(req.GetEndpoints(), registry.OpUnregister)
	if err != nil {
		return nil, err
	}
	v, _, err := g.r.acceptHeld(ctx, ops, "")
	if err != nil {
		return nil, err
	}
	return &registrarv1.UnregisterEndpointResponse{Version: v.String()}, nil
}

func (g grpcService) ListAllEndpoints(ctx context.Context, req *registrarv1.ListAllEndpointsRequest) (*registrarv1.ListAllEndpointsResponse, error) {
	f := endpoint.Filter{Cluster: req.GetCluster(), Service: req.GetService(), Protocol: req.GetProtocol(), Address: req.GetAddress()}
	if err := f.Validate(); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := g.r.mayRead(ctx); err != nil {
		return nil, err
	}
	if err := g.r.readyErr(); err != nil {
		return nil, err
	}
	if d := g.r.demand; d != nil && !d.holds(f) {
		return g.r.listBackend(ctx, f)
	}
	return listResponse(g.r.view.ListAll(f)), nil
}

// listBackend answers a listing of what this replica does not hold (--hold
// demanded) from the backend, at the snapshot's version.
func (r *Registrar) listBackend(ctx context.Context, f endpoint.Filter) (*registrarv1.ListAllEndpointsResponse, error) {
	at := r.view.Current()
	lctx, cancel := context.WithTimeout(ctx, r.cfg.BackendTimeout)
	defer cancel()
	eps, err := r.cfg.Backend.List(lctx, f)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "reading the registry: %v", err)
	}
	out := make([]*registryv1.Endpoint, len(eps))
	for i, e := range eps {
		out[i] = e.ToProto()
	}
	return &registrarv1.ListAllEndpointsResponse{Endpoints: out, Version: at.String()}, nil
}

// listResponse wraps a listing's wire form in a message: as unknown fields, which
// proto writes out as they are, and which the client decodes as the real ones.
func listResponse(raw []byte) *registrarv1.ListAllEndpointsResponse {
	resp := &registrarv1.ListAllEndpointsResponse{}
	resp.ProtoReflect().SetUnknown(raw)
	return resp
}

// The watch streams are served by handlers of their own instead of the generated
// ones (which the embedded UnimplementedRegistrarServer stands in for). An idle
// watch stream is its handler's goroutine, waiting, and what it costs is mostly
// that goroutine's stack: 4 KiB if the deepest call it ever made fit in it, 8 KiB
// for good otherwise (the runtime halves a waiting goroutine's stack only while a
// quarter of it holds what it uses plus an 800-byte guard, and gRPC's frames under
// a handler are already about 1.5 KiB). gRPC's receive and send paths do not fit.
// So the handler only waits: a sender (internal/hub) receives the first request,
// opens the watcher and sends; a scoped stream's later requests are read by a
// goroutine of its own.

// watchHandler serves WatchEndpoints.
func watchHandler(srv any, stream grpc.ServerStream) error {
	return srv.(grpcService).r.watchStream(stream, false)
}

// watchScopedHandler serves WatchEndpointsScoped: WatchEndpoints for a set of
// services the client may change on the same stream: a reader takes each later
// request as the new set.
func watchScopedHandler(srv any, stream grpc.ServerStream) error {
	return srv.(grpcService).r.watchStream(stream, true)
}

// watchStream is a watch handler's goroutine: it has a sender open the stream's
// watcher, then waits for the stream to end. When its context ends first, it has
// the watcher run once more to see that, so that no send is under way when the
// handler returns.
func (r *Registrar) watchStream(stream grpc.ServerStream, exact bool) error {
	w := &hub.Watcher{Stream: stream, Ctx: stream.Context(), Exact: exact}
	opened, err := r.hub.Serve(w)
	if r.demand != nil {
		r.demand.closed(w) // demand.go
	}
	if opened { // undo what openStream counted
		r.live.closed(w, time.Now()) // liveness.go
		r.noteClose(w)               // inspect.go
		r.m.connected.Dec()
		r.watchers.Add(-1)
	}
	return err
}

// readScopes reads a scoped stream's later requests until the stream ends; each
// is the watcher's new set of services.
func readScopes(w *hub.Watcher, cancel context.CancelCauseFunc) {
	for {
		req, err := recvWatchRequest(w.Stream)
		if err != nil {
			// The client's half-close (EOF) ends only the requests, not the watch.
			if !errors.Is(err, io.EOF) {
				cancel(err)
				w.WakeFor(hub.WakeEnded)
			}
			return
		}
		sc, err := scopeOf(req, true)
		if err != nil {
			cancel(err)
			w.WakeFor(hub.WakeEnded)
			return
		}
		// The latest set wins: one the watcher has not taken yet is replaced.
		select {
		case <-w.Rescope:
		default:
		}
		w.Rescope <- sc
		w.WakeFor(hub.WakeRescope)
	}
}

// recvWatchRequest receives a watch request undecoded and decodes it.
func recvWatchRequest(stream grpc.ServerStream) (watchRequest, error) {
	var b []byte
	if err := stream.RecvMsg(&b); err != nil {
		return watchRequest{}, err
	}
	return decodeWatchRequest(b)
}

// recvFirst receives a watch stream's first request on a sender, counted as a send
// under way: a client that opens a stream and sends nothing holds the sender.
func recvFirst(w *hub.Watcher) (watchRequest, error) {
	w.BeginSend()
	defer w.EndSend()
	return recvWatchRequest(w.Stream)
}

// openStream receives a watch stream's first request, validates it, waits until
// the registrar is ready and opens w (openWatcher); a sender runs it. A scoped
// stream (exact) gets the reader of its later requests.
func (r *Registrar) openStream(w *hub.Watcher) error {
	req, err := recvFirst(w)
	if err != nil {
		return err
	}
	sc, err := scopeOf(req, w.Exact)
	if err != nil {
		return err
	}
	if c := req.GetClusterName(); c != "" {
		if err := endpoint.ValidateName("cluster_name", c); err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
	}
	if err := validNode(req.GetNodeName()); err != nil {
		return err
	}
	if err := validSession(req.GetSession()); err != nil {
		return err
	}
	ctx := w.Ctx
	if err := r.mayRead(ctx); err != nil {
		return err
	}
	if err := r.waitReady(ctx); err != nil {
		return err
	}
	w.ID, w.Node, w.Scope, w.Batches = r.ids.Add(1), req.GetNodeName(), sc, req.GetAcceptBatches()
	w.Zipped = req.GetAcceptCompressed()
	if p, ok := peer.FromContext(ctx); ok {
		w.Peer = p.Addr
	}
	if w.Exact {
		var cancel context.CancelCauseFunc
		w.Ctx, cancel = context.WithCancelCause(ctx)
		w.Rescope = make(chan hub.Scope, 1)
		go readScopes(w, cancel)
	}
	if r.demand != nil && w.Services != nil {
		if err := r.demand.want(ctx, w, w.Services); err != nil { // demand.go
			return err
		}
	}
	// The session's stream counts before anything is sent on it: a client takes
	// its first message to mean that its writes are held from then on.
	if session := r.sessionKey(ctx, req.GetSession()); session != "" {
		r.live.opened(session, w) // liveness.go
	}
	r.openWatcher(w, req.GetLastVersion(), req.GetClusterName())
	return nil
}

// openWatcher counts w (filled in by openStream) among the connected agents and
// sets its cursor from the agent's last_version.
func (r *Registrar) openWatcher(w *hub.Watcher, lastVersion, cluster string) {
	w.Start(lastVersion)
	r.noteOpen(w, cluster) // inspect.go
	r.watchers.Add(1)
	r.m.connected.Inc()
	if r.log.Enabled(context.Background(), slog.LevelDebug) {
		r.logStart(w, lastVersion)
	}
}

// logStart logs a new watch stream. No logger With the watcher's attributes: it
// would live as long as the stream.
func (r *Registrar) logStart(w *hub.Watcher, lastVersion string) {
	r.log.Debug("watch started", "watcher", w.ID, "node", w.Node, "peer", w.PeerString(), "last_version", lastVersion, "resumed", w.Resumed())
}

// waitReady waits until the registrar is ready, ctx ends or shutdown begins.
func (r *Registrar) waitReady(ctx context.Context) error {
	select {
	case <-r.view.Ready():
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-r.closing:
		return errShuttingDown
	}
}

// MaxWatchServices caps the services one scoped watch names.
const MaxWatchServices = 10000

// scopeOf reads the set of services a watch request names. exact is true for
// WatchEndpointsScoped, where naming none means none, not all.
func scopeOf(req watchRequest, exact bool) (hub.Scope, error) {
	names := req.GetServices()
	switch {
	case req.GetAllServices() && len(names) > 0:
		return hub.Scope{}, status.Error(codes.InvalidArgument, "services: must be empty with all_services")
	case req.GetAllServices() || (len(names) == 0 && !exact):
		return hub.Scope{ID: req.GetScopeId()}, nil
	}
	if len(names) > MaxWatchServices {
		return hub.Scope{}, status.Errorf(codes.InvalidArgument, "services: %d services in one watch, at most %d", len(names), MaxWatchServices)
	}
	set := make(map[string]struct{}, len(names))
	for i, n := range names {
		if err := endpoint.ValidateName(fmt.Sprintf("services[%d]", i), n); err != nil {
			return hub.Scope{}, status.Error(codes.InvalidArgument, err.Error())
		}
		set[n] = struct{}{}
	}
	return hub.Scope{Services: set, ID: req.GetScopeId()}, nil
}

var errShuttingDown = status.Error(codes.Unavailable, "registrar shutting down; reconnect to another replica")

// validNode checks the optional node name of a watch request.
func validNode(v string) error {
	const field = "node_name"
	if v == "" {
		return nil
	}
	// Node names are host names in practice; only reject what cannot be one.
	for _, c := range v {
		if c <= ' ' || c == 0x7f {
			return status.Errorf(codes.InvalidArgument, "%s %q: must not contain spaces or control characters", field, v)
		}
	}
	if len(v) > 253 {
		return status.Errorf(codes.InvalidArgument, "%s: longer than 253 characters", field)
	}
	return nil
}

// writeOps validates a write request: every endpoint must be valid (registrations in
// full, unregistrations by key) and of this registrar's cluster. The error names the
// endpoint's position and the field.
func (r *Registrar) writeOps(in []*registryv1.Endpoint, kind registry.OpKind) ([]registry.Op, error) {
	switch {
	case len(in) == 0:
		return nil, status.Error(codes.InvalidArgument, "endpoints: at least one endpoint is required")
	case len(in) > MaxWriteEndpoints:
		return nil, status.Errorf(codes.InvalidArgument, "endpoints: %d endpoints in one request, at most %d", len(in), MaxWriteEndpoints)
	}
	ops := make([]registry.Op, len(in))
	for i, p := range in {
		e, err := toEndpoint(p, kind)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "endpoints[%d]: %v", i, err)
		}
		if !r.cfg.accepts(e.Cluster) {
			return nil, status.Errorf(codes.PermissionDenied,
				"endpoints[%d].cluster %q: this registrar accepts writes for cluster %q only", i, e.Cluster, r.cfg.Cluster)
		}
		ops[i] = registry.Op{Kind: kind, Endpoint: e}
	}
	return ops, nil
}

// defaultPriority is the priority of an endpoint registered without one.
const defaultPriority = 1

func toEndpoint(p *registryv1.Endpoint, kind registry.OpKind) (endpoint.Endpoint, error) {
	if kind == registry.OpRegister {
		e, err := endpoint.FromProtoUnchecked(p)
		if err != nil {
			return e, err
		}
		// proto3 sends an unset priority as 0, which no endpoint may have: it means
		// the default, as an absent --priority or manifest key does.
		if e.Priority == 0 {
			e.Priority = defaultPriority
		}
		return e, e.Validate()
	}
	e, err := endpoint.FromProtoUnchecked(p)
	if err != nil {
		return e, err
	}
	k := e.Key()
	if err := k.Validate(); err != nil {
		return e, err
	}
	return k.Endpoint(), nil
}

func (r *Registrar) accept(ctx context.Context, ops []registry.Op) (v token.Version, err error) {
	var tr *writeTrace
	if tracing.Enabled() { // tracing.go
		var end func(token.Version, error)
		ctx, tr, end = traceAccept(ctx, ops)
		defer func() { end(v, err) }()
	}
	select {
	case <-r.closing:
		return token.Version{}, errShuttingDown
	default:
	}
	var origin view.Trace
	if tr != nil { // not a nil *writeTrace in an interface: untraced is nil
		origin = tr
	}
	v, err = r.view.Accept(ops, r.writeCheck(ctx), origin)
	if errors.Is(err, view.ErrQueueFull) {
		return v, status.Error(codes.ResourceExhausted, fmt.Sprintf("%v; retry later", err))
	}
	return v, err
}

// writeCheck returns the authorization check of the caller's writes, nil when the
// registrar does not authorize writes.
func (r *Registrar) writeCheck(ctx context.Context) func(int, registry.Op, *endpoint.Endpoint) error {
	a := r.cfg.Authorizer
	if a == nil {
		return nil
	}
	who, ok := a.callerOf(ctx)
	switch {
	case !ok:
		return r.refuseAll("writes need a client certificate that names the writer")
	case who.identity == "":
		return r.refuseAll("the client certificate names no identity: the registrar takes " + a.wants())
	}
	return func(i int, op registry.Op, cur *endpoint.Endpoint) error {
		d := a.check(who, op, cur)
		if d == nil {
			return nil
		}
		r.m.denied.WithLabelValues(d.reason).Inc()
		r.log.Warn("refused a write", "identity", who.identity, "op", op.Kind.String(), "endpoint", op.Endpoint.Key().String(), "reason", d.reason)
		return status.Errorf(codes.PermissionDenied, "endpoints[%d]: %s", i, d.msg)
	}
}

// refuseAll is the check of a caller without an identity: it may write nothing.
func (r *Registrar) refuseAll(why string) func(int, registry.Op, *endpoint.Endpoint) error {
	return func(i int, op registry.Op, _ *endpoint.Endpoint) error {
		r.m.denied.WithLabelValues("no_identity").Inc()
		r.log.Warn("refused a write", "op", op.Kind.String(), "endpoint", op.Endpoint.Key().String(), "reason", "no_identity", "why", why)
		return status.Errorf(codes.PermissionDenied, "endpoints[%d]: %s (rule: identity)", i, why)
	}
}

// mayRead refuses a list or watch by an identity the policy's readers leave out.
func (r *Registrar) mayRead(ctx context.Context) error {
	a := r.cfg.Authorizer
	if a == nil || len(a.policy.Readers) == 0 {
		return nil
	}
	who, ok := a.callerOf(ctx)
	if ok && who.identity != "" && a.policy.mayRead(who.identity) {
		return nil
	}
	r.m.denied.WithLabelValues("not_a_reader").Inc()
	if who.identity == "" {
		return status.Errorf(codes.PermissionDenied, "the client certificate names no identity, and the write policy names its readers: the registrar takes %s", a.wants())
	}
	return status.Errorf(codes.PermissionDenied, "identity %q may not read: the write policy's readers do not include it", who.identity)
}

func (r *Registrar) readyErr() error {
	select {
	case <-r.view.Ready():
		return nil
	case <-r.closing:
		return errShuttingDown
	default:
		return status.Error(codes.Unavailable, "registrar has not completed its first sync with the registry backend")
	}
}
