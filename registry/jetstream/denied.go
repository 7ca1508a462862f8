package jetstream

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

// A request the NATS server refuses to forward (the account lacks the permission to
// publish to its subject, or to subscribe to the reply inbox) is never answered:
// the server tells the connection with an asynchronous -ERR, and the request only
// sees its deadline pass. deniedSince puts the refusal into the error, so that a
// missing grant reads as one and not as an unreachable server.

// deniedSince returns err with the permission violation the server reported to nc
// since before was nc's last error, if there is one; otherwise err. A refusal of
// another request on the same connection in that time is named too: it is the same
// account missing a grant.
func deniedSince(nc *nats.Conn, before, err error) error {
	if err == nil || errors.Is(err, nats.ErrPermissionViolation) {
		return err
	}
	if refused := refusedSince(nc, before); refused != nil {
		return fmt.Errorf("%w (the NATS server refused this connection a permission: %v)", err, refused)
	}
	return err
}

// refusedSince returns the permission violation the server last reported to nc if
// it came after before (nc's last error when the caller began), else nil. nats.go
// records a violation as the connection's last error when it reads the -ERR, in
// the order the server sent it: a violation by a publish is there once a flush
// that followed the publish returns.
func refusedSince(nc *nats.Conn, before error) error {
	after := nc.LastError()
	// nats.go makes a new error value (a pointer) for every violation, so a repeat
	// of the same refusal is told apart from the one before; comparing a pointer
	// with any error never panics.
	if after == nil || !errors.Is(after, nats.ErrPermissionViolation) || (before != nil && after == before) {
		return nil
	}
	return after
}
