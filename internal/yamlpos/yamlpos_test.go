package yamlpos

import "testing"

func TestLocate(t *testing.T) {
	cases := []struct {
		name      string
		doc       string
		line, col int
	}{
		{"key outdented into a list item", "entries:\n  - cluster: prod\n    service: web\n  checks:\n    - tcp: 127.0.0.1:1\n", 4, 3},
		// The over-indented line continues the plain scalar "2", which is where the
		// error is placed (yaml.v3 says line 4, without a column).
		{"key over-indented", "a:\n  b: 1\n  c: 2\n   d: 3\n", 3, 6},
		{"unclosed flow list", "a: [1, 2\nb: 3\n", 2, 1},
		{"tab indentation", "a:\n\tb: 1\n", 2, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := Locate([]byte(c.doc))
			if e == nil {
				t.Fatal("no syntax error found")
			}
			if e.Line != c.line || e.Column != c.col || e.Msg == "" {
				t.Fatalf("got %v, want line %d, column %d", e, c.line, c.col)
			}
		})
	}
	if e := Locate([]byte("a: 1\nb: [2]\n")); e != nil {
		t.Fatalf("valid YAML: %v", e)
	}
}

func FuzzLocate(f *testing.F) {
	for _, s := range []string{"a: 1\n", "a:\n\tb: 1\n", "a: [1\n", "- a\nb: 1\n", "&x a: *x\n", "\"unterminated\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if e := Locate(data); e != nil && (e.Line < 1 || e.Column < 1) {
			t.Fatalf("position %d:%d", e.Line, e.Column)
		}
	})
}
