package config

import (
	"errors"
	"strings"
	"testing"
)

// TestErrorsNameLineAndColumn: every config error says where the offending key is,
// beside its path.
func TestErrorsNameLineAndColumn(t *testing.T) {
	cases := []struct {
		name, doc, want string
	}{
		{"unknown key", "northbound:\n  endpoint: 127.0.0.1:1\n  endpiont: 127.0.0.1:2\n", "line 3, column 3: northbound.endpiont: unknown key"},
		{"bad value", "reconciler:\n  workers: 2\n  base_retry_delay: soon\n", "line 3, column 21: reconciler.base_retry_delay"},
		{"mis-indented key", "northbound:\n  endpoint: 127.0.0.1:1\nsouthbound:\n  endpoint: 127.0.0.1:2\n   tls: {}\n", "line 5: mapping values are not allowed"},
		{"outdented list item", "topology:\n  links:\n    - group: cloud\n      neighbors: ['*']\n  - group: edge\n", "line 5, column 3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.doc))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to contain %q", err, c.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not match ErrInvalid", err)
			}
		})
	}
}
