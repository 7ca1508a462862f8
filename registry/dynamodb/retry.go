package dynamodb

import (
	"errors"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
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
			return fullJitter(attempt, maxBackoff), nil
		})
	})
}

// fullJitter waits a uniform random time up to min(cap, base*2^(attempt-1)): spreads
// the retries of many writers hitting one throttled table.
func fullJitter(attempt int, maxBackoff time.Duration) time.Duration {
	ceiling := maxBackoff
	if attempt < 20 {
		ceiling = min(maxBackoff, baseBackoff<<max(attempt-1, 0))
	}
	if ceiling <= 0 {
		return 0
	}
	return rand.N(ceiling + 1)
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
