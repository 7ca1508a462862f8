package manifest

import (
	"errors"
	"strings"
	"testing"
)

// TestErrorsNameLineAndColumn: a manifest error points at the offending key: a
// mis-indented key is found where it is, not at the top of its block.
func TestErrorsNameLineAndColumn(t *testing.T) {
	cases := []struct {
		name, doc, want string
	}{
		{"key outdented out of its entry",
			"entries:\n  - cluster: prod\n    service: web\n    protocol: http\n    address: 10.0.0.2\n  checks:\n    - tcp: 127.0.0.1:1\n",
			"line 6, column 3"},
		{"check key outdented",
			"entries:\n- cluster: prod\n  service: web\n  protocol: http\n  address: 10.0.0.2\n  checks:\n  - tcp: 127.0.0.1:1\n    interval: 5s\n   timeout: 1s\n",
			"line 9, column 4"},
		{"unknown key",
			"entries:\n  - cluster: prod\n    service: web\n    protocol: http\n    address: 10.0.0.2\n    checks:\n    - http: http://127.0.0.1/\n      expect_status: 200\n    intervall: 5s\n",
			`line 9, column 5: entries[0]: unknown key "intervall"`},
		{"bad value",
			"entries:\n  - cluster: prod\n    service: web\n    protocol: http\n    address: 10.0.0.2\n    port: eighty\n",
			"line 6, column 11: entries[0].port"},
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
