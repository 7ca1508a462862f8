// Package token is the registrar's resume token: a replica's epoch and a sequence
// number (docs/registrar.md, "What it does": Push).
// The server issues tokens; the client compares them to tell when its stream has
// caught up with its own writes. Everything else treats a token as opaque.
package token

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Version is a point in one replica's change history. The epoch is drawn at random
// when a Registrar starts, so a token from another replica, or from this one before a
// restart, never matches and gets a full snapshot instead of a silent skip.
type Version struct {
	Epoch uint64
	Seq   uint64
}

// String renders the token as 16 hex digits of epoch, a dot, and the decimal sequence.
func (v Version) String() string {
	var b [16 + 1 + 20]byte
	out := strconv.AppendUint(b[:0], v.Epoch, 16)
	pad := 16 - len(out)
	if pad > 0 {
		copy(b[pad:], out)
		for i := range pad {
			b[i] = '0'
		}
	}
	out = b[:16]
	out = append(out, '.')
	out = strconv.AppendUint(out, v.Seq, 10)
	return string(out)
}

// ErrMalformed is matched by every error of Parse.
var ErrMalformed = errors.New("malformed version token")

// Parse reads a token made by Version.String.
func Parse(s string) (Version, error) {
	e, q, ok := strings.Cut(s, ".")
	if !ok || len(e) != 16 || q == "" || len(q) > 20 {
		return Version{}, fmt.Errorf("%w %q: want <16 hex digits>.<sequence>", ErrMalformed, s)
	}
	// Only the canonical spelling is accepted, so one version has one token.
	if strings.Trim(e, "0123456789abcdef") != "" {
		return Version{}, fmt.Errorf("%w %q: epoch must be lower-case hex", ErrMalformed, s)
	}
	if strings.Trim(q, "0123456789") != "" || (len(q) > 1 && q[0] == '0') {
		return Version{}, fmt.Errorf("%w %q: sequence must be decimal digits without leading zeros", ErrMalformed, s)
	}
	epoch, err := strconv.ParseUint(e, 16, 64)
	if err != nil {
		return Version{}, fmt.Errorf("%w %q: epoch: %v", ErrMalformed, s, err)
	}
	seq, err := strconv.ParseUint(q, 10, 64)
	if err != nil {
		return Version{}, fmt.Errorf("%w %q: sequence: %v", ErrMalformed, s, err)
	}
	return Version{Epoch: epoch, Seq: seq}, nil
}
