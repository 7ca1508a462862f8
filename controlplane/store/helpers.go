package store

import (
	"context"
	"fmt"
)

// The helpers below name the state machine steps the reconcilers take, so callers need
// not build updates by hand.

// SetLinkStatus moves the link to st with message msg.
func SetLinkStatus(ctx context.Context, s Store, id string, st LinkStatus, msg string) (Link, error) {
	return s.UpdateLink(ctx, id, LinkUpdate{Status: &st, StatusMessage: &msg})
}

// SetLinkStatusIf is SetLinkStatus on condition that the link is still at version
// (ErrConflict if not).
func SetLinkStatusIf(ctx context.Context, s Store, id string, version int64, st LinkStatus, msg string) (Link, error) {
	return s.UpdateLink(ctx, id, LinkUpdate{IfVersion: &version, Status: &st, StatusMessage: &msg})
}

// MarkLinkDeleted marks the link for deletion.
func MarkLinkDeleted(ctx context.Context, s Store, id string) (Link, error) {
	return SetLinkStatus(ctx, s, id, LinkDeleted, "")
}

// SetRouteStatus moves the route to st with message msg.
func SetRouteStatus(ctx context.Context, s Store, id int64, st RouteStatus, msg string) (Route, error) {
	return s.UpdateRoute(ctx, id, RouteUpdate{Status: &st, StatusMessage: &msg})
}

// SetRouteStatusIf is SetRouteStatus on condition that the route is still at version
// (ErrConflict if not).
func SetRouteStatusIf(ctx context.Context, s Store, id int64, version int64, st RouteStatus, msg string) (Route, error) {
	// One allocation for the three fields (the update escapes through the interface):
	// the reconcilers make a million of these at 10,000 nodes.
	v := &struct {
		version int64
		st      RouteStatus
		msg     string
	}{version, st, msg}
	return s.UpdateRoute(ctx, id, RouteUpdate{IfVersion: &v.version, Status: &v.st, StatusMessage: &v.msg})
}

// MarkRouteApplied records that the subscription is active on its node.
func MarkRouteApplied(ctx context.Context, s Store, id int64) (Route, error) {
	return SetRouteStatus(ctx, s, id, RouteApplied, "")
}

// MarkRouteFailed records the node's error for the subscription.
func MarkRouteFailed(ctx context.Context, s Store, id int64, msg string) (Route, error) {
	return SetRouteStatus(ctx, s, id, RouteFailed, msg)
}

// MarkRouteDeleted marks the route for deletion.
func MarkRouteDeleted(ctx context.Context, s Store, id int64) (Route, error) {
	return SetRouteStatus(ctx, s, id, RouteDeleted, "")
}

// Ptr returns a pointer to v, for building updates.
func Ptr[T any](v T) *T { return &v }

func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}

// NotFound wraps ErrNotFound with what was missing.
func NotFound(kind, id string) error { return errorf(ErrNotFound, "%s %q", kind, id) }

// Exists wraps ErrExists with what was already there.
func Exists(kind, id string) error { return errorf(ErrExists, "%s %q", kind, id) }
