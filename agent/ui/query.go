package ui

import (
	"errors"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The page takes one query parameter, entry: a filter on the entries' keys and
// sources. Anything else is refused, so that a typo is not silently ignored and
// nothing unchecked reaches a template.
const (
	paramEntry = "entry"
	maxQuery   = 1024 // bytes of the raw query string
	maxFilter  = 128  // bytes of the entry filter
)

// parseQuery validates a raw query string and returns the entry filter. Its errors
// are short, fixed texts that never repeat the input: they are answered as they are.
func parseQuery(raw string) (filter string, err error) {
	if len(raw) > maxQuery {
		return "", errors.New("query string too long")
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return "", errors.New("malformed query string")
	}
	for k, vs := range q {
		if k != paramEntry {
			return "", errors.New("unknown query parameter: the page takes only entry")
		}
		if len(vs) > 1 {
			return "", errors.New("entry: give it once")
		}
	}
	filter = q.Get(paramEntry)
	switch {
	case len(filter) > maxFilter:
		return "", errors.New("entry: longer than 128 bytes")
	case !utf8.ValidString(filter):
		return "", errors.New("entry: not valid UTF-8")
	case strings.ContainsFunc(filter, isControl):
		return "", errors.New("entry: control characters are not allowed")
	}
	return strings.TrimSpace(filter), nil
}

// isControl matches what endpoint names may not hold either: C0 and C1 controls and
// the line and paragraph separators.
func isControl(r rune) bool { return unicode.IsControl(r) || r == '\u2028' || r == '\u2029' }
