package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
	"github.com/switchboard-mesh/switchboard/internal/codewords"
	"github.com/switchboard-mesh/switchboard/internal/tracing"
	"github.com/switchboard-mesh/switchboard/registrar/token"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Client is a registry.Registry and registry.Watcher over registrar replicas: the
// registrar driver behind a registry.Front, which validates, admits and counts every
// call and keeps watches consistent. It is safe for concurrent use.
type Client struct {
	*registry.Front
	d *driver
}

// driver is the registrar backend's driver. It is safe for concurrent use.
type driver struct {
	opts  Options
	log   *slog.Logger
	conn  *grpc.ClientConn
	api   registrarv1.RegistrarClient
	cache *cache
	// writeMu orders writes: Apply calls share it, and each attempt to re-send
	// writes a dead replica lost takes it alone, so that a re-send and a newer
	// write to the same key never race.
	writeMu sync.RWMutex

	ctx        context.Context
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	reconnects atomic.Uint64
	lost       lastError // why the watch stream last ended (inspect.go)
	// interest is what a scoped client's users need (guarded by cache.mu); a
	// change pokes scopeKick (scope.go).
	interest  interest
	scopeKick chan struct{}
	source    io.Closer // the SVID source of a client opened by name, if any
	held      *held     // what the registrar keeps alive for this client's session
}

var (
	_ registry.WatchDriver  = (*driver)(nil)
	_ registry.CachedLister = (*driver)(nil)
)

// maxWriteChunk keeps one write request well below the registrar's per-request cap.
const maxWriteChunk = 1000

// New connects lazily to the registrar and starts the watch stream; it does not wait
// for it (see WaitReady).
func New(opts Options) (*Client, error) {
	d, err := newDriver(opts)
	if err != nil {
		return nil, err
	}
	return &Client{Front: registry.NewFront("registrar", d), d: d}, nil
}

// WaitReady waits until the first snapshot has arrived, so reads come from a whole
// cache.
func (c *Client) WaitReady(ctx context.Context) error { return c.d.waitReady(ctx) }

func newDriver(opts Options) (*driver, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	conn, err := dial(opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &driver{
		opts: opts, log: opts.Logger, conn: conn, api: registrarv1.NewRegistrarClient(conn),
		cache: newCache(time.Now), ctx: ctx, cancel: cancel,
		interest: newInterest(), scopeKick: make(chan struct{}, 1), held: newHeld(),
	}
	if !opts.OneShot {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.run(ctx)
		}()
	}
	return c, nil
}

// dial builds the connection: every address behind one channel that uses one at a
// time (pick_first) and fails over to the next.
func dial(o Options) (*grpc.ClientConn, error) {
	var id [6]byte
	_, _ = rand.Read(id[:])
	r := manual.NewBuilderWithScheme("registrar-" + hex.EncodeToString(id[:]))
	addrs := make([]resolver.Address, len(o.Addresses))
	for i, a := range o.Addresses {
		addrs[i] = resolver.Address{Addr: a}
	}
	r.InitialState(resolver.State{Addresses: addrs})
	creds := insecure.NewCredentials()
	if o.TLS != nil {
		creds = credentials.NewTLS(o.TLS)
	}
	lb := `{"loadBalancingConfig":[{"pick_first":{"shuffleAddressList":true}}]}`
	if o.InOrder {
		lb = `{"loadBalancingConfig":[{"pick_first":{}}]}`
	}
	dopts := append([]grpc.DialOption{
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultServiceConfig(lb),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 15 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: o.BackoffMin, Multiplier: 2, Jitter: 1, MaxDelay: o.BackoffMax},
			MinConnectTimeout: 5 * time.Second,
		}),
		// A snapshot list before the stream is up can be large.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1 << 30)),
	}, o.DialOptions...)
	// With tracing on, write and list calls carry the caller's trace context
	// (tracing.go); with it off this adds nothing.
	dopts = append(dopts, tracing.DialOptions(untracedMethods...)...)
	conn, err := grpc.NewClient(r.Scheme()+":///registrar", dopts...)
	if err != nil {
		return nil, fmt.Errorf("registrar client: %w", err)
	}
	return conn, nil
}

func (c *driver) waitReady(ctx context.Context) error {
	select {
	case <-c.cache.readyCh:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("registrar client: waiting for the first snapshot: %w", ctx.Err())
	case <-c.ctx.Done():
		return registry.ErrClosed
	}
}

// Apply sends the batch to the registrar (registrations and removals as one request
// each) and shows it in the cache at once. Registrations and removals are accepted or
// refused as a whole; if one is refused after the other was accepted, the error is an
// *registry.ApplyError naming the refused keys.
func (c *driver) Apply(ctx context.Context, ops []registry.Op) error {
	coalesced := make([]registry.Op, len(ops))
	for i, op := range ops {
		op.Endpoint = op.Endpoint.Clone() // the cache keeps it
		coalesced[i] = op
	}
	c.wroteServices(coalesced)
	var failed []endpoint.Key
	var firstErr error
	tr := writeTrace(ctx) // remembered with the writes, for a re-send (tracing.go)
	c.writeMu.RLock()
	defer c.writeMu.RUnlock()
	// A registration the registrar already holds, unchanged, on the open stream
	// needs no call (held.go).
	gen, _ := c.held.current()
	toSend := c.held.absorbed(coalesced)
	for _, chunk := range requests(toSend, func(op registry.Op) registry.Op { return op }) {
		v, isHeld, err := c.send(ctx, chunk)
		if err != nil {
			for _, op := range chunk {
				failed = append(failed, op.Endpoint.Key())
			}
			firstErr = cmpErr(firstErr, err)
			continue
		}
		c.held.wrote(chunk, isHeld, gen)
		c.cache.wroteTraced(chunk, v, tr)
	}
	switch {
	case firstErr == nil:
		return nil
	case len(failed) == len(coalesced):
		return firstErr
	default:
		return &registry.ApplyError{Failed: failed, Err: firstErr}
	}
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// send makes one write call for ops of one kind, and reports whether the registrar
// holds the registrations for this client's session (held.go).
func (c *driver) send(ctx context.Context, ops []registry.Op) (token.Version, bool, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	eps := make([]*registryv1.Endpoint, len(ops))
	for i, op := range ops {
		eps[i] = op.Endpoint.ToProto()
	}
	var v string
	var isHeld bool
	var err error
	// Wait for a connection rather than fail during a failover; the deadline bounds it.
	// A one-shot caller is better told at once that nothing answers.
	wait := grpc.WaitForReady(!c.opts.OneShot)
	if ops[0].Kind == registry.OpRegister {
		var resp *registrarv1.RegisterEndpointResponse
		resp, err = c.api.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: eps, Session: c.held.session}, wait)
		v, isHeld = resp.GetVersion(), resp.GetHeld()
	} else {
		var resp *registrarv1.UnregisterEndpointResponse
		resp, err = c.api.UnregisterEndpoint(ctx, &registrarv1.UnregisterEndpointRequest{Endpoints: eps}, wait)
		v = resp.GetVersion()
	}
	if err != nil {
		return token.Version{}, false, c.callError("write", err)
	}
	tv, err := token.Parse(v)
	if err != nil {
		return token.Version{}, false, fmt.Errorf("registrar client: write response: %w", err)
	}
	return tv, isHeld, nil
}

// callCtx bounds one call by RequestTimeout, or the caller's earlier deadline.
func (c *driver) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.opts.RequestTimeout)
}

// callError maps a gRPC status to the registry's errors: bad input matches
// endpoint.ErrInvalid, and conditions worth retrying match registry.ErrUnavailable.
func (c *driver) callError(what string, err error) error {
	if c.opts.OneShot {
		// The process ends with this one line: say where it went.
		what += " to " + strings.Join(c.opts.Addresses, ",")
	}
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.InvalidArgument:
		return fmt.Errorf("registrar %s: %w: %s", what, endpoint.ErrInvalid, st.Message())
	case codes.Unavailable, codes.ResourceExhausted, codes.DeadlineExceeded, codes.Aborted:
		hint := ""
		if c.opts.TLS != nil && st.Code() != codes.ResourceExhausted && !strings.Contains(st.Message(), "tls:") {
			// With TLS 1.3 a refused client certificate often surfaces only as a
			// dropped connection; say what to check.
			hint = " (TLS is on: if the registrar is up, check that it accepts this agent's certificate and trust domain; its log names the reason)"
		}
		return fmt.Errorf("registrar %s: %w: %s%s", what, registry.ErrUnavailable, codewords.Say(st.Code(), st.Message()), hint)
	case codes.Canceled:
		return fmt.Errorf("registrar %s: %w", what, context.Canceled)
	}
	return &callStatusError{what: what, st: st}
}

// callStatusError is a refusal the registry's errors have no name for (permission
// denied, not found, ...). It carries the status, so that callers find it
// (status.FromError, errors.As) and the CLI maps it as it maps every server's, and
// reads "registrar write: permission denied: …" rather than gRPC's code name.
type callStatusError struct {
	what string
	st   *status.Status
}

func (e *callStatusError) Error() string {
	return fmt.Sprintf("registrar %s: %s", e.what, codewords.Say(e.st.Code(), e.st.Message()))
}

func (e *callStatusError) GRPCStatus() *status.Status { return e.st }

// ListCached reads from the cache, if it holds what f asks for. The returned slice may
// be shared with the cache and with other callers: it must not be modified (clone it
// first). This is what makes a cached read free.
func (c *driver) ListCached(f endpoint.Filter) ([]endpoint.Endpoint, bool) { return c.cache.list(f) }

// List reads from the cache; before the first snapshot, or for what a scoped client
// does not hold, it asks the registrar.
func (c *driver) List(ctx context.Context, f endpoint.Filter) ([]endpoint.Endpoint, error) {
	if eps, ok := c.cache.list(f); ok {
		return eps, nil
	}
	return c.listRemote(ctx, f)
}

func (c *driver) listRemote(ctx context.Context, f endpoint.Filter) ([]endpoint.Endpoint, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	eps, _, err := ListAll(ctx, c.conn, f)
	if err != nil { // a response that does not decode is an Internal status naming the field
		return nil, c.callError("list", err)
	}
	return c.cache.overlaid(eps), nil
}

// Close stops the stream and closes the connection. The Front has ended every call
// and watch before.
func (c *driver) Close() error {
	c.cancel()
	c.wg.Wait()
	_ = c.conn.Close()
	if c.source != nil {
		_ = c.source.Close()
	}
	return nil
}

var errStreamEnded = errors.New("watch stream ended")
