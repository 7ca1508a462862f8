package etcd

import (
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// DefaultPrefix is where endpoints live unless configured otherwise.
const DefaultPrefix = "/switchboard/endpoints/"

// layout maps endpoint keys to etcd keys under one prefix (see doc.go).
type layout struct{ prefix string }

// newLayout returns the layout for prefix, which must end in '/' so that one
// prefix is never a prefix of a sibling's ("/a" would also cover "/ab/…").
func newLayout(prefix string) (layout, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if strings.ContainsRune(prefix, 0) {
		return layout{}, fmt.Errorf("etcd prefix %q: must not contain NUL", prefix)
	}
	return layout{prefix: prefix}, nil
}

// key returns the etcd key of an endpoint key.
func (l layout) key(k endpoint.Key) string {
	var b strings.Builder
	b.Grow(len(l.prefix) + len(k.Service) + len(k.Cluster) + len(k.Protocol) + len(k.Address) + 10)
	b.WriteString(l.prefix)
	for _, s := range [...]string{k.Service, k.Cluster, k.Protocol, k.Address} {
		b.WriteString(s)
		b.WriteByte('/')
	}
	b.WriteString(strconv.Itoa(k.Port))
	return b.String()
}

// parse returns the endpoint key of an etcd key; the error says what is wrong.
func (l layout) parse(key string) (endpoint.Key, error) {
	rest, ok := strings.CutPrefix(key, l.prefix)
	if !ok {
		return endpoint.Key{}, fmt.Errorf("etcd key %q: not under prefix %q", key, l.prefix)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 5 {
		return endpoint.Key{}, fmt.Errorf("etcd key %q: want <service>/<cluster>/<protocol>/<address>/<port> after the prefix", key)
	}
	port, err := strconv.Atoi(parts[4])
	if err != nil || strconv.Itoa(port) != parts[4] {
		return endpoint.Key{}, fmt.Errorf("etcd key %q: port %q is not a decimal number", key, parts[4])
	}
	k := endpoint.Key{Service: parts[0], Cluster: parts[1], Protocol: parts[2], Address: parts[3], Port: port}
	if err := k.Validate(); err != nil {
		return endpoint.Key{}, fmt.Errorf("etcd key %q: %w", key, err)
	}
	return k, nil
}

// decode parses a key-value pair into an endpoint, checking that the value's
// identity is the key's: a value copied under the wrong key is not trusted.
func (l layout) decode(key, value []byte) (endpoint.Endpoint, error) {
	k, err := l.parse(string(key))
	if err != nil {
		return endpoint.Endpoint{}, err
	}
	ep, err := endpoint.DecodeJSON(value)
	if err != nil {
		return endpoint.Endpoint{}, fmt.Errorf("etcd key %q: value: %w", key, err)
	}
	if ep.Key() != k {
		return endpoint.Endpoint{}, fmt.Errorf("etcd key %q: value is for %s", key, ep.Key())
	}
	return ep, nil
}

// span returns the smallest key range [start, end) holding every endpoint that
// f can match. f must be normalized.
func (l layout) span(f endpoint.Filter) (start, end string) {
	p := l.prefix
	// Each field narrows the range only while every field before it in the key is
	// fixed; the rest of the filter is applied to what the range returns.
	for _, s := range [...]string{f.Service, f.Cluster, f.Protocol, f.Address} {
		if s == "" {
			break
		}
		p += s + "/"
	}
	return p, clientv3.GetPrefixRangeEnd(p)
}
