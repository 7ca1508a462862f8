package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// maxNodes bounds the nodes one parse visits, so aliases that expand exponentially fail
// instead of running away.
const maxNodes = 100_000

// decoder walks the YAML node tree, collecting every error with the path of its key.
type decoder struct {
	errs   []error
	budget int
}

func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	e := &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	d.errs = append(d.errs, e)
}

// resolve follows aliases and spends budget; nil means "stop here".
func (d *decoder) resolve(n *yaml.Node, path string) *yaml.Node {
	for depth := 0; n != nil && n.Kind == yaml.AliasNode; depth++ {
		if depth > 32 {
			d.fail(n, path, "aliases nest too deep")
			return nil
		}
		n = n.Alias
	}
	if d.budget--; d.budget < 0 {
		if d.budget == -1 {
			d.fail(n, path, "document too large (more than %d nodes after expanding aliases)", maxNodes)
		}
		return nil
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

type fieldFunc func(n *yaml.Node, path string)

// mapping decodes a mapping whose keys must all be in fields. A null value counts as an
// empty mapping so that "section:" keeps the defaults.
func (d *decoder) mapping(n *yaml.Node, path string, fields map[string]fieldFunc) {
	if n = d.resolve(n, path); n == nil || isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "must be a mapping")
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k.Value
		sub := join(path, key)
		switch fn, ok := fields[key]; {
		case k.Kind != yaml.ScalarNode:
			d.fail(k, path, "keys must be strings")
		case seen[key]:
			d.fail(k, sub, "duplicate key")
		case !ok:
			d.fail(k, sub, "unknown key (known: %s)", knownKeys(fields))
		default:
			seen[key] = true
			fn(v, sub)
		}
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func knownKeys(fields map[string]fieldFunc) string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, ", ")
}

// sequence calls fn for each item of a sequence; null is an empty sequence.
func (d *decoder) sequence(n *yaml.Node, path string, fn func(n *yaml.Node, path string)) int {
	if n = d.resolve(n, path); n == nil || isNull(n) {
		return 0
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "must be a list")
		return 0
	}
	for i, item := range n.Content {
		fn(item, fmt.Sprintf("%s[%d]", path, i))
	}
	return len(n.Content)
}

// scalar returns a scalar node with one of the tags, or nil after recording an error.
func (d *decoder) scalar(n *yaml.Node, path, what string, tags ...string) *yaml.Node {
	if n = d.resolve(n, path); n == nil {
		return nil
	}
	if n.Kind != yaml.ScalarNode || !slices.Contains(tags, n.ShortTag()) {
		d.fail(n, path, "must be %s, not %s", what, describe(n))
		return nil
	}
	return n
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.ShortTag() {
	case "!!null":
		return "empty"
	case "!!str":
		return fmt.Sprintf("the string %q", n.Value)
	}
	return n.Value
}

func (d *decoder) str(n *yaml.Node, path string, out *string) bool {
	if n = d.scalar(n, path, "a string", "!!str"); n == nil {
		return false
	}
	*out = n.Value
	return true
}

func (d *decoder) boolean(n *yaml.Node, path string, out *bool) {
	if n = d.scalar(n, path, "true or false", "!!bool"); n != nil {
		if err := n.Decode(out); err != nil {
			d.fail(n, path, "%q is not a boolean", n.Value)
		}
	}
}

// integer decodes an int within [lo, hi].
func (d *decoder) integer(n *yaml.Node, path string, lo, hi int, out *int) {
	if n = d.scalar(n, path, "an integer", "!!int"); n == nil {
		return
	}
	var v int
	if err := n.Decode(&v); err != nil {
		d.fail(n, path, "%q is not an integer", n.Value)
		return
	}
	if v < lo || v > hi {
		d.fail(n, path, "%d is out of range %d..%d", v, lo, hi)
		return
	}
	*out = v
}

// duration decodes a Go duration string such as "200ms"; zero is allowed only if
// allowZero, negatives never.
func (d *decoder) duration(n *yaml.Node, path string, allowZero bool, out *time.Duration) {
	if n = d.resolve(n, path); n == nil {
		return
	}
	if n.Kind != yaml.ScalarNode || isNull(n) {
		d.fail(n, path, "must be a duration such as \"200ms\", not %s", describe(n))
		return
	}
	v, err := time.ParseDuration(n.Value)
	switch {
	case err != nil:
		d.fail(n, path, "%q is not a duration", n.Value)
	case v < 0:
		d.fail(n, path, "%q is negative", n.Value)
	case v == 0 && !allowZero:
		d.fail(n, path, "%q must be greater than zero", n.Value)
	default:
		*out = v
	}
}

// oneOf decodes a string that must be one of allowed.
func (d *decoder) oneOf(n *yaml.Node, path string, out *string, allowed ...string) {
	var v string
	if !d.str(n, path, &v) {
		return
	}
	if !slices.Contains(allowed, v) {
		d.fail(n, path, "%q is not one of %s", v, strings.Join(allowed, ", "))
		return
	}
	*out = v
}
