package dataplane_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/dataplane"
	"github.com/switchboard-mesh/switchboard/dataplane/memdp"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
	"github.com/switchboard-mesh/switchboard/internal/syncbuf"
)

// TestStandbyRefusalEndsTheSession: a standby refuses the control channel as it
// opens. The node's first Send may then find the stream ended and get io.EOF,
// which carries no hint; the session must end with the standby's status (what
// Recv returns), so that every refusal is seen as one and its hint followed.
func TestStandbyRefusalEndsTheSession(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	st, err := status.New(codes.Unavailable, "this replica is a standby").WithDetails(&errdetails.ErrorInfo{
		Reason: dataplane.NotLeaderReason, Metadata: map[string]string{dataplane.LeaderHintKey: lis.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	standby := grpc.NewServer(grpc.StreamInterceptor(func(any, grpc.ServerStream, *grpc.StreamServerInfo, grpc.StreamHandler) error {
		return st.Err()
	}))
	controllerv1.RegisterControllerServiceServer(standby, controllerv1.UnimplementedControllerServiceServer{})
	go func() { _ = standby.Serve(lis) }()
	t.Cleanup(standby.Stop)

	log := &syncbuf.Buffer{}
	c, err := dataplane.New(dataplane.Config{NodeID: "n1", Group: "g", Datapath: memdp.New(), Targets: []string{lis.Addr().String()},
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
		Backoff:     dataplane.Backoff{Base: time.Millisecond, Max: 2 * time.Millisecond},
		Logger:      slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of its context's end")
		}
	}()
	const sessions = 200
	ended := func() []string {
		var out []string
		for l := range strings.Lines(log.String()) {
			if strings.Contains(l, "control-plane session ended") {
				out = append(out, l)
			}
		}
		return out
	}
	waitFor(t, ctx, func() bool { return len(ended()) >= sessions })
	for _, l := range ended()[:sessions] {
		if !strings.Contains(l, "standby") {
			t.Fatalf("a standby's refusal ended the session as %q, want its status (standby)", l)
		}
	}
}
