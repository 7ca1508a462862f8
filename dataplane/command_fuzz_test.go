package dataplane

import (
	"bytes"
	"encoding/json"
	"testing"

	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
)

// FuzzParseConnConfig: whatever the control plane sends as a link's endpoint and
// config_json, parseConnConfig does not panic; what it accepts is a JSON object and a
// non-empty endpoint (the Connection's own, else the config's "endpoint"), and
// accepting it again gives the same answer.
func FuzzParseConnConfig(f *testing.F) {
	f.Add("", "")
	f.Add("10.0.0.5:46357", "")
	f.Add("", `{"endpoint":"gw.example.com:46357","link_id":"cp-1","tls":{"insecure":true},"segments":["dev"]}`)
	f.Add("10.0.0.5:46357", `{"endpoint":"other:1","backoff_initial":"1s","keepalive_interval":"30s"}`)
	f.Add("", `{"endpoint":42}`)
	f.Add("a:1", `[1,2]`)
	f.Add("a:1", `null`)
	f.Add("a:1", `{"segments":null} `)
	f.Fuzz(func(t *testing.T, endpoint, config string) {
		conn := &controllerv1.Connection{LinkId: "L", Endpoint: endpoint, ConfigJson: config}
		raw, got, err := parseConnConfig(conn)
		if err != nil {
			return
		}
		var fields map[string]any
		if jerr := json.Unmarshal(raw, &fields); jerr != nil || fields == nil {
			t.Fatalf("accepted config %q, which is not a JSON object (%v)", raw, jerr)
		}
		want := endpoint
		if want == "" {
			want, _ = fields["endpoint"].(string)
		}
		if got == "" || got != want {
			t.Fatalf("endpoint %q, want %q (field %q, config %q)", got, want, endpoint, config)
		}
		raw2, got2, err := parseConnConfig(&controllerv1.Connection{LinkId: "L", Endpoint: endpoint, ConfigJson: string(raw)})
		if err != nil || got2 != got || !bytes.Equal(raw2, raw) {
			t.Fatalf("accepting %q again: %q %q %v, want %q %q", raw, raw2, got2, err, raw, got)
		}
	})
}
