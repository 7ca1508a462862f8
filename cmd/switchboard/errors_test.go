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
		{"plain", errors.New("boom"), "boom", 1},
		{"usage", usagef("--x: bad"), "--x: bad", 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msg, code := report(c.err)
			if code != c.code || !strings.Contains(msg, c.msg) || strings.Contains(msg, "rpc error") {
				t.Fatalf("report = %q, exit %d; want %q, exit %d", msg, code, c.msg, c.code)
			}
		})
	}
}
