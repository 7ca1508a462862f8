package yamlpos

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"gopkg.in/yaml.v3"
)

// v3Error is what yaml.v3 says about doc.
func v3Error(doc []byte) error {
	var n yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	for {
		if err := dec.Decode(&n); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

func TestLocate(t *testing.T) {
	cases := []struct {
		name      string
		doc       string
		line, col int
	}{
		// yaml.v3 says line 1 for these: the top of the block.
		{"key outdented out of a list item", "entries:\n  - cluster: prod\n    service: web\n  checks:\n    - tcp: 127.0.0.1:1\n", 4, 3},
		{"list item outdented", "topology:\n  links:\n    - group: cloud\n  - group: edge\n", 4, 3},
		{"unclosed flow list", "a: [1, 2\nb: 3\n", 2, 1},
		{"tab indentation", "a:\n\tb: 1\n", 2, 1},
		// yaml.v3 names the line; the other parser would blame the value before it.
		{"key over-indented", "a:\n  b: 1\n  c: 2\n   d: 3\n", 4, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc := []byte(c.doc)
			e := Locate(doc, v3Error(doc))
			if e == nil {
				t.Fatal("no syntax error found")
			}
			if e.Line != c.line || e.Column != c.col || e.Msg == "" {
				t.Fatalf("got %v (line %d, column %d), want line %d, column %d", e, e.Line, e.Column, c.line, c.col)
			}
		})
	}
	if e := Locate([]byte("a: 1\nb: [2]\n"), nil); e != nil {
		t.Fatalf("valid YAML: %v", e)
	}
}

func FuzzLocate(f *testing.F) {
	for _, s := range []string{"a: 1\n", "a:\n\tb: 1\n", "a: [1\n", "- a\nb: 1\n", "&x a: *x\n", "\"unterminated\n", "a:\n  b: 1\n   c: 2\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if e := Locate(data, v3Error(data)); e != nil && (e.Line < 1 || e.Column < 0) {
			t.Fatalf("position %d:%d", e.Line, e.Column)
		}
	})
}
