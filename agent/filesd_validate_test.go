package agent

import (
	"bytes"
	"encoding/json"
	"net"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"unicode/utf8"
)

var promLabel = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// validateFileSD checks data against Prometheus's file SD format, independently of
// package filesd: a JSON list of {targets: [host:port], labels: {name: value}}, label
// names matching Prometheus's regex and not reserved, targets that net.SplitHostPort
// splits (so IPv6 must be bracketed). It returns every target, sorted.
func validateFileSD(t *testing.T, data []byte) []string {
	t.Helper()
	var groups []struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&groups); err != nil || groups == nil {
		t.Fatalf("file_sd is not a list of target groups: %v\n%s", err, data)
	}
	var all []string
	for i, g := range groups {
		if len(g.Targets) == 0 {
			t.Fatalf("group %d has no targets", i)
		}
		for name, value := range g.Labels {
			if !promLabel.MatchString(name) || name[:min(2, len(name))] == "__" {
				t.Fatalf("group %d: label name %q is not a valid, unreserved Prometheus label", i, name)
			}
			if !utf8.ValidString(value) {
				t.Fatalf("group %d: label %s is not UTF-8", i, name)
			}
		}
		for _, k := range []string{"cluster", "service", "protocol"} {
			if g.Labels[k] == "" {
				t.Fatalf("group %d lacks the %s label: %v", i, k, g.Labels)
			}
		}
		for _, tg := range g.Targets {
			host, port, err := net.SplitHostPort(tg)
			if err != nil || net.ParseIP(host) == nil {
				t.Fatalf("group %d: target %q is not host:port: %v", i, tg, err)
			}
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				t.Fatalf("group %d: target %q has a bad port", i, tg)
			}
			all = append(all, tg)
		}
	}
	slices.Sort(all)
	return all
}
