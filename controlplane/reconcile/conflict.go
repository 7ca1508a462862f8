package reconcile

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// A reconciler reads a record, talks to the node (seconds may pass), then writes what
// it learnt. Meanwhile the core may have changed the record — a gateway failover moves
// a link to another source and resets it to Pending, a route is re-keyed or marked
// deleted. So every such write carries the version the reconciler decided from
// (store.LinkUpdate.IfVersion, DeleteLinkIf, ...). When the store answers
// store.ErrConflict the write is dropped, and the node is synced again soon, from fresh
// state, without counting a retry: it is not the node's fault.

// conflicted turns a store.ErrConflict into an error wrapping ErrRetrySoon; other
// errors, and nil, come back as they are.
func conflicted(what string, err error) error {
	if errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("%w: %s: %w", ErrRetrySoon, what, err)
	}
	return err
}

// settle combines a pass's errors. Real failures win, so that the queue backs off on
// them; only when all of them ask for a quick retry (ErrRetrySoon) does the result.
func settle(errs []error) error {
	var hard, soon []error
	for _, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, ErrRetrySoon):
			soon = append(soon, err)
		default:
			hard = append(hard, err)
		}
	}
	if len(hard) > 0 {
		return errors.Join(hard...)
	}
	return errors.Join(soon...)
}

// rejected handles a status change the store refused because the state machine forbids
// it (store.ErrInvalidTransition). The reconciler decided from a wrong idea of the
// record, so the refusal is never expected and never ignored: it is logged at warn and
// comes back as an error, which has the queue retry the node with backoff and the
// server count it. Other errors, and nil, come back as they are.
func rejected(log *slog.Logger, err error, args ...any) error {
	if errors.Is(err, store.ErrInvalidTransition) {
		log.Warn("status change rejected by the state machine", append(args, "err", err)...)
	}
	return err
}
