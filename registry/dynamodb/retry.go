package dynamodb

import (
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/switchboard-mesh/switchboard/internal/backoff"
)

// baseBackoff is the delay cap of the first retry; it doubles per attempt up to
// Config.MaxBackoff.
const baseBackoff = 25 * time.Millisecond

// retryables are the SDK's (throttling, 5xx, connection errors) plus transactions
// cancelled only for reasons that go away on their own.
var retryables = retry.IsErrorRetryables(append(append([]retry.IsErrorRetryable{}, retry.DefaultRetryables...), transientCancel{}))

// newRetryer is the SDK's standard retryer with our retryables and backoff.
func newRetryer(maxAttempts int, maxBackoff time.Duration) aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = maxAttempts
		o.MaxBackoff = maxBackoff
		o.Retryables = append(o.Retryables, transientCancel{})
		o.Backoff = retry.BackoffDelayerFunc(func(attempt int, _ error) (time.Duration, error) {
			return retryWait(attempt, maxBackoff), nil
		})
	})
}

// retryWait is the full-jitter wait before SDK attempt n (counted from 1), up to
// min(maxBackoff, base*2^(n-1)): it spreads the retries of many writers hitting one
// throttled table.
func retryWait(attempt int, maxBackoff time.Duration) time.Duration {
	return backoff.Backoff{Min: min(baseBackoff, maxBackoff), Max: maxBackoff}.Delay(max(attempt-1, 0))
}

// transientCancel marks a TransactionCanceledException retryable when every
// cancelled item failed for a transient reason: a conflicting transaction or
// throttling. A conditional or validation failure would fail the same way again.
type transientCancel struct{}

func (transientCancel) IsErrorRetryable(err error) aws.Ternary {
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		return aws.UnknownTernary
	}
	transient := false
	for _, r := range tce.CancellationReasons {
		switch aws.ToString(r.Code) {
		case "", "None":
		case "TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded":
			transient = true
		default:
			return aws.FalseTernary
		}
	}
	return aws.BoolTernary(transient)
}

// unavailable reports whether err is one the retryer would have retried: the
// backend was busy or unreachable, and the caller may try again later.
func unavailable(err error) bool {
	return retryables.IsErrorRetryable(err) == aws.TrueTernary
}
