package cni

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	cniv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/cni/v1"
)

// Dialer connects to the agent's PodNetwork service on socket. The Closer releases
// the connection once the call is done.
type Dialer func(socket string) (cniv1.PodNetworkClient, io.Closer, error)

// DialAgent is the Dialer the plugin uses: gRPC over the Unix socket without
// transport security, because the socket's file mode is the access control (only
// root, which runs the runtime and its plugins, may connect). The connection is made
// by the first call, so the call's deadline bounds dialling as well.
func DialAgent(socket string) (cniv1.PodNetworkClient, io.Closer, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("dial %s: %w", socket, err)
	}
	return cniv1.NewPodNetworkClient(conn), conn, nil
}

// errDial marks a failure to set up the connection at all.
var errDial = errors.New("cannot connect to the agent")

// call runs fn against the agent at cfg.AgentSocket within cfg.Timeout, which bounds
// the dial and the call together.
func (p *Plugin) call(cfg *Config, fn func(context.Context, cniv1.PodNetworkClient) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	dial := p.Dial
	if dial == nil {
		dial = DialAgent
	}
	client, closer, err := dial(cfg.AgentSocket)
	if err != nil {
		return fmt.Errorf("%w: %w", errDial, err)
	}
	defer closer.Close()
	return fn(ctx, client)
}

// verdict is the agent's answer about the request itself, as opposed to a failure
// to answer: the code, and whether err carried one.
func verdict(err error) (codes.Code, bool) {
	if errors.Is(err, errDial) || errors.Is(err, context.DeadlineExceeded) {
		return codes.Unavailable, false
	}
	st, ok := status.FromError(err)
	if !ok {
		return codes.Unknown, false
	}
	switch st.Code() {
	case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition:
		return st.Code(), true
	}
	// Unavailable and DeadlineExceeded (nobody answered), Unimplemented (something
	// other than the agent's CNI server on the socket), and the agent failing to
	// record (Internal, ResourceExhausted, ...) all mean the same to the runtime: the
	// attachment is not recorded, and trying again later may help.
	return st.Code(), false
}

// agentMessage is err's text without gRPC's "rpc error: code = ... desc =" wrapping.
func agentMessage(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Message()
	}
	return err.Error()
}
