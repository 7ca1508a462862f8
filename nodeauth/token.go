package nodeauth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Shared-secret token format (version sb1), five fields joined by ".":
//
//	sb1.<identity>.<issued-at>.<nonce>.<mac>
//
//	identity   base64url (no padding) of "{group}/{node_id}", 1..MaxIdentityLen bytes
//	issued-at  decimal Unix seconds, digits only, no leading zeros
//	nonce      base64url (no padding) of NonceLen random bytes
//	mac        base64url (no padding) of HMAC-SHA256(group secret, "sb1.<identity>.<issued-at>.<nonce>")
//
// Only printable ASCII appears in a token, so it travels in any string field. The MAC
// covers the exact text before the last ".", so no field can be altered or re-encoded.
const (
	tokenVersion = "sb1"
	// NonceLen is the number of random bytes in a token's nonce.
	NonceLen = 16
	// MaxIdentityLen bounds the identity a token may carry.
	MaxIdentityLen = 512
	// MaxTokenLen bounds the text the parser looks at.
	MaxTokenLen = 1024
	macLen      = sha256.Size
)

var b64 = base64.RawURLEncoding.Strict()

// token is a parsed, not yet verified, shared-secret token.
type token struct {
	identity string
	issuedAt time.Time
	nonce    [NonceLen]byte
	mac      []byte
	// signed is the text the MAC covers.
	signed string
}

// formatToken builds and signs a token.
func formatToken(secret []byte, identity string, issuedAt time.Time, nonce [NonceLen]byte) string {
	signed := strings.Join([]string{
		tokenVersion,
		b64.EncodeToString([]byte(identity)),
		strconv.FormatInt(issuedAt.Unix(), 10),
		b64.EncodeToString(nonce[:]),
	}, ".")
	return signed + "." + b64.EncodeToString(computeMAC(secret, signed))
}

func computeMAC(secret []byte, signed string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(signed))
	return m.Sum(nil)
}

// parseToken splits and decodes a token without checking its MAC. Every error wraps
// ErrInvalidToken and names the field that is wrong.
func parseToken(s string) (*token, error) {
	if len(s) > MaxTokenLen {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrInvalidToken, MaxTokenLen)
	}
	parts := strings.Split(s, ".")
	if len(parts) != 5 {
		return nil, fmt.Errorf("%w: want 5 dot-separated fields, got %d", ErrInvalidToken, len(parts))
	}
	if parts[0] != tokenVersion {
		return nil, fmt.Errorf("%w: unknown version %q", ErrInvalidToken, truncate(parts[0]))
	}
	t := &token{signed: strings.Join(parts[:4], ".")}
	id, err := b64.DecodeString(parts[1])
	if err != nil || len(id) == 0 || len(id) > MaxIdentityLen {
		return nil, fmt.Errorf("%w: bad identity field", ErrInvalidToken)
	}
	t.identity = string(id)
	if t.issuedAt, err = parseUnix(parts[2]); err != nil {
		return nil, err
	}
	nonce, err := b64.DecodeString(parts[3])
	if err != nil || len(nonce) != NonceLen {
		return nil, fmt.Errorf("%w: nonce must be %d base64url bytes", ErrInvalidToken, NonceLen)
	}
	copy(t.nonce[:], nonce)
	if t.mac, err = b64.DecodeString(parts[4]); err != nil || len(t.mac) != macLen {
		return nil, fmt.Errorf("%w: mac must be %d base64url bytes", ErrInvalidToken, macLen)
	}
	return t, nil
}

func parseUnix(s string) (time.Time, error) {
	if s == "" || len(s) > 18 || strings.TrimLeft(s, "0123456789") != "" || (len(s) > 1 && s[0] == '0') {
		return time.Time{}, fmt.Errorf("%w: issued-at must be decimal Unix seconds without leading zeros", ErrInvalidToken)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: issued-at: %w", ErrInvalidToken, err)
	}
	return time.Unix(n, 0), nil
}

// truncate keeps attacker-controlled text in error messages short.
func truncate(s string) string {
	if len(s) > 16 {
		return s[:16] + "..."
	}
	return s
}
