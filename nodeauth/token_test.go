package nodeauth

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestTokenRoundTrip(t *testing.T) {
	var nonce [NonceLen]byte
	copy(nonce[:], "0123456789abcdef")
	at := time.Unix(1767322800, 0)
	s := formatToken([]byte(secretAlpha), "alpha/node-1", at, nonce)
	tok, err := parseToken(s)
	if err != nil {
		t.Fatal(err)
	}
	if tok.identity != "alpha/node-1" || !tok.issuedAt.Equal(at) || tok.nonce != nonce {
		t.Fatalf("parsed %+v", tok)
	}
	if !strings.HasPrefix(s, "sb1.") || strings.Count(s, ".") != 4 {
		t.Fatalf("format drifted from the documented one: %s", s)
	}
}

func TestParseTokenErrorsNameTheField(t *testing.T) {
	good := issue(t, secretAlpha, time.Now, "alpha", "n1")
	f := strings.Split(good, ".")
	with := func(i int, v string) string {
		g := append([]string(nil), f...)
		g[i] = v
		return strings.Join(g, ".")
	}
	cases := map[string]string{
		"fields":    "a.b.c",
		"version":   with(0, "sb2"),
		"identity":  with(1, "!!"),
		"issued-at": with(2, "-5"),
		"leading":   with(2, "0"+f[2]),
		"nonce":     with(3, "AAAA"),
		"mac":       with(4, "AAAA"),
		"longer":    strings.Repeat("a", MaxTokenLen+1),
	}
	for want, in := range cases {
		_, err := parseToken(in)
		if !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: want ErrInvalidToken mentioning %q, got %v", want, want, err)
		}
	}
}

// FuzzParseToken: the parser never panics, and anything it accepts is exactly the
// canonical encoding of what it parsed (so no two texts share a MAC).
func FuzzParseToken(f *testing.F) {
	f.Add(seedToken(secretAlpha, "alpha/n1"))
	f.Add("sb1....")
	f.Add("sb1.YQ.0.AAAAAAAAAAAAAAAAAAAAAA.AAAA")
	f.Add(strings.Repeat(".", 10))
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := parseToken(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("error does not wrap ErrInvalidToken: %v", err)
			}
			return
		}
		again := strings.Join([]string{tokenVersion, b64.EncodeToString([]byte(tok.identity)),
			strconv.FormatInt(tok.issuedAt.Unix(), 10), b64.EncodeToString(tok.nonce[:]),
			b64.EncodeToString(tok.mac)}, ".")
		if again != s {
			t.Fatalf("accepted non-canonical token %q (canonical %q)", s, again)
		}
	})
}

// FuzzSharedSecretVerify: no input forges acceptance without the secret.
func FuzzSharedSecretVerify(f *testing.F) {
	f.Add(seedToken(secretBeta, "alpha/n1"))
	f.Add("")
	f.Add("sb1")
	v, err := NewSharedSecret(map[string]string{"alpha": secretAlpha}, SharedSecretOptions{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if err := v.Verify(context.Background(), s, "alpha", "n1"); err == nil {
			t.Fatalf("accepted %q without the secret", s)
		}
	})
}

func seedToken(secret, identity string) string {
	var nonce [NonceLen]byte
	copy(nonce[:], "fuzz-seed-nonce!")
	return formatToken([]byte(secret), identity, time.Now(), nonce)
}
