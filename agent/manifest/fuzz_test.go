package manifest

import "testing"

func FuzzParse(f *testing.F) {
	f.Add([]byte(full))
	f.Add([]byte("entries: []"))
	f.Add([]byte("entries:\n  - {cluster: c, service: s, protocol: p, address: '::1', port: 1, checks: [{exec: [true]}]}\n"))
	f.Add([]byte("entries:\n  - &a {cluster: c}\n  - *a\n"))
	f.Add([]byte("entries: [[[]]]"))
	f.Add([]byte("entries:\n  - port: !!binary aGVsbG8=\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			return
		}
		// Whatever parses must be what the agent can use without further checks.
		seen := map[string]bool{}
		for i, e := range m.Entries {
			if err := e.Endpoint.Validate(); err != nil {
				t.Fatalf("entry %d accepted but invalid: %v", i, err)
			}
			k := e.Endpoint.Key().String()
			if seen[k] {
				t.Fatalf("entry %d duplicates key %s", i, k)
			}
			seen[k] = true
			for j, c := range e.Checks {
				if err := c.Validate(); err != nil {
					t.Fatalf("entry %d check %d accepted but invalid: %v", i, j, err)
				}
			}
		}
	})
}
