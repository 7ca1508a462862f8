// Package token is the registrar's resume token: a replica's epoch, a sequence
// number and a digest of the state at that version (docs/registrar.md, "What it
// does": Push, and "Resuming across a restart").
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
// restart, never matches by sequence; it can still match by Digest, the digest of
// everything watchers see at the version, which another replica can compare with
// its own state.
//
// HasDigest is false for a token without one: the two-part tokens of registrars
// from before digests, and the persisted frontiers events carry (which nobody
// resumes from).
type Version struct {
	Epoch     uint64
	Seq       uint64
	Digest    uint64
	HasDigest bool
}

// String renders the token as 16 hex digits of epoch, a dot, the decimal sequence
// and, with a digest, a dot and its 16 hex digits.
func (v Version) String() string {
	var b [16 + 1 + 20 + 1 + 16]byte
	out := appendHex(b[:0], v.Epoch)
	out = append(out, '.')
	out = strconv.AppendUint(out, v.Seq, 10)
	if v.HasDigest {
		out = append(out, '.')
		out = appendHex(out, v.Digest)
	}
	return string(out)
}

// appendHex appends x as exactly 16 lower-case hex digits.
func appendHex(out []byte, x uint64) []byte {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		out = append(out, digits[x>>uint(shift)&0xf])
	}
	return out
}

// ErrMalformed is matched by every error of Parse.
var ErrMalformed = errors.New("malformed version token")

// Parse reads a token made by Version.String: "epoch.seq" or "epoch.seq.digest".
// Only the canonical spelling is accepted, so one version has one token.
func Parse(s string) (Version, error) {
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return Version{}, fmt.Errorf("%w %q: want <16 hex digits>.<sequence>[.<16 hex digits>]", ErrMalformed, s)
	}
	epoch, err := parseHex(parts[0])
	if err != nil {
		return Version{}, fmt.Errorf("%w %q: epoch %v", ErrMalformed, s, err)
	}
	seq, err := parseSeq(parts[1])
	if err != nil {
		return Version{}, fmt.Errorf("%w %q: sequence %v", ErrMalformed, s, err)
	}
	v := Version{Epoch: epoch, Seq: seq}
	if len(parts) == 3 {
		if v.Digest, err = parseHex(parts[2]); err != nil {
			return Version{}, fmt.Errorf("%w %q: digest %v", ErrMalformed, s, err)
		}
		v.HasDigest = true
	}
	return v, nil
}

// parseHex reads exactly 16 lower-case hex digits.
func parseHex(s string) (uint64, error) {
	if len(s) != 16 || strings.Trim(s, "0123456789abcdef") != "" {
		return 0, errors.New("must be 16 lower-case hex digits")
	}
	return strconv.ParseUint(s, 16, 64)
}

// parseSeq reads decimal digits without leading zeros.
func parseSeq(s string) (uint64, error) {
	if s == "" || len(s) > 20 || strings.Trim(s, "0123456789") != "" || (len(s) > 1 && s[0] == '0') {
		return 0, errors.New("must be decimal digits without leading zeros")
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, errors.New("out of range")
	}
	return n, nil
}
