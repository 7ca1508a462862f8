package etcd

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/registry"
)

// classify wraps an etcd error so callers can branch on it: failures to reach a
// quorum in time match registry.ErrUnavailable (callers retry those), a cancelled
// ctx stays a cancellation, and everything else (permission denied, bad request)
// is wrapped as is.
func classify(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return ctx.Err()
	case ctx.Err() != nil:
		return fmt.Errorf("%w: %w", registry.ErrUnavailable, ctx.Err())
	case transient(err):
		return fmt.Errorf("%w: %w", registry.ErrUnavailable, err)
	}
	return err
}

// transient reports errors that say etcd could not serve the request now, as
// opposed to refusing it.
func transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	code := status.Code(err)
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	}
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted:
		return true
	}
	return false
}
