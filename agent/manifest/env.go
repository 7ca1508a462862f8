package manifest

import (
	"fmt"
	"os"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// envRef matches ${NAME}, and $${ as the escape for a literal "${".
var envRef = regexp.MustCompile(`\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// ParseEnv parses a manifest after replacing ${NAME} in every value with the
// environment variable NAME, as lookup reports it: a DaemonSet's manifest can say
// `address: ${NODE_IP}` and every node registers its own address. An unset variable is
// an error naming it and its line; "$${" stands for a literal "${". Keys are never
// expanded.
func ParseEnv(data []byte, lookup func(string) (string, bool)) (*Manifest, error) {
	return parse(data, func(doc *yaml.Node) error { return expandEnv(doc, lookup, map[*yaml.Node]bool{}) })
}

// loadEnv is what Load parses with: ParseEnv over the process environment.
func loadEnv(data []byte) (*Manifest, error) { return ParseEnv(data, os.LookupEnv) }

// expandEnv rewrites the scalar values under n in place. An alias target is visited
// once, however many aliases point at it.
func expandEnv(n *yaml.Node, lookup func(string) (string, bool), seen map[*yaml.Node]bool) error {
	if n == nil || seen[n] {
		return nil
	}
	seen[n] = true
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			if err := expandEnv(c, lookup, seen); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			if err := expandEnv(n.Content[i], lookup, seen); err != nil {
				return err
			}
		}
	case yaml.AliasNode:
		return expandEnv(n.Alias, lookup, seen)
	case yaml.ScalarNode:
		return expandScalar(n, lookup)
	}
	return nil
}

func expandScalar(n *yaml.Node, lookup func(string) (string, bool)) error {
	if !strings.Contains(n.Value, "${") {
		return nil
	}
	var missing string
	out := envRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
		if ref == "$${" {
			return "${"
		}
		name := ref[2 : len(ref)-1]
		v, ok := lookup(name)
		if !ok && missing == "" {
			missing = name
		}
		return v
	})
	if missing != "" {
		return &Error{Line: n.Line, Column: n.Column, Err: fmt.Errorf("${%s} is not set in the environment", missing)}
	}
	n.Value = out
	if n.Style == 0 || n.Style == yaml.FlowStyle {
		// An unquoted value is typed by what it expands to: `port: ${PORT}` is an
		// integer once PORT is known.
		var typed yaml.Node
		if err := yaml.Unmarshal([]byte(out), &typed); err == nil && len(typed.Content) == 1 && typed.Content[0].Kind == yaml.ScalarNode {
			n.Tag = typed.Content[0].Tag
		} else {
			n.Tag = "!!str"
		}
	}
	return nil
}
