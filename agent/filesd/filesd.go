package filesd

import (
	"cmp"
	"encoding/json"
	"slices"
	"strings"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// ScrapeAnnotation opts an endpoint in ("true") or out (anything else).
const ScrapeAnnotation = "prometheus.io/scrape"

// TargetGroup is one element of a file_sd file.
type TargetGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// Scraped reports whether Prometheus should scrape e.
func Scraped(e endpoint.Endpoint) bool {
	if e.Port == 0 {
		return false
	}
	if v, ok := e.Annotations[ScrapeAnnotation]; ok {
		return v == "true"
	}
	return e.Service == "prometheus" || e.Protocol == "prometheus"
}

// LabelName reports whether s is a Prometheus label name an annotation may set:
// ^[a-zA-Z_][a-zA-Z0-9_]*$ and not reserved (leading "__").
func LabelName(s string) bool {
	if s == "" || strings.HasPrefix(s, "__") {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// Groups returns the target groups for eps in a stable order: by cluster, service,
// protocol, then the remaining labels; targets keep the order of eps, so sorted input
// (as List returns it) gives targets sorted by address then port.
func Groups(eps []endpoint.Endpoint) []TargetGroup {
	type group struct {
		sig string
		tg  TargetGroup
	}
	index := map[string]*group{}
	var groups []*group
	var sig []byte
	var keys []string
	for _, e := range eps {
		if !Scraped(e) {
			continue
		}
		sig, keys = signature(sig[:0], keys[:0], e)
		g := index[string(sig)] // no allocation for the lookup
		if g == nil {
			g = &group{sig: string(sig), tg: TargetGroup{Labels: labelsOf(e)}}
			index[g.sig] = g
			groups = append(groups, g)
		}
		g.tg.Targets = append(g.tg.Targets, endpoint.HostPort(e.Address, e.Port))
	}
	slices.SortFunc(groups, func(a, b *group) int {
		return cmp.Or(
			cmp.Compare(a.tg.Labels["cluster"], b.tg.Labels["cluster"]),
			cmp.Compare(a.tg.Labels["service"], b.tg.Labels["service"]),
			cmp.Compare(a.tg.Labels["protocol"], b.tg.Labels["protocol"]),
			cmp.Compare(a.sig, b.sig),
		)
	})
	out := make([]TargetGroup, len(groups))
	for i, g := range groups {
		out[i] = g.tg
	}
	return out
}

// labelsOf returns the group labels of e; the identity labels win over annotations
// of the same name.
func labelsOf(e endpoint.Endpoint) map[string]string {
	labels := make(map[string]string, 3+len(e.Annotations))
	for k, v := range e.Annotations {
		if LabelName(k) {
			labels[k] = v
		}
	}
	labels["cluster"], labels["service"], labels["protocol"] = e.Cluster, e.Service, e.Protocol
	return labels
}

// signature appends e's label set to sig in one canonical form: the identity labels,
// then the annotation labels sorted by name. Names cannot contain 0xfe or 0xff, and
// values are valid UTF-8, which never contains those bytes, so distinct label sets
// give distinct signatures. keys is scratch space, returned for reuse.
func signature(sig []byte, keys []string, e endpoint.Endpoint) ([]byte, []string) {
	for _, v := range [...]string{e.Cluster, e.Service, e.Protocol} {
		sig = append(append(sig, v...), 0xff)
	}
	for k := range e.Annotations {
		if LabelName(k) && k != "cluster" && k != "service" && k != "protocol" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		sig = append(append(append(append(sig, k...), 0xfe), e.Annotations[k]...), 0xff)
	}
	return sig, keys
}

// Marshal renders groups as a file_sd JSON document, indented, ending in a newline.
// No groups gives "[]", which Prometheus reads as "no targets".
func Marshal(groups []TargetGroup) ([]byte, error) {
	if groups == nil {
		groups = []TargetGroup{}
	}
	b, err := json.MarshalIndent(groups, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Build is Marshal(Groups(eps)).
func Build(eps []endpoint.Endpoint) ([]byte, error) { return Marshal(Groups(eps)) }
