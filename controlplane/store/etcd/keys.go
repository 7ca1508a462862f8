package etcd

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/controlplane/store/memory"
)

// The key layout under the prefix. Route ids are zero-padded so that etcd's key order
// is their order.
const (
	nodesDir    = "nodes/"
	linksDir    = "links/"
	routesDir   = "routes/"
	segmentsDir = "segments/"
	secretsDir  = "secrets/"
	// routeSeqKey holds the highest route id handed out: ids are never reused, also
	// after the routes that had them are gone.
	routeSeqKey = "meta/route-seq"
	// TermKey holds the election revision of the leader that wrote last.
	TermKey = "meta/term"
)

// DefaultPrefix is where the records live when Options.Prefix is empty.
const DefaultPrefix = "/switchboard/controlplane/"

func nodeKey(id string) string      { return nodesDir + id }
func linkKey(id string) string      { return linksDir + id }
func routeKey(id int64) string      { return routesDir + fmt.Sprintf("%020d", id) }
func segmentKey(name string) string { return segmentsDir + name }
func secretKey(group string) string { return secretsDir + group }

// normalisePrefix returns the prefix with one trailing '/', refusing an empty one: a
// store would then own every key of the cluster.
func normalisePrefix(p string) (string, error) {
	if p == "" {
		return DefaultPrefix, nil
	}
	if strings.Trim(p, "/") == "" {
		return "", fmt.Errorf("etcd store: prefix %q: must name a directory, not the root", p)
	}
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p, nil
}

// decodeInto adds the record stored under key (relative to the prefix) to c.
func decodeInto(c *memory.Contents, key string, val []byte) error {
	var err error
	switch dir, _, _ := strings.Cut(key, "/"); dir + "/" {
	case nodesDir:
		var n store.Node
		if err = json.Unmarshal(val, &n); err == nil {
			c.Nodes = append(c.Nodes, n)
		}
	case linksDir:
		var l store.Link
		if err = json.Unmarshal(val, &l); err == nil {
			c.Links = append(c.Links, l)
		}
	case routesDir:
		var r store.Route
		if err = json.Unmarshal(val, &r); err == nil {
			c.Routes = append(c.Routes, r)
		}
	case segmentsDir:
		var s store.Segment
		if err = json.Unmarshal(val, &s); err == nil {
			c.Segments = append(c.Segments, s)
		}
	case secretsDir:
		c.Secrets[strings.TrimPrefix(key, secretsDir)] = string(val)
	default:
		if key == routeSeqKey {
			c.LastRouteID, err = strconv.ParseInt(string(val), 10, 64)
			break
		}
		// A key this version does not know is left alone: a newer replica may have
		// written it.
		return nil
	}
	if err != nil {
		return fmt.Errorf("etcd store: key %s: %w", key, err)
	}
	return nil
}

func marshal(rec any) (string, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return "", fmt.Errorf("etcd store: encode %T: %w", rec, err)
	}
	return string(b), nil
}
