package endpoint

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// TTL is how long a registration lives unless refreshed. The zero value means "not
// set": the backend's default applies (the stream's MaxAge for JetStream, no expiry
// elsewhere). Never means the entry outlives any stream-wide limit.
type TTL time.Duration

// Never is the TTL of an entry that never expires, not even under a stream MaxAge.
const Never TTL = -1

// MinTTL is the shortest TTL accepted: NATS's per-message TTL has one-second
// resolution, and every backend must honour the same values.
const MinTTL = TTL(time.Second)

// IsNever reports whether t is Never.
func (t TTL) IsNever() bool { return t == Never }

// IsSet reports whether t is a duration or Never, as opposed to unset.
func (t TTL) IsSet() bool { return t != 0 }

// Duration returns t as a duration; Never and unset return 0.
func (t TTL) Duration() time.Duration {
	if t <= 0 {
		return 0
	}
	return time.Duration(t)
}

// String renders t in its text form: "never", a Go duration such as "30s", or "" when
// unset.
func (t TTL) String() string {
	switch {
	case t == Never:
		return "never"
	case t == 0:
		return ""
	default:
		return time.Duration(t).String()
	}
}

// ParseTTL parses the text form of a TTL: "never", a Go duration ("30s", "1m30s"), or
// "" for unset. Durations must be whole seconds of at least one second.
func ParseTTL(s string) (TTL, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "":
		return 0, nil
	case "never":
		return Never, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("ttl %q: want a duration such as \"30s\" or \"never\"", s)
	}
	t := TTL(d)
	if err := t.check(); err != nil {
		return 0, err
	}
	return t, nil
}

func (t TTL) check() error {
	switch {
	case t == Never || t == 0:
		return nil
	case t < 0:
		return fmt.Errorf("ttl %s: must not be negative (use \"never\")", time.Duration(t))
	case t < MinTTL:
		return fmt.Errorf("ttl %s: must be at least %s", time.Duration(t), time.Duration(MinTTL))
	case time.Duration(t)%time.Second != 0:
		return fmt.Errorf("ttl %s: must be whole seconds", time.Duration(t))
	}
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (t TTL) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (t *TTL) UnmarshalText(b []byte) error {
	v, err := ParseTTL(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// MarshalJSON writes the text form as a JSON string.
func (t TTL) MarshalJSON() ([]byte, error) { return json.Marshal(t.String()) }

// UnmarshalJSON accepts the text form as a JSON string; null leaves t unset.
func (t *TTL) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*t = 0
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("ttl: want a string such as \"30s\" or \"never\", got %s", b)
	}
	return t.UnmarshalText([]byte(s))
}

// MarshalYAML writes the text form.
func (t TTL) MarshalYAML() (any, error) { return t.String(), nil }

// UnmarshalYAML accepts the text form.
func (t *TTL) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: ttl: want a duration such as \"30s\" or \"never\"", n.Line)
	}
	if err := t.UnmarshalText([]byte(n.Value)); err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	return nil
}
