package access

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
)

// ErrTokenFile is matched by every error about the token file's contents.
var ErrTokenFile = errors.New("invalid token file")

// TokenPrefix starts every token Generate makes, so secret scanners and people can
// tell a leaked token for what it is.
const TokenPrefix = "sbt_"

// MinTokenLen is the shortest token HashLine accepts. Tokens are hashed with a single
// SHA-256 rather than a slow password hash because they are random, not chosen: at
// 32 random bytes there is nothing to brute-force, and a fast hash lets every RPC be
// checked without a cache. The length floor keeps people from hashing a password.
const MinTokenLen = 32

const hashPrefix = "sha256:"

var tokenName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$`)

// Token is one line of the token file: a named role holder. The token itself is
// never known to the control plane, only its hash.
type Token struct {
	Role Role
	Name string
	hash [sha256.Size]byte
}

// Tokens is a parsed token file, keyed by hash.
type Tokens struct {
	byHash map[[sha256.Size]byte]Token
}

// Len is the number of tokens.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.byHash)
}

// Lookup finds the holder of a presented token. A map lookup by hash is not
// constant-time, but what it could leak is about the hash, which reveals nothing
// about a token nobody knows.
func (t *Tokens) Lookup(token string) (Token, bool) {
	if t == nil {
		return Token{}, false
	}
	tok, ok := t.byHash[sha256.Sum256([]byte(token))]
	return tok, ok
}

// Generate returns a new random token: TokenPrefix and 32 random bytes, base64url.
func Generate() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on supported platforms
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// Hash returns the token file's form of a token's hash: "sha256:" and hex.
func Hash(token string) string {
	h := sha256.Sum256([]byte(token))
	return hashPrefix + hex.EncodeToString(h[:])
}

// HashLine returns the token file line for a token, after checking what the file
// format needs: a known role, a valid name and a token long enough to be random.
func HashLine(role, name, token string) (string, error) {
	if _, err := ParseRole(role); err != nil {
		return "", err
	}
	if !tokenName.MatchString(name) {
		return "", fmt.Errorf("token name %q: want letters, digits, '.', '_', '@' or '-', at most 128", name)
	}
	if len(token) < MinTokenLen {
		return "", fmt.Errorf("the token is %d bytes, want at least %d random ones (switchboard ctl token generate makes one)", len(token), MinTokenLen)
	}
	return role + " " + name + " " + Hash(token), nil
}

// LoadTokens reads a token file.
func LoadTokens(path string) (*Tokens, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTokenFile, err)
	}
	t, err := ParseTokens(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// ParseTokens parses the token file format: one "ROLE NAME sha256:HEX" per line;
// blank lines and lines starting with # are ignored. Names and hashes must be unique.
// Every broken line is reported, by number; nothing from a line is echoed but its
// name, so a token pasted by mistake does not end up in a log.
func ParseTokens(data []byte) (*Tokens, error) {
	t := &Tokens{byHash: map[[sha256.Size]byte]Token{}}
	names := map[string]int{}
	var errs []error
	fail := func(line int, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: line %d: %s", ErrTokenFile, line, fmt.Sprintf(format, args...)))
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			fail(n, "want ROLE NAME sha256:HEX, found %d fields", len(f))
			continue
		}
		role, err := ParseRole(f[0])
		if err != nil {
			fail(n, "%v", err)
			continue
		}
		if !tokenName.MatchString(f[1]) {
			fail(n, "name: want letters, digits, '.', '_', '@' or '-', at most 128")
			continue
		}
		hexHash, ok := strings.CutPrefix(f[2], hashPrefix)
		raw, err := hex.DecodeString(hexHash)
		if !ok || err != nil || len(raw) != sha256.Size {
			fail(n, "token %s: the third field must be sha256: and 64 hex digits; the file holds hashes, never tokens (switchboard ctl token hash)", f[1])
			continue
		}
		if prev, dup := names[f[1]]; dup {
			fail(n, "token %s: name already used on line %d", f[1], prev)
			continue
		}
		tok := Token{Role: role, Name: f[1], hash: [sha256.Size]byte(raw)}
		if prev, dup := t.byHash[tok.hash]; dup {
			fail(n, "token %s: same hash as token %s", f[1], prev.Name)
			continue
		}
		names[f[1]] = n
		t.byHash[tok.hash] = tok
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("%w: %v", ErrTokenFile, err))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return t, nil
}

// TokenChanges is what a reload changed, by token name (names are not secrets).
type TokenChanges struct {
	Added, Removed, Changed []string // Changed: same name, another hash or role
	Total                   int
}

// Diff compares the token sets before and after a reload.
func Diff(before, after *Tokens) TokenChanges {
	byName := func(t *Tokens) map[string]Token {
		m := map[string]Token{}
		if t != nil {
			for _, tok := range t.byHash {
				m[tok.Name] = tok
			}
		}
		return m
	}
	b, a := byName(before), byName(after)
	c := TokenChanges{Total: len(a)}
	for name, tok := range a {
		switch old, ok := b[name]; {
		case !ok:
			c.Added = append(c.Added, name)
		case old != tok:
			c.Changed = append(c.Changed, name)
		}
	}
	for name := range b {
		if _, ok := a[name]; !ok {
			c.Removed = append(c.Removed, name)
		}
	}
	for _, s := range [][]string{c.Added, c.Removed, c.Changed} {
		slices.Sort(s)
	}
	return c
}
