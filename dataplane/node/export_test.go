package node

import (
	"context"
	"crypto/tls"

	"google.golang.org/grpc/metadata"

	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
)

// RawFramed opens a link stream to addr on the framed transport with the headers md,
// as a node would but without one behind it; over TLS when conf is not nil. A refusal
// is the error of its first Recv (and of Header), as on a gRPC stream.
func RawFramed(ctx context.Context, addr string, conf *tls.Config, md metadata.MD) nodev1.LinkService_LinkClient {
	s := &rawFramed{ctx: ctx}
	if s.f, _, s.err = dialFramed(ctx, addr, conf, 64<<20); s.err == nil {
		s.err = s.f.open(md)
	}
	return s
}

// rawFramed is a framed stream behind the gRPC client stream's interface.
type rawFramed struct {
	ctx context.Context
	f   *framed
	err error // the open's
}

func (s *rawFramed) Header() (metadata.MD, error) {
	if s.err != nil {
		return nil, s.err
	}
	return metadata.MD{}, nil
}

func (s *rawFramed) Trailer() metadata.MD           { return nil }
func (s *rawFramed) Context() context.Context       { return s.ctx }
func (s *rawFramed) Send(f *nodev1.LinkFrame) error { return s.SendMsg(f) }

func (s *rawFramed) CloseSend() error {
	if s.f == nil {
		return s.err
	}
	defer s.f.close()
	return s.f.CloseSend()
}

func (s *rawFramed) SendMsg(m any) error {
	if s.err != nil {
		return s.err
	}
	return s.f.SendMsg(m)
}

func (s *rawFramed) Recv() (*nodev1.LinkFrame, error) {
	f := &nodev1.LinkFrame{}
	return f, s.RecvMsg(f)
}

func (s *rawFramed) RecvMsg(m any) error {
	if s.err != nil {
		return s.err
	}
	return s.f.RecvMsg(m)
}
