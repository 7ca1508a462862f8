package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// report words a gRPC status whether it arrives as a status in the error chain or
// only as text, and exits 2 for InvalidArgument either way.
func TestReportWordsStatuses(t *testing.T) {
	invalid := status.Error(codes.InvalidArgument, `segment "bad name!": not a valid name`)
	denied := status.Error(codes.PermissionDenied, "AddSegment needs role admin")
	cases := []struct {
		name string
		err  error
		msg  string
		code int
	}{
		{"status", invalid, `invalid input: segment "bad name!": not a valid name`, 2},
		{"wrapped status", fmt.Errorf("segment add: %w", invalid), `segment add: invalid input: segment "bad name!"`, 2},
		{"status as text", fmt.Errorf("open registrar registry: %v", invalid), "open registrar registry: invalid input: segment", 2},
		{"denied", fmt.Errorf("ctl: %w", denied), "ctl: permission denied: AddSegment needs role admin", 1},
		{"denied as text", errors.New("x: " + denied.Error()), "x: permission denied: AddSegment", 1},
		{"unavailable", status.Error(codes.Unavailable, "connection refused"), "unavailable: connection refused", 1},
		// The control plane's own errors begin with what went wrong; it is said once.
		{"not found, said by the server", status.Error(codes.NotFound, `not found: segment "nope"`), `not found: segment "nope"`, 1},
		{"invalid, said by the server", status.Error(codes.InvalidArgument, `invalid argument: group "cloud" cannot link to itself`), `invalid input: group "cloud" cannot link to itself`, 2},
		{"said by the server, as text", errors.New(`x: rpc error: code = NotFound desc = not found: node "a/b"`), `x: not found: node "a/b"`, 1},
		// Codes statusMessage has no wording of its own for are spelled as words.
		{"out of range", status.Error(codes.OutOfRange, "page 9 of 3"), "out of range: page 9 of 3", 1},
		{"data loss", status.Error(codes.DataLoss, "block 7 unreadable"), "data loss: block 7 unreadable", 1},
		{"denied, said by the server", status.Error(codes.PermissionDenied, "permission denied: role viewer"), "permission denied: role viewer", 1},
		{"plain", errors.New("boom"), "boom", 1},
		{"usage", usagef("--x: bad"), "--x: bad", 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msg, code := report(c.err)
			if code != c.code || !strings.Contains(msg, c.msg) || strings.Contains(msg, "rpc error") || doubled(msg) {
				t.Fatalf("report = %q, exit %d; want %q, exit %d", msg, code, c.msg, c.code)
			}
		})
	}
}

// doubled reports whether msg says one of statusMessage's words twice in a row, as
// in "not found: not found: …".
func doubled(msg string) bool {
	for _, w := range []string{"not found", "invalid input", "invalid argument", "already exists", "refused", "permission denied"} {
		if strings.Contains(msg, w+": "+w) || strings.Contains(msg, "invalid input: invalid argument") {
			return true
		}
	}
	return false
}
