package etcd

import (
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

func TestKeyRoundTrip(t *testing.T) {
	l, err := newLayout("/sb/eps") // the missing '/' is added
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key  endpoint.Key
		want string
	}{
		{endpoint.Key{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.1", Port: 80}, "/sb/eps/web/prod/http/10.0.0.1/80"},
		{endpoint.Key{Cluster: "c", Service: "s", Protocol: "p", Address: "2001:db8::1", Port: 0}, "/sb/eps/s/c/p/2001:db8::1/0"},
	} {
		got := l.key(c.key)
		if got != c.want {
			t.Errorf("key(%v) = %q, want %q", c.key, got, c.want)
		}
		back, err := l.parse(got)
		if err != nil || back != c.key {
			t.Errorf("parse(%q) = %v, %v; want %v", got, back, err, c.key)
		}
	}
}

func TestParseRejects(t *testing.T) {
	l, _ := newLayout("/p/")
	for _, c := range []struct{ key, want string }{
		{"/q/web/prod/http/10.0.0.1/80", "not under prefix"},
		{"/p/web/prod/http/10.0.0.1", "want <service>"},
		{"/p/web/prod/http/10.0.0.1/80/x", "want <service>"},
		{"/p/web/prod/http/10.0.0.1/080", "port"},
		{"/p/web/prod/http/10.0.0.1/+80", "port"},
		{"/p/web/prod/http/10.0.0.1/http", "port"},
		{"/p/web/prod/http/10.0.0.1/70000", "port"},
		{"/p/9web/prod/http/10.0.0.1/80", "service"},
		{"/p/web//http/10.0.0.1/80", "cluster"},
		{"/p/web/prod/ht.tp/10.0.0.1/80", "protocol"},
		{"/p/web/prod/http/2001:DB8::1/80", "canonical"},
		{"/p/web/prod/http/host/80", "address"},
	} {
		_, err := l.parse(c.key)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parse(%q) = %v, want an error mentioning %q", c.key, err, c.want)
		}
	}
}

func TestDecodeChecksIdentity(t *testing.T) {
	l, _ := newLayout("/p/")
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	value, _ := a.MarshalJSON()
	if got, err := l.decode([]byte(l.key(a.Key())), value); err != nil || !endpoint.Equal(got, a) {
		t.Fatalf("decode of a's own key = %+v, %v", got, err)
	}
	other := ep("prod", "web", "http", "10.0.0.2", 80)
	if _, err := l.decode([]byte(l.key(other.Key())), value); err == nil || !strings.Contains(err.Error(), "value is for") {
		t.Fatalf("decode of a's value under another key: err = %v, want an identity mismatch", err)
	}
	if _, err := l.decode([]byte(l.key(a.Key())), []byte(`{"cluster":`)); err == nil {
		t.Fatal("decode of truncated JSON succeeded")
	}
	bad := a
	bad.Priority = 0
	value, _ = bad.MarshalJSON()
	if _, err := l.decode([]byte(l.key(a.Key())), value); err == nil || !strings.Contains(err.Error(), "priority") {
		t.Fatalf("decode of an invalid endpoint: err = %v, want it to name priority", err)
	}
}

// TestSpan checks that each filter reads the narrowest range the layout allows.
func TestSpan(t *testing.T) {
	l, _ := newLayout("/p/")
	for _, c := range []struct {
		f    endpoint.Filter
		want string
	}{
		{endpoint.Filter{}, "/p/"},
		{endpoint.Filter{Service: "web"}, "/p/web/"},
		{endpoint.Filter{Service: "web", Cluster: "prod"}, "/p/web/prod/"},
		{endpoint.Filter{Service: "web", Cluster: "prod", Protocol: "http"}, "/p/web/prod/http/"},
		{endpoint.Filter{Service: "web", Cluster: "prod", Protocol: "http", Address: "10.0.0.1"}, "/p/web/prod/http/10.0.0.1/"},
		{endpoint.Filter{Service: "web", Protocol: "http"}, "/p/web/"},
		{endpoint.Filter{Cluster: "prod"}, "/p/"},
		{endpoint.Filter{Service: "*", Cluster: "prod"}.Normalize(), "/p/"},
	} {
		start, end := l.span(c.f)
		if start != c.want || end != clientv3.GetPrefixRangeEnd(c.want) {
			t.Errorf("span(%+v) = [%q, %q), want prefix %q", c.f, start, end, c.want)
		}
	}
}

// FuzzParseKey checks that a key either fails to parse or is exactly the key its
// parse maps back to, with a valid identity: one key per endpoint, no aliases.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{
		"/p/web/prod/http/10.0.0.1/80",
		"/p/s/c/p/2001:db8::1/0",
		"/p/web/prod/http/10.0.0.1/080",
		"/p/web/prod/http/::ffff:10.0.0.1/80",
		"/p//////",
		"/p/web/prod/http/10.0.0.1/-0",
	} {
		f.Add(s)
	}
	l, _ := newLayout("/p/")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := l.parse(s)
		if err != nil {
			return
		}
		if err := k.Validate(); err != nil {
			t.Fatalf("parse(%q) accepted an invalid key: %v", s, err)
		}
		if back := l.key(k); back != s {
			t.Fatalf("parse(%q) = %v, which maps back to %q", s, k, back)
		}
	})
}

// FuzzDecode checks what a watch or a scan accepts from the store: a key and value
// decode only into the endpoint whose key maps back to exactly that key and whose
// value is valid; anything else is an error, never a panic or an endpoint under
// another key.
func FuzzDecode(f *testing.F) {
	f.Add("/p/web/prod/http/10.0.0.1/80", `{"service":"web","cluster":"prod","protocol":"http","address":"10.0.0.1","port":80}`)
	f.Add("/p/web/prod/http/10.0.0.1/80", `{"service":"web","cluster":"prod","protocol":"http","address":"10.0.0.2","port":80}`)
	f.Add("/p/web/prod/http/2001:db8::1/443", `{"service":"web","cluster":"prod","protocol":"http","address":"2001:db8::1","port":443,"annotations":{"k":"v"}}`)
	f.Add("/p/web/prod/http/10.0.0.1/80", `{`)
	f.Add("/q/web/prod/http/10.0.0.1/80", `{}`)
	l, _ := newLayout("/p/")
	f.Fuzz(func(t *testing.T, key, value string) {
		ep, err := l.decode([]byte(key), []byte(value))
		if err != nil {
			return
		}
		if back := l.key(ep.Key()); back != key {
			t.Fatalf("decode(%q) = %v, whose key is %q", key, ep.Key(), back)
		}
		if err := ep.Key().Validate(); err != nil {
			t.Fatalf("decode(%q, %q) accepted an invalid key: %v", key, value, err)
		}
	})
}
