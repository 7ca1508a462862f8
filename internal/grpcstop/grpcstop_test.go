package grpcstop_test

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/internal/grpcstop"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs a gRPC server with the health service on loopback and returns a client.
func serve(t *testing.T) (*grpc.Server, healthpb.HealthClient) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() { srv.Stop(); <-served })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return srv, healthpb.NewHealthClient(conn)
}

// A call that never ends on its own (a health Watch stream) holds a graceful stop
// forever; Stop cuts it once the timeout has passed.
func TestStopCutsCallsThatOutliveTheTimeout(t *testing.T) {
	srv, client := serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil { // the stream is open on the server
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() {
		grpcstop.Stop(srv, 50*time.Millisecond)
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("Stop did not return: the open stream held the graceful stop")
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("the open stream after Stop: %v, want it cut (Unavailable)", err)
	}
}

// With nothing open, the graceful stop completes on its own and the server takes
// no more calls.
func TestStopIsGracefulWithNothingOpen(t *testing.T) {
	srv, client := serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() {
		grpcstop.Stop(srv, time.Hour)
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("Stop waited for its timeout with no call open")
	}
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(false)); err == nil {
		t.Fatal("a call after Stop succeeded")
	}
}
