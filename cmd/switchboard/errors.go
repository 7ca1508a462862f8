package main

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/codewords"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Exit codes: 0 ok, 1 runtime failure, 2 bad usage or invalid input.
const (
	exitFailure = 1
	exitUsage   = 2
)

// usageError marks an error caused by how the command was called.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// report turns a command's error into the line printed on stderr and the exit code.
// It is the one place every command's errors pass through, so a server's verdict
// (a gRPC status) reads and exits the same from ctl, the registry commands and the
// agent alike.
func report(err error) (string, int) {
	msg := err.Error()
	st, isStatus := grpcStatus(err)
	if isStatus {
		msg = strings.Replace(msg, st.Err().Error(), statusMessage(st), 1)
	}
	// A status flattened into text on the way (wrapped with %v) is still reworded.
	msg = rawStatus.ReplaceAllStringFunc(msg, func(m string) string {
		sub := rawStatus.FindStringSubmatch(m)
		return statusMessage(status.New(codeNames[sub[1]], sub[2]))
	})
	return msg, exitCode(err)
}

// rawStatus matches gRPC's text form of a status, up to the end of the line.
var rawStatus = regexp.MustCompile(`rpc error: code = (\w+) desc = (.*)`)

// codeNames maps a code's name, as a status's text shows it, to the code.
var codeNames = func() map[string]codes.Code {
	m := map[string]codes.Code{}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		m[c.String()] = c
	}
	return m
}()

func exitCode(err error) int {
	var u usageError
	if errors.As(err, &u) || errors.Is(err, endpoint.ErrInvalid) || errors.Is(err, registry.ErrBadParam) {
		return exitUsage
	}
	if st, ok := grpcStatus(err); ok && st.Code() == codes.InvalidArgument {
		// The server refused what the user typed: the same mistake as a bad flag.
		return exitUsage
	}
	if m := rawStatus.FindStringSubmatch(err.Error()); m != nil && m[1] == codes.InvalidArgument.String() {
		return exitUsage
	}
	// Cobra reports argument and required-flag mistakes as plain errors.
	for _, prefix := range []string{"required flag", "unknown command", "accepts ", "unknown flag", "unknown shorthand flag", "invalid argument"} {
		if strings.HasPrefix(err.Error(), prefix) {
			return exitUsage
		}
	}
	return exitFailure
}

// grpcStatus finds a gRPC status anywhere in err's chain.
func grpcStatus(err error) (*status.Status, bool) {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return nil, false
	}
	st := se.GRPCStatus()
	return st, st != nil && st.Code() != codes.OK
}

// statusMessage says what a status means for the user, in place of gRPC's
// "rpc error: code = … desc = …".
func statusMessage(st *status.Status) string {
	desc := codewords.Trim(st.Code(), st.Message())
	switch st.Code() {
	case codes.InvalidArgument:
		return "invalid input: " + desc
	case codes.NotFound:
		return "not found: " + desc
	case codes.AlreadyExists:
		return "already exists: " + desc
	case codes.FailedPrecondition:
		return "refused: " + desc
	case codes.PermissionDenied:
		return "permission denied: " + desc
	case codes.Unauthenticated:
		return "not authenticated: " + desc
	case codes.ResourceExhausted:
		return "overloaded, try again later: " + desc
	case codes.Unavailable:
		return "unavailable: " + desc
	case codes.DeadlineExceeded:
		return "timed out: " + desc
	case codes.Unimplemented:
		return "not supported by the server: " + desc
	}
	return codewords.Of(st.Code()) + ": " + desc
}
