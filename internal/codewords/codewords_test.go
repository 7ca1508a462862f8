package codewords

import (
	"testing"

	"google.golang.org/grpc/codes"
)

func TestOf(t *testing.T) {
	for c, want := range map[codes.Code]string{
		codes.OutOfRange:       "out of range",
		codes.PermissionDenied: "permission denied",
		codes.Internal:         "internal",
		codes.DataLoss:         "data loss",
		codes.Code(99):         "code(99)",
	} {
		if got := Of(c); got != want {
			t.Errorf("Of(%d) = %q, want %q", c, got, want)
		}
	}
}

func TestTrim(t *testing.T) {
	cases := []struct {
		c         codes.Code
		msg, want string
	}{
		{codes.NotFound, `not found: segment "a"`, `segment "a"`},
		{codes.NotFound, `Not Found: segment "a"`, `segment "a"`},
		{codes.InvalidArgument, "invalid argument: x", "x"},
		{codes.NotFound, "not found", "not found"},             // nothing after the words
		{codes.NotFound, "not founding: x", "not founding: x"}, // other words
		{codes.NotFound, "segment not found: x", "segment not found: x"},
		{codes.PermissionDenied, "not found: x", "not found: x"},
	}
	for _, c := range cases {
		if got := Trim(c.c, c.msg); got != c.want {
			t.Errorf("Trim(%v, %q) = %q, want %q", c.c, c.msg, got, c.want)
		}
	}
}

func TestSay(t *testing.T) {
	for _, c := range []struct {
		c         codes.Code
		msg, want string
	}{
		{codes.PermissionDenied, "permission denied: role viewer", "permission denied: role viewer"},
		{codes.PermissionDenied, "role viewer", "permission denied: role viewer"},
		{codes.OutOfRange, "page 9", "out of range: page 9"},
	} {
		if got := Say(c.c, c.msg); got != c.want {
			t.Errorf("Say(%v, %q) = %q, want %q", c.c, c.msg, got, c.want)
		}
	}
}
