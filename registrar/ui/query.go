package ui

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// Every query parameter is checked before it is used: only the names a route
// takes, once each, at most maxValue bytes of valid UTF-8 without control
// characters. A bad one is answered 400 with a short plain-text reason that
// names the parameter (one of ours) but never repeats its value.

// maxValue is the longest value taken: the longest name an endpoint may have.
const maxValue = 253

// maxQuery bounds the whole query string, before it is parsed.
const maxQuery = 2048

// errBadQuery wraps every reason a query is refused.
var errBadQuery = errors.New("bad query")

func badQuery(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errBadQuery}, args...)...)
}

// params returns the query's values, refusing any name not in allowed.
func params(r *http.Request, allowed ...string) (map[string]string, error) {
	if len(r.URL.RawQuery) > maxQuery {
		return nil, badQuery("query string longer than %d bytes", maxQuery)
	}
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badQuery("malformed query string")
	}
	out := make(map[string]string, len(vals))
	for name, vs := range vals {
		if !slices.Contains(allowed, name) {
			return nil, badQuery("unknown parameter; this page takes %s", strings.Join(allowed, ", "))
		}
		if len(vs) != 1 {
			return nil, badQuery("%s: given more than once", name)
		}
		if err := checkValue(name, vs[0]); err != nil {
			return nil, err
		}
		out[name] = vs[0]
	}
	return out, nil
}

func checkValue(name, v string) error {
	switch {
	case len(v) > maxValue:
		return badQuery("%s: longer than %d bytes", name, maxValue)
	case !utf8.ValidString(v):
		return badQuery("%s: not valid UTF-8", name)
	case endpoint.HasControl(v):
		return badQuery("%s: contains control characters", name)
	}
	return nil
}

// filter selects endpoints (and watchers) by exact service, cluster and node;
// an empty field matches any.
type filter struct {
	Service string `json:"service,omitempty"`
	Cluster string `json:"cluster,omitempty"`
	Node    string `json:"node,omitempty"`
}

var filterParams = []string{"service", "cluster", "node"}

// parseFilter reads the filter of a page, fragment, event stream or JSON view.
func parseFilter(r *http.Request) (filter, error) {
	p, err := params(r, filterParams...)
	if err != nil {
		return filter{}, err
	}
	return filter{Service: p["service"], Cluster: p["cluster"], Node: p["node"]}, nil
}

// Set reports whether any field is set.
func (f filter) Set() bool { return f != filter{} }

func (f filter) match(e *endpoint.Endpoint) bool {
	return (f.Service == "" || f.Service == e.Service) && (f.Cluster == "" || f.Cluster == e.Cluster) &&
		(f.Node == "" || f.Node == e.Node)
}

// with returns the page's URL for f with one field replaced, for links that
// narrow the view.
func (f filter) with(field, value string) string {
	switch field {
	case "service":
		f.Service = value
	case "cluster":
		f.Cluster = value
	}
	return "ui" + f.query()
}

// query is f as a query string ("" when empty).
func (f filter) query() string {
	q := url.Values{}
	for _, kv := range [...][2]string{{"service", f.Service}, {"cluster", f.Cluster}, {"node", f.Node}} {
		if kv[1] != "" {
			q.Set(kv[0], kv[1])
		}
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

var keyParams = []string{"cluster", "service", "protocol", "address", "port"}

// parseKey reads the endpoint a history page is of: every field of its key.
func parseKey(r *http.Request) (endpoint.Key, error) {
	p, err := params(r, keyParams...)
	if err != nil {
		return endpoint.Key{}, err
	}
	for _, name := range keyParams {
		if _, ok := p[name]; !ok {
			return endpoint.Key{}, badQuery("%s is required (the history of an endpoint takes %s)", name, strings.Join(keyParams, ", "))
		}
	}
	k := endpoint.Key{Cluster: p["cluster"], Service: p["service"], Protocol: p["protocol"]}
	for _, name := range keyParams[:3] {
		if endpoint.ValidateName(name, p[name]) != nil {
			return k, badQuery("%s: not a valid name (a letter, then letters, digits, '_' or '-')", name)
		}
	}
	a, err := netip.ParseAddr(p["address"])
	if err != nil || a.Zone() != "" {
		return k, badQuery("address: not an IP address")
	}
	k.Address = a.String()
	port := p["port"]
	n, err := strconv.Atoi(port)
	if err != nil || len(port) > 5 || strings.ContainsAny(port, "+-") || n < 0 || n > 65535 {
		return k, badQuery("port: not a number from 0 to 65535")
	}
	k.Port = n
	return k, nil
}

// historyLink is the URL of k's history page, relative to /ui. (Written out:
// url.Values costs a map and a sort per row shown.)
func historyLink(k endpoint.Key) string {
	return "ui/history?cluster=" + url.QueryEscape(k.Cluster) + "&service=" + url.QueryEscape(k.Service) +
		"&protocol=" + url.QueryEscape(k.Protocol) + "&address=" + url.QueryEscape(k.Address) + "&port=" + strconv.Itoa(k.Port)
}
