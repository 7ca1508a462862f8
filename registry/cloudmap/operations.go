package cloudmap

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	"github.com/aws/aws-sdk-go-v2/service/servicediscovery/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/switchboard-mesh/switchboard/registry"
)

// OperationError is an asynchronous Cloud Map operation that ended in FAIL.
type OperationError struct {
	ID      string
	Type    string
	Code    string // e.g. INTERNAL_FAILURE
	Message string
}

func (e *OperationError) Error() string {
	return fmt.Sprintf("Cloud Map operation %s (%s) failed: %s: %s", e.ID, e.Type, e.Code, e.Message)
}

// transientFailCodes are FAIL codes worth retrying later.
var transientFailCodes = map[string]bool{"INTERNAL_FAILURE": true, "THROTTLED_REQUEST": true}

// await polls an operation until it finishes or the operation timeout passes, backing
// off between polls. It returns the finished operation on SUCCESS.
func (r *driver) await(ctx context.Context, opID string) (*types.Operation, error) {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, r.opts.OperationTimeout)
	defer cancel()
	delay := r.opts.PollInterval
	status, lastErr := types.OperationStatusSubmitted, error(nil)
	timer := time.NewTimer(delay)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, r.stillRunning(parent, opID, status, lastErr)
		case <-timer.C:
		}
		out, err := call(ctx, r, func(ctx context.Context) (*sd.GetOperationOutput, error) {
			return r.client.GetOperation(ctx, &sd.GetOperationInput{OperationId: aws.String(opID)})
		})
		switch {
		case err != nil && (ctx.Err() != nil || !errors.Is(err, registry.ErrUnavailable)):
			if ctx.Err() != nil {
				return nil, r.stillRunning(parent, opID, status, err)
			}
			return nil, fmt.Errorf("get Cloud Map operation %s: %w", opID, err)
		case err != nil:
			lastErr = err // transient: keep polling until the timeout
		case out.Operation.Status == types.OperationStatusSuccess:
			return out.Operation, nil
		case out.Operation.Status == types.OperationStatusFail:
			return nil, failed(out.Operation)
		default:
			status = out.Operation.Status
		}
		delay = min(2*delay, r.opts.MaxPollInterval)
		timer.Reset(delay)
	}
}

func failed(op *types.Operation) error {
	err := &OperationError{
		ID: aws.ToString(op.Id), Type: string(op.Type), Code: aws.ToString(op.ErrorCode), Message: aws.ToString(op.ErrorMessage),
	}
	if transientFailCodes[err.Code] {
		return fmt.Errorf("%w: %w", registry.ErrUnavailable, err)
	}
	return err
}

// stillRunning explains why await stopped waiting: the caller gave up (or the
// registry closed), or the operation outlived the timeout and may still finish.
func (r *driver) stillRunning(parent context.Context, opID string, status types.OperationStatus, lastErr error) error {
	if parent.Err() != nil {
		return fmt.Errorf("waiting for Cloud Map operation %s: %w", opID, context.Cause(parent))
	}
	detail := ""
	if lastErr != nil {
		detail = fmt.Sprintf(" (last poll: %v)", lastErr)
	}
	return fmt.Errorf("%w: Cloud Map operation %s still %s after %s, it may yet finish%s: %w",
		registry.ErrUnavailable, opID, status, r.opts.OperationTimeout, detail, context.DeadlineExceeded)
}

// call runs one Cloud Map request in a request slot and classifies its error.
func call[T any](ctx context.Context, r *driver, fn func(context.Context) (T, error)) (T, error) {
	release, err := r.acquire(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	defer release()
	out, err := fn(ctx)
	if err != nil {
		return out, classify(err)
	}
	return out, nil
}

// classify marks failures a caller may retry (throttling after the SDK's own
// retries, server faults, network errors) as registry.ErrUnavailable.
func classify(err error) error {
	if transient(err) {
		return fmt.Errorf("%w: %w", registry.ErrUnavailable, err)
	}
	return err
}

func transient(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		code := api.ErrorCode()
		_, throttle := retry.DefaultThrottleErrorCodes[code]
		_, retryable := retry.DefaultRetryableErrorCodes[code]
		if throttle || retryable || code == "RequestLimitExceeded" || api.ErrorFault() == smithy.FaultServer {
			return true
		}
	}
	var resp *smithyhttp.ResponseError
	if errors.As(err, &resp) && resp.HTTPStatusCode() >= 500 {
		return true
	}
	var send *smithyhttp.RequestSendError
	return errors.As(err, &send)
}
