package client

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// A refusal is reported in words and keeps its status; bad input and conditions
// worth retrying keep matching the registry's errors.
func TestCallError(t *testing.T) {
	d := &driver{}
	for _, tc := range []struct {
		st      *status.Status
		msg     string
		matches error
	}{
		{status.New(codes.PermissionDenied, "not yours"), "registrar write: permission denied: not yours", nil},
		{status.New(codes.FailedPrecondition, "draining"), "registrar write: failed precondition: draining", nil},
		{status.New(codes.NotFound, "gone"), "registrar write: not found: gone", nil},
		{status.New(codes.InvalidArgument, "bad port"), "registrar write: invalid endpoint: bad port", endpoint.ErrInvalid},
		{status.New(codes.Unavailable, "down"), "registrar write: registry backend unavailable: unavailable: down", registry.ErrUnavailable},
		{status.New(codes.ResourceExhausted, "queue full"), "registrar write: registry backend unavailable: resource exhausted: queue full", registry.ErrUnavailable},
	} {
		err := d.callError("write", tc.st.Err())
		if err.Error() != tc.msg {
			t.Errorf("%v: %q, want %q", tc.st.Code(), err, tc.msg)
		}
		if tc.matches != nil && !errors.Is(err, tc.matches) {
			t.Errorf("%v: %v does not match %v", tc.st.Code(), err, tc.matches)
		}
		if tc.matches == nil && status.Code(err) != tc.st.Code() {
			t.Errorf("%v: status.Code(%v) = %v", tc.st.Code(), err, status.Code(err))
		}
	}
}
