package render

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/template"
	"unicode"
	"unicode/utf8"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// helpers write a value so that it cannot change the structure of the file it is
// rendered into; raw writes it as stored. Each takes any value: a string, a refused
// value (which the escaping helpers write escaped, so it is not refused) or anything
// else, formatted as text/template would print it.
var helpers = template.FuncMap{
	"quote":      quote,
	"json":       jsonText,
	"shellquote": shellquote,
	"nginx":      nginx,
	"haproxy":    haproxy,
	"raw":        raw,
}

// text is the text v stands for, and the refused value it came from, if any.
func text(v any) (string, *refused) {
	switch v := v.(type) {
	case refused:
		return v.r.value, &v
	case string:
		return v, nil
	}
	// A value holding refused ones (a map, an endpoint) prints them as nothing, and
	// the printing refuses them.
	return fmt.Sprint(v), nil
}

// raw is v as stored: a template that asks for it takes on what the value does to
// the file.
func raw(v any) any {
	if r, ok := v.(refused); ok {
		return r.r.value
	}
	return v
}

// quote double-quotes v with the backslash escapes that JSON, YAML, TOML and Go
// strings read alike: \" \\ \n \r \t, and \uXXXX for every other control character
// and for U+2028 and U+2029, which end a line in JavaScript.
func quote(v any) string {
	s, _ := text(v)
	out, _ := doubleQuote(s, `"\`, func(b *strings.Builder, r rune) (bool, error) {
		if !unicode.IsControl(r) && r != '\u2028' && r != '\u2029' {
			return false, nil
		}
		fmt.Fprintf(b, `\u%04x`, r)
		return true, nil
	})
	return out
}

// doubleQuote writes s between double quotes: the runes in escaped behind a
// backslash, newline, carriage return and tab as \n, \r and \t, and every other rune
// as itself unless other writes it (true) or refuses it (an error). The quoting
// helpers differ only in escaped and other.
func doubleQuote(s, escaped string, other func(*strings.Builder, rune) (bool, error)) (string, error) {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case strings.ContainsRune(escaped, r):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		default:
			handled, err := other(&b, r)
			if err != nil {
				return "", err
			}
			if !handled {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String(), nil
}

// jsonText is v as compact JSON, as encoding/json writes it (< > & escaped too).
// Endpoints take their payload form.
func jsonText(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("json: %w", err)
	}
	return escapeControls(string(b)), nil
}

// escapeControls escapes the control characters encoding/json leaves as they are
// (U+007F-U+009F), and U+2028 and U+2029 should it ever leave them. Compact JSON has
// them only inside strings, where \u escapes are valid.
func escapeControls(s string) string {
	if !endpoint.HasControl(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			fmt.Fprintf(&b, `\u%04x`, r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// shellquote single-quotes v for a POSIX shell: inside single quotes every character
// is literal, and a single quote is written '\”. A POSIX shell has no escape for a
// control character, and a newline kept literal would still end a line of any file
// that is not a shell script: a value holding one is refused.
func shellquote(v any) (string, error) {
	s, from := text(v)
	if i := strings.IndexFunc(s, unicode.IsControl); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		return "", cannotQuote("shellquote", fmt.Sprintf("control character %U", r), from)
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'", nil
}

// nginx double-quotes v as one nginx token: \" and \\ escaped; newline, carriage
// return and tab as \n, \r and \t, which nginx reads back. nginx has no escape for
// other control characters: a value holding one is refused. nginx still expands $name
// in a directive that takes variables.
func nginx(v any) (string, error) {
	s, from := text(v)
	return doubleQuote(s, `"\`, func(_ *strings.Builder, r rune) (bool, error) {
		if unicode.IsControl(r) {
			return false, cannotQuote("nginx", fmt.Sprintf("control character %U", r), from)
		}
		return false, nil
	})
}

// haproxy double-quotes v as one HAProxy argument (weak quoting): \" \\ and \$ (no
// environment variable is expanded) escaped, newline, carriage return and tab as \n,
// \r and \t, and every other control character as \xHH escapes of its bytes, but for
// NUL: HAProxy keeps arguments as C strings, which a NUL would cut short, so a value
// holding one is refused.
func haproxy(v any) (string, error) {
	s, from := text(v)
	return doubleQuote(s, `"\$`, func(b *strings.Builder, r rune) (bool, error) {
		switch {
		case r == 0:
			return false, cannotQuote("haproxy", "a NUL byte", from)
		case !unicode.IsControl(r):
			return false, nil
		}
		for _, c := range utf8.AppendRune(nil, r) {
			fmt.Fprintf(b, `\x%02x`, c)
		}
		return true, nil
	})
}

// cannotQuote refuses a value a helper cannot write safely. A refused value is
// refused as if printed, which leaves its endpoint out; anything else came from the
// template itself, whose author is told.
func cannotQuote(helper, what string, from *refused) error {
	if from != nil {
		from.refuse()
		return nil
	}
	return errors.New(helper + ": " + what + " cannot be quoted")
}
