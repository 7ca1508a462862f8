package filesd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"unicode/utf8"
)

// promLabelName is Prometheus's (legacy) label name rule, which every Prometheus
// version accepts.
var promLabelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// Parse reads a file_sd document and checks it against Prometheus's file SD rules: a
// JSON list of {targets: [host:port…], labels: {name: value}}, label names matching
// ^[a-zA-Z_][a-zA-Z0-9_]*$, values valid UTF-8, targets host:port with IPv6 in
// brackets. Scripts and tests use it to check what Groups produced.
func Parse(data []byte) ([]TargetGroup, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var groups []TargetGroup
	if err := dec.Decode(&groups); err != nil {
		return nil, fmt.Errorf("file_sd: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("file_sd: data after the JSON list")
	}
	if groups == nil {
		return nil, fmt.Errorf("file_sd: want a JSON list, got null")
	}
	for i, g := range groups {
		if err := checkGroup(g); err != nil {
			return nil, fmt.Errorf("file_sd: group %d: %w", i, err)
		}
	}
	return groups, nil
}

func checkGroup(g TargetGroup) error {
	for name, value := range g.Labels {
		if !promLabelName.MatchString(name) {
			return fmt.Errorf("label name %q: must match %s", name, promLabelName)
		}
		if !utf8.ValidString(value) {
			return fmt.Errorf("label %s: value is not valid UTF-8", name)
		}
	}
	for _, t := range g.Targets {
		if err := checkTarget(t); err != nil {
			return err
		}
	}
	return nil
}

func checkTarget(t string) error {
	host, port, err := net.SplitHostPort(t)
	if err != nil {
		return fmt.Errorf("target %q: %w", t, err)
	}
	if host == "" {
		return fmt.Errorf("target %q: no host", t)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("target %q: port must be 1..65535", t)
	}
	return nil
}
