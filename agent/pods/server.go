package pods

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	cniv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/cni/v1"
	"github.com/switchboard-mesh/switchboard/internal/grpcstop"
	"github.com/switchboard-mesh/switchboard/internal/rpcinput"
)

// ServerOptions configure a Server.
type ServerOptions struct {
	// Nudge is called after every change to the records; it must not block.
	Nudge  func()
	Logger *slog.Logger
	// Metrics, when set, receives the request series.
	Metrics *Metrics
	// StopTimeout bounds the graceful stop when Serve's context ends; default 5s.
	StopTimeout time.Duration
}

// Server is the agent's CNI server (cniv1.PodNetworkServer): it validates what the
// CNI plugin reports, records it in a Store and returns. It never waits on the
// registry backend; the reconciler publishes afterwards.
type Server struct {
	cniv1.UnimplementedPodNetworkServer
	store *Store
	opts  ServerOptions
	log   *slog.Logger
}

var _ cniv1.PodNetworkServer = (*Server)(nil)

// NewServer returns a server that records into store.
func NewServer(store *Store, o ServerOptions) *Server {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Nudge == nil {
		o.Nudge = func() {}
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 5 * time.Second
	}
	return &Server{store: store, opts: o, log: o.Logger}
}

// observe records a request's latency and result; err points at the handler's
// named result so that a deferred call sees the final error.
func (s *Server) observe(method string, start time.Time, err *error) {
	code := status.Code(*err)
	s.opts.Metrics.request(method, code.String(), time.Since(start))
	if code == codes.InvalidArgument {
		s.opts.Metrics.invalidRequest(method)
		s.log.Warn("invalid CNI request refused", "method", method, "err", *err)
	}
}

// invalid is the status of a request that broke a rule.
func invalid(err error) error { return status.Error(codes.InvalidArgument, err.Error()) }

// Add records an attachment. Nothing is recorded when the request is invalid, or
// when its caller gave up (ctx is done) before the attachment was on disk: the
// plugin did not learn that it was recorded, a DEL may already have come and gone,
// and the reconciler registers such a pod from status.podIPs.
func (s *Server) Add(ctx context.Context, req *cniv1.AddRequest) (_ *cniv1.AddResponse, err error) {
	defer s.observe("add", time.Now(), &err)
	rec := Record{Ref: refOf(req.GetRef()), Pod: podOf(req.GetPod()), Netns: req.GetNetns(), IPs: req.GetIps(), Created: time.Now()}
	if err := rec.normalize(); err != nil {
		return nil, invalid(err)
	}
	if err := s.store.PutContext(ctx, rec); err != nil {
		s.opts.Nudge() // the record may have been visible for a moment
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
			s.log.Warn("attachment not recorded: the CNI ADD's caller gave up", "pod", rec.Pod.String(), "container", rec.Ref.ContainerID, "err", err)
			return nil, status.FromContextError(cerr).Err()
		}
		s.log.Error("cannot record attachment", "pod", rec.Pod.String(), "container", rec.Ref.ContainerID, "err", err)
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	s.log.Info("attachment recorded", "pod", rec.Pod.String(), "uid", rec.Pod.UID, "network", rec.Ref.Network,
		"container", rec.Ref.ContainerID, "ifname", rec.Ref.IfName, "ips", rec.IPs)
	s.opts.Nudge()
	return &cniv1.AddResponse{}, nil
}

// Del forgets an attachment; found=false when it was not recorded.
func (s *Server) Del(_ context.Context, req *cniv1.DelRequest) (_ *cniv1.DelResponse, err error) {
	defer s.observe("del", time.Now(), &err)
	ref := refOf(req.GetRef())
	if err := ref.validate("ref."); err != nil {
		return nil, invalid(err)
	}
	found, err := s.store.Delete(ref)
	if err != nil {
		s.log.Error("cannot forget attachment", "container", ref.ContainerID, "err", err)
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	if found {
		s.log.Info("attachment forgotten", "pod", podOf(req.GetPod()).String(), "network", ref.Network, "container", ref.ContainerID, "ifname", ref.IfName)
		s.opts.Nudge()
	}
	return &cniv1.DelResponse{Found: found}, nil
}

// Check answers NotFound when the attachment is not recorded and
// FailedPrecondition when it is recorded with other addresses.
func (s *Server) Check(_ context.Context, req *cniv1.CheckRequest) (_ *cniv1.CheckResponse, err error) {
	defer s.observe("check", time.Now(), &err)
	ref := refOf(req.GetRef())
	if err := ref.validate("ref."); err != nil {
		return nil, invalid(err)
	}
	ips, err := canonicalIPs("ips", req.GetIps())
	if err != nil {
		return nil, invalid(err)
	}
	rec, ok := s.store.Get(ref)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "attachment %s/%s/%s is not recorded", ref.Network, ref.ContainerID, ref.IfName)
	}
	if !sameSet(rec.IPs, ips) {
		return nil, status.Errorf(codes.FailedPrecondition, "attachment %s/%s/%s is recorded with addresses %v, not %v",
			ref.Network, ref.ContainerID, ref.IfName, rec.IPs, ips)
	}
	return &cniv1.CheckResponse{}, nil
}

// GC forgets every attachment of the network that the runtime no longer lists.
func (s *Server) GC(_ context.Context, req *cniv1.GCRequest) (_ *cniv1.GCResponse, err error) {
	defer s.observe("gc", time.Now(), &err)
	if req.GetNetwork() == "" {
		return nil, invalid(&FieldError{"network", "", "is required"})
	}
	valid := make([]Ref, len(req.GetValid()))
	for i, v := range req.GetValid() {
		valid[i] = refOf(v)
	}
	removed, err := s.store.GC(req.GetNetwork(), valid)
	if removed > 0 {
		s.log.Info("stale attachments forgotten (CNI GC)", "network", req.GetNetwork(), "removed", removed)
		s.opts.Nudge()
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	return &cniv1.GCResponse{Removed: int32(removed)}, nil
}

// Status answers OK while the store's directory is there to record into.
func (s *Server) Status(context.Context, *cniv1.StatusRequest) (_ *cniv1.StatusResponse, err error) {
	defer s.observe("status", time.Now(), &err)
	if _, err := os.Stat(s.store.Dir()); err != nil {
		return nil, status.Errorf(codes.Unavailable, "attachment records: %v", err)
	}
	return &cniv1.StatusResponse{}, nil
}

func refOf(r *cniv1.AttachmentRef) Ref {
	return Ref{Network: r.GetNetwork(), ContainerID: r.GetContainerId(), IfName: r.GetIfname()}
}

func podOf(p *cniv1.Pod) PodRef {
	return PodRef{Namespace: p.GetNamespace(), Name: p.GetName(), UID: p.GetUid()}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// Serve serves the CNI API on a Unix socket at socketPath until ctx ends, then stops
// gracefully (within StopTimeout) and removes the socket. It creates the socket's
// directory (0755), replaces a stale socket left by an agent that died, and makes
// the socket 0660: the CNI plugin runs as root, nothing else on the node may record
// attachments.
func (s *Server) Serve(ctx context.Context, socketPath string) error {
	ln, err := listenUnix(socketPath)
	if err != nil {
		return fmt.Errorf("cni server: %w", err)
	}
	gs := grpc.NewServer(grpc.ForceServerCodecV2(codec{encoding.GetCodecV2("proto")}))
	// rpcinput: a request with invalid UTF-8 is InvalidArgument naming the field,
	// not gRPC's Internal.
	gs.RegisterService(rpcinput.Service(&cniv1.PodNetwork_ServiceDesc), s)
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(ln) }()
	s.log.Info("CNI server listening", "socket", socketPath)
	select {
	case err := <-errc:
		gs.Stop() // releases what the server still holds; it accepts nothing more
		s.removeSocket(socketPath)
		return fmt.Errorf("cni server: %w", err)
	case <-ctx.Done():
	}
	grpcstop.Stop(gs, s.opts.StopTimeout)
	<-errc
	s.removeSocket(socketPath)
	return nil
}

func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// removeStale removes a socket file nobody serves: an agent killed without cleanup
// leaves one, and listening on it would fail. Anything else at the path (a file, a
// directory, a socket a live process answers on) is left alone and reported.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("%s: another process serves this socket", path)
	}
	return os.Remove(path)
}

// removeSocket removes the socket on the way out, so that the plugin finds no
// socket rather than a dead one. The listener usually unlinked it already.
func (s *Server) removeSocket(path string) {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("cannot remove the CNI socket", "socket", path, "err", err)
	}
}

// codec is gRPC's proto codec with rpcinput's decoding (see rpcinput.Unmarshal).
type codec struct{ proto encoding.CodecV2 }

func (c codec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	return rpcinput.Unmarshal(c.proto, data, v)
}

func (codec) Name() string { return "proto" }
