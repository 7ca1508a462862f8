package access

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestTokenFile(t *testing.T) {
	admin, viewer := Generate(), Generate()
	if !strings.HasPrefix(admin, TokenPrefix) || len(admin) < MinTokenLen || admin == viewer {
		t.Fatalf("Generate = %q, %q", admin, viewer)
	}
	la, err := HashLine("admin", "ci", admin)
	if err != nil {
		t.Fatal(err)
	}
	lv, _ := HashLine("viewer", "dash@example.org", viewer)
	toks, err := ParseTokens([]byte("# comment\n\n" + la + "\n  " + lv + "  \n"))
	if err != nil {
		t.Fatal(err)
	}
	if tok, ok := toks.Lookup(admin); !ok || tok.Name != "ci" || tok.Role != Admin {
		t.Fatalf("admin token: %+v %v", tok, ok)
	}
	if tok, ok := toks.Lookup(viewer); !ok || tok.Name != "dash@example.org" || tok.Role != Viewer {
		t.Fatalf("viewer token: %+v %v", tok, ok)
	}
	for _, bad := range []string{"", Hash(admin), admin + "x", "sbt_"} {
		if _, ok := toks.Lookup(bad); ok {
			t.Errorf("Lookup(%q) found a token", bad)
		}
	}
	if toks.Len() != 2 {
		t.Fatalf("Len = %d", toks.Len())
	}
}

func TestHashLineRefuses(t *testing.T) {
	for _, c := range [][3]string{
		{"root", "ci", Generate()},
		{"admin", "has space", Generate()},
		{"admin", "ci", "hunter2"},
	} {
		if _, err := HashLine(c[0], c[1], c[2]); err == nil {
			t.Errorf("HashLine%q accepted", c)
		}
	}
}

// TestTokenFileErrors: every broken line is reported by number, and nothing that could
// be a pasted token is echoed.
func TestTokenFileErrors(t *testing.T) {
	secret := Generate()
	h := Hash(Generate())
	src := strings.Join([]string{
		"admin ci " + secret,            // 1: a token instead of its hash
		"admin ci",                      // 2: two fields
		"owner ci " + h,                 // 3: unknown role
		"admin b/ad " + h,               // 4: bad name
		"viewer dup " + h,               // 5: ok
		"admin dup " + Hash(Generate()), // 6: name reused
		"admin other " + h,              // 7: hash reused
		"admin short sha256:abcd",       // 8: short hash
		"admin nohex sha256:" + strings.Repeat("zz", 32), // 9: not hex
	}, "\n")
	_, err := ParseTokens([]byte(src))
	if !errors.Is(err, ErrTokenFile) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"line 1: token ci: the third field must be sha256:", "line 2: want ROLE NAME", "line 3: unknown role",
		"line 4: name:", "line 6: token dup: name already used on line 5", "line 7: token other: same hash as token dup", "line 8:", "line 9:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), secret[len(TokenPrefix):20]) {
		t.Fatalf("error echoes the token: %v", err)
	}
	if strings.Contains(err.Error(), "line 5") && !strings.Contains(err.Error(), "on line 5") {
		t.Errorf("a valid line was reported: %v", err)
	}
}

func TestDiff(t *testing.T) {
	a, b, c := Generate(), Generate(), Generate()
	line := func(role, name, tok string) string { l, _ := HashLine(role, name, tok); return l }
	before, _ := ParseTokens([]byte(line("admin", "keep", a) + "\n" + line("admin", "gone", b) + "\n" + line("admin", "demoted", c)))
	after, _ := ParseTokens([]byte(line("admin", "keep", a) + "\n" + line("viewer", "demoted", c) + "\n" + line("viewer", "new", Generate())))
	got := Diff(before, after)
	want := TokenChanges{Added: []string{"new"}, Removed: []string{"gone"}, Changed: []string{"demoted"}, Total: 3}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Diff = %+v, want %+v", got, want)
	}
}
