package endpoint

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrInvalid is matched (errors.Is) by every validation error of this package.
var ErrInvalid = errors.New("invalid endpoint")

// FieldError says which field of an endpoint broke which rule.
type FieldError struct {
	Field string // e.g. "service", "annotations[team]"
	Value string
	Rule  string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("invalid endpoint: %s %q: %s", e.Field, e.Value, e.Rule)
}

// Is makes errors.Is(err, ErrInvalid) true for field errors.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// ReservedAnnotationPrefix starts the annotation keys a backend writes for itself:
// the JetStream backend carries region, zone and health under it, because the
// payload it shares with CCM has no fields for them. Our writes refuse a user
// annotation under it, so that such a key always means what the backend put there;
// reads keep it (another writer may have stored one).
const ReservedAnnotationPrefix = "endpoint.switchboard.dev/"

const (
	maxNameLen       = 253
	maxAnnotations   = 64
	maxAnnotationKey = 253
	maxAnnotationVal = 4096
	namePattern      = `^[a-zA-Z][a-zA-Z0-9_-]*$`
)

// validAnnotationKey reports whether k matches ^[a-zA-Z0-9]([a-zA-Z0-9._/-]*[a-zA-Z0-9])?$
// (a loop rather than the regexp: every write checks every key, and the regexp was most
// of a JetStream registration's validation).
func validAnnotationKey(k string) bool {
	if k == "" || !isAlnum(k[0]) || !isAlnum(k[len(k)-1]) {
		return false
	}
	for i := 1; i < len(k)-1; i++ {
		if c := k[i]; !isAlnum(c) && c != '.' && c != '_' && c != '/' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// validName reports whether s matches namePattern. Written out because every entry a
// backend reads is validated, and a regexp made this half the cost of a lookup.
func validName(s string) bool {
	if s == "" || !isLetter(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !isLetter(c) && !('0' <= c && c <= '9') && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// Validate checks every field against the rules for what Switchboard writes and
// returns the first broken rule as a *FieldError. Every entry point (the registry's
// Apply, the registrar, the agent's manifest, the CLI) calls it before anything is
// stored.
func (e Endpoint) Validate() error { return e.validate(true) }

// ValidateRead checks an entry read back from storage. Read liberally, write
// strictly: the entry is held to Validate's rules, except that its node and annotation
// values may carry the control characters Validate refuses (HasControl), which another
// writer, or an earlier release, may have stored. Such a value stays readable; whatever
// writes it into a file must escape or refuse it, as package agent/render does.
func (e Endpoint) ValidateRead() error { return e.validate(false) }

// validate checks e by the write rules when strict, else by the read rules.
func (e Endpoint) validate(strict bool) error {
	if err := e.Key().Validate(); err != nil {
		return err
	}
	if err := validateNode(e.Node, strict); err != nil {
		return err
	}
	if e.Priority < 1 || e.Priority > 255 {
		return &FieldError{"priority", fmt.Sprint(e.Priority), "must be 1..255"}
	}
	if e.Weight < 0 || e.Weight > 65535 {
		return &FieldError{"weight", fmt.Sprint(e.Weight), "must be 0..65535"}
	}
	if err := validateAnnotations(e.Annotations, strict); err != nil {
		return err
	}
	if err := e.TTL.check(); err != nil {
		return &FieldError{"ttl", e.TTL.String(), err.Error()}
	}
	return e.validateLocality(strict)
}

// ReadablePlace reports whether a read accepts v as a region or zone: any printable
// name without spaces, at most 253 bytes (validateLocality's read rule). A backend
// that carries the place in a form of its own uses it to decide what to lift.
func ReadablePlace(v string) bool { return v != "" && validateNode(v, true) == nil }

// validateLocality checks region, zone and health. Our writes hold region and zone
// to the name rules; a read takes any printable place name another writer stored
// (Azure's zone "1", a "dc1.rack2"), as it takes any node: readers only compare it.
// A health state a reader does not know was mapped to Unhealthy before it got here
// (json.go, proto.go).
func (e Endpoint) validateLocality(strict bool) error {
	for _, f := range [...]struct{ name, value string }{{"region", e.Region}, {"zone", e.Zone}} {
		if f.value == "" {
			continue
		}
		if strict {
			if err := validateName(f.name, f.value); err != nil {
				return err
			}
		} else if err := validateNode(f.value, true); err != nil {
			return &FieldError{f.name, f.value, fmt.Sprintf("must be at most %d printable characters without spaces", maxNameLen)}
		}
	}
	if !e.Health.Valid() {
		return &FieldError{"health", e.Health.String(), "must be healthy, unhealthy or draining"}
	}
	return nil
}

// Validate checks the identity fields: what an unregister needs.
func (k Key) Validate() error {
	for _, f := range [...]struct{ name, value string }{
		{"cluster", k.Cluster}, {"service", k.Service}, {"protocol", k.Protocol},
	} {
		if err := validateName(f.name, f.value); err != nil {
			return err
		}
	}
	if err := validateAddress(k.Address); err != nil {
		return err
	}
	if k.Port < 0 || k.Port > 65535 {
		return &FieldError{"port", fmt.Sprint(k.Port), "must be 0..65535"}
	}
	return nil
}

// ValidateName checks a cluster, service or protocol name; field names the field in
// the error.
func ValidateName(field, value string) error { return validateName(field, value) }

func validateName(field, value string) error {
	switch {
	case value == "":
		return &FieldError{field, value, "is required"}
	case len(value) > maxNameLen:
		return &FieldError{field, value[:32] + "…", fmt.Sprintf("must be at most %d characters", maxNameLen)}
	case !validName(value):
		return &FieldError{field, value, "must match " + namePattern + " (a letter, then letters, digits, '_' or '-')"}
	}
	return nil
}

func validateAddress(s string) error {
	if s == "" {
		return &FieldError{"address", s, "is required"}
	}
	a, err := netip.ParseAddr(s)
	// The canonical form is written into a buffer on the stack and compared as
	// bytes: a.String() allocated for every endpoint validated.
	var buf [64]byte
	switch {
	case err != nil:
		return &FieldError{"address", s, "must be an IPv4 or IPv6 address"}
	case a.Zone() != "":
		return &FieldError{"address", s, "must not carry an IPv6 zone"}
	case string(a.AppendTo(buf[:0])) != s:
		return &FieldError{"address", s, "must be in canonical form (" + a.String() + ")"}
	}
	return nil
}

func validateNode(n string, strict bool) error {
	if n == "" {
		return nil
	}
	// The read rules are those before C1 controls were refused, so that nothing an
	// earlier release stored becomes unreadable.
	bad := isSpaceOrC0
	if strict {
		bad = isSpaceOrControl
	}
	if len(n) > maxNameLen || strings.ContainsFunc(n, bad) || !utf8.ValidString(n) {
		return &FieldError{"node", n, fmt.Sprintf("must be at most %d printable characters without spaces", maxNameLen)}
	}
	return nil
}

func validateAnnotations(m map[string]string, strict bool) error {
	if len(m) > maxAnnotations {
		return &FieldError{"annotations", fmt.Sprintf("%d entries", len(m)), fmt.Sprintf("at most %d are allowed", maxAnnotations)}
	}
	for k, v := range m {
		if len(k) > maxAnnotationKey || !validAnnotationKey(k) {
			return &FieldError{"annotations", k, "key must be letters, digits, '.', '_', '/', '-', starting and ending with a letter or digit"}
		}
		if len(v) > maxAnnotationVal || !utf8.ValidString(v) {
			return &FieldError{"annotations[" + k + "]", truncate(v), fmt.Sprintf("value must be valid UTF-8 of at most %d bytes", maxAnnotationVal)}
		}
		if strict && HasControl(v) {
			return &FieldError{"annotations[" + k + "]", truncate(v), "value must not contain control characters (U+0000-U+001F, U+007F-U+009F) or line separators (U+2028, U+2029)"}
		}
		if strict && strings.HasPrefix(k, ReservedAnnotationPrefix) {
			return &FieldError{"annotations[" + k + "]", truncate(v), "the key prefix " + ReservedAnnotationPrefix + " is reserved for Switchboard's own use"}
		}
	}
	return nil
}

// HasControl reports whether s holds a control character (Unicode category Cc:
// U+0000-U+001F, U+007F-U+009F) or a line or paragraph separator (U+2028, U+2029,
// which end a line in YAML and JavaScript). One can end a line, a statement or a
// block of the file a value is rendered into, so our writes refuse them in names and
// annotation values. Written over bytes: it runs for every value of every endpoint
// rendered.
func HasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c < 0x20 || c == 0x7f:
			return true
		case c == 0xc2 && i+1 < len(s) && s[i+1] >= 0x80 && s[i+1] <= 0x9f:
			// U+0080-U+009F are 0xC2 0x80-0x9F in UTF-8; 0xC2 is never a continuation byte.
			return true
		case c == 0xe2 && i+2 < len(s) && s[i+1] == 0x80 && (s[i+2] == 0xa8 || s[i+2] == 0xa9):
			return true // U+2028, U+2029
		}
	}
	return false
}

// isLineControl is HasControl's test for one rune.
func isLineControl(r rune) bool { return unicode.IsControl(r) || r == '\u2028' || r == '\u2029' }

func isSpaceOrC0(r rune) bool { return r <= ' ' || r == 0x7f }

func isSpaceOrControl(r rune) bool { return r == ' ' || isLineControl(r) }

func truncate(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}
