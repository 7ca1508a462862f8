package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/yamlpos"
)

// nodeBudget bounds the nodes visited, so aliases that expand exponentially ("billion
// laughs") fail instead of exhausting memory.
const nodeBudget = 1 << 20

// Parse parses and validates a manifest, taking every value literally (see ParseEnv).
func Parse(data []byte) (*Manifest, error) { return parse(data, nil) }

// parse decodes the YAML, lets rewrite change the node tree (nil: no change), then
// parses and validates the manifest.
func parse(data []byte, rewrite func(*yaml.Node) error) (*Manifest, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{Err: errors.New("empty: want a top-level entries: list")}
		}
		// yaml.v3 places many syntax errors at the start of the enclosing block;
		// say where the offending token is when it can be found.
		if at := yamlpos.Locate(data, err); at != nil {
			return nil, &Error{Line: at.Line, Column: at.Column, Err: fmt.Errorf("YAML: %s", at.Msg)}
		}
		return nil, &Error{Err: fmt.Errorf("YAML: %w", err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, &Error{Line: extra.Line, Column: extra.Column, Err: errors.New("want one YAML document, found another")}
	}
	if rewrite != nil {
		if err := rewrite(&doc); err != nil {
			return nil, err
		}
	}
	p := &parser{budget: nodeBudget}
	m, err := p.manifest(&doc)
	if err != nil {
		return nil, err
	}
	return m, nil
}

type parser struct{ budget int }

// resolve follows aliases and charges the budget.
func (p *parser) resolve(n *yaml.Node) (*yaml.Node, error) {
	for n.Kind == yaml.AliasNode || n.Kind == yaml.DocumentNode {
		if n.Kind == yaml.AliasNode {
			n = n.Alias
		} else if len(n.Content) == 1 {
			n = n.Content[0]
		} else {
			return nil, &Error{Line: n.Line, Column: n.Column, Err: errors.New("empty document")}
		}
	}
	p.budget--
	if p.budget < 0 {
		return nil, &Error{Line: n.Line, Column: n.Column, Err: errors.New("too many YAML nodes (alias expansion?)")}
	}
	return n, nil
}

// fields walks a mapping node, rejecting duplicate and unknown keys; fn handles one
// known key.
func (p *parser) fields(n *yaml.Node, path string, known []string, fn func(key string, v *yaml.Node) error) error {
	n, err := p.resolve(n)
	if err != nil {
		return err
	}
	if n.Kind != yaml.MappingNode {
		return &Error{Line: n.Line, Column: n.Column, Path: path, Err: fmt.Errorf("want a mapping, got %s", kindName(n))}
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return &Error{Line: k.Line, Column: k.Column, Path: path, Err: errors.New("keys must be plain strings")}
		}
		if seen[k.Value] {
			return &Error{Line: k.Line, Column: k.Column, Path: join(path, k.Value), Err: errors.New("key appears twice")}
		}
		seen[k.Value] = true
		if !slices.Contains(known, k.Value) {
			return &Error{Line: k.Line, Column: k.Column, Path: path, Err: fmt.Errorf("unknown key %q (known: %s)", k.Value, strings.Join(known, ", "))}
		}
		if err := fn(k.Value, v); err != nil {
			return err
		}
	}
	return nil
}

func (p *parser) manifest(doc *yaml.Node) (*Manifest, error) {
	m := &Manifest{}
	found := false
	err := p.fields(doc, "", []string{"entries"}, func(_ string, v *yaml.Node) error {
		found = true
		return p.seq(v, "entries", func(i int, item *yaml.Node) error {
			e, err := p.entry(item, fmt.Sprintf("entries[%d]", i))
			if err != nil {
				return err
			}
			m.Entries = append(m.Entries, e)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, &Error{Line: 1, Err: errors.New("want a top-level entries: list")}
	}
	return m, checkDuplicates(m.Entries)
}

// seq walks a sequence node; a null value counts as an empty sequence.
func (p *parser) seq(n *yaml.Node, path string, fn func(i int, item *yaml.Node) error) error {
	n, err := p.resolve(n)
	if err != nil {
		return err
	}
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return &Error{Line: n.Line, Column: n.Column, Path: path, Err: fmt.Errorf("want a list, got %s", kindName(n))}
	}
	for i, item := range n.Content {
		if err := fn(i, item); err != nil {
			return err
		}
	}
	return nil
}

func checkDuplicates(entries []Entry) error {
	first := map[endpoint.Key]int{}
	for i, e := range entries {
		k := e.Endpoint.Key()
		if j, dup := first[k]; dup {
			return &Error{Line: e.Line, Path: fmt.Sprintf("entries[%d]", i), Err: fmt.Errorf("same endpoint as entries[%d] (%s)", j, k)}
		}
		first[k] = i
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}

// scalar returns a scalar's text; null is "".
func (p *parser) scalar(n *yaml.Node, path string) (string, error) {
	n, err := p.resolve(n)
	if err != nil {
		return "", err
	}
	if n.Kind != yaml.ScalarNode {
		return "", &Error{Line: n.Line, Column: n.Column, Path: path, Err: fmt.Errorf("want a single value, got %s", kindName(n))}
	}
	if isNull(n) {
		return "", nil
	}
	return n.Value, nil
}

func (p *parser) integer(n *yaml.Node, path string) (int, error) {
	n, err := p.resolve(n)
	if err != nil {
		return 0, err
	}
	var v int
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		return 0, &Error{Line: n.Line, Column: n.Column, Path: path, Err: fmt.Errorf("want an integer, got %s", kindName(n))}
	}
	return v, nil
}

func (p *parser) duration(n *yaml.Node, path string) (time.Duration, error) {
	s, err := p.scalar(n, path)
	if err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, &Error{Line: n.Line, Column: n.Column, Path: path, Err: fmt.Errorf("want a duration such as 5s, got %q", s)}
	}
	return d, nil
}

func (p *parser) stringMap(n *yaml.Node, path string) (map[string]string, error) {
	n, err := p.resolve(n)
	if err != nil {
		return nil, err
	}
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, &Error{Line: n.Line, Column: n.Column, Path: path, Err: fmt.Errorf("want a mapping of strings, got %s", kindName(n))}
	}
	out := make(map[string]string, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, err := p.scalar(n.Content[i], path)
		if err != nil {
			return nil, err
		}
		if _, dup := out[k]; dup {
			return nil, &Error{Line: n.Content[i].Line, Column: n.Content[i].Column, Path: path + "[" + k + "]", Err: errors.New("key appears twice")}
		}
		// Values are taken as written, so `prometheus.io/scrape: true` needs no quotes.
		if out[k], err = p.scalar(n.Content[i+1], path+"["+k+"]"); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (p *parser) stringList(n *yaml.Node, path string) ([]string, error) {
	var out []string
	err := p.seq(n, path, func(i int, item *yaml.Node) error {
		s, err := p.scalar(item, fmt.Sprintf("%s[%d]", path, i))
		out = append(out, s)
		return err
	})
	return out, err
}
