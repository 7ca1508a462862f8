package tlstest

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/spiffe/go-spiffe/v2/proto/spiffe/workload"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// WorkloadAPI serves the SPIFFE Workload API on a unix socket, handing every caller
// one X.509 SVID and the CA's bundle, as a SPIRE agent would. It lets tests run the
// real go-spiffe client path without a SPIRE deployment.
type WorkloadAPI struct {
	srv  *grpc.Server
	lis  net.Listener
	path string
}

// ServeWorkloadAPI starts serving at socketPath (a path short enough for a unix
// socket: keep it under /tmp) the SVID leaf with id spiffeID, issued by ca.
func ServeWorkloadAPI(socketPath, spiffeID string, leaf *Leaf, ca *CA) (*WorkloadAPI, error) {
	key, err := x509.MarshalPKCS8PrivateKey(leaf.Key)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("unix", socketPath)
	if err != nil {
		return nil, fmt.Errorf("workload API: %w", err)
	}
	w := &WorkloadAPI{srv: grpc.NewServer(), lis: lis, path: socketPath}
	td := leaf.Cert.URIs
	if len(td) != 1 {
		lis.Close()
		return nil, errors.New("workload API: the leaf must carry exactly one SPIFFE ID")
	}
	workload.RegisterSpiffeWorkloadAPIServer(w.srv, &workloadServer{
		svid: &workload.X509SVID{SpiffeId: spiffeID, X509Svid: leaf.Cert.Raw, X509SvidKey: key, Bundle: ca.Cert.Raw},
		td:   "spiffe://" + td[0].Host,
		ca:   ca.Cert.Raw,
	})
	go func() { _ = w.srv.Serve(lis) }()
	return w, nil
}

// Addr is the socket address in the form go-spiffe expects.
func (w *WorkloadAPI) Addr() string { return "unix://" + w.path }

// Stop ends the server and removes the socket.
func (w *WorkloadAPI) Stop() {
	w.srv.Stop()
	_ = os.Remove(w.path)
}

type workloadServer struct {
	workload.UnimplementedSpiffeWorkloadAPIServer
	svid *workload.X509SVID
	td   string
	ca   []byte
}

// checkHeader enforces the header every Workload API client must send, as SPIRE does.
func checkHeader(md metadata.MD) error {
	if v := md.Get("workload.spiffe.io"); len(v) != 1 || v[0] != "true" {
		return status.Error(codes.InvalidArgument, "security header missing from request")
	}
	return nil
}

func (s *workloadServer) FetchX509SVID(_ *workload.X509SVIDRequest, stream grpc.ServerStreamingServer[workload.X509SVIDResponse]) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	if err := checkHeader(md); err != nil {
		return err
	}
	if err := stream.Send(&workload.X509SVIDResponse{Svids: []*workload.X509SVID{s.svid}}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (s *workloadServer) FetchX509Bundles(_ *workload.X509BundlesRequest, stream grpc.ServerStreamingServer[workload.X509BundlesResponse]) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	if err := checkHeader(md); err != nil {
		return err
	}
	if err := stream.Send(&workload.X509BundlesResponse{Bundles: map[string][]byte{s.td: s.ca}}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}
