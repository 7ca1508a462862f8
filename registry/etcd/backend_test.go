package etcd

import (
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/registry"
)

func TestParamsAreDeclared(t *testing.T) {
	var b registry.Backend
	for _, x := range registry.Backends() {
		if x.Name == "etcd" {
			b = x
		}
	}
	if b.Open == nil {
		t.Fatal(`backend "etcd" is not registered`)
	}
	defaults := map[string]string{}
	for _, p := range b.Params {
		defaults[p.Name] = p.Default
	}
	for name, want := range map[string]string{
		"etcd-endpoints": "127.0.0.1:2379", "etcd-prefix": "/switchboard/endpoints/",
		"etcd-cacert": "", "etcd-cert": "", "etcd-key": "", "etcd-username": "", "etcd-password": "",
		"etcd-dial-timeout": "5s", "etcd-max-txn-ops": "128",
	} {
		got, ok := defaults[name]
		if !ok || got != want {
			t.Errorf("parameter %s: declared %v, default %q; want default %q", name, ok, got, want)
		}
	}
	if len(defaults) != 9 {
		t.Errorf("%d parameters declared, want 9", len(defaults))
	}
}

func TestOptionsFromConfig(t *testing.T) {
	base := func() map[string]string {
		return map[string]string{
			ParamEndpoints: " 10.0.0.1:2379, https://10.0.0.2:2379 ,", ParamPrefix: "/x",
			ParamDialTimeout: "2s", ParamMaxTxnOps: "64",
		}
	}
	o, err := optionsFromConfig(registry.Config{Params: base()})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Endpoints) != 2 || o.Endpoints[1] != "https://10.0.0.2:2379" || o.DialTimeout != 2*time.Second ||
		o.MaxTxnOps != 64 || o.Prefix != "/x" || o.TLS != nil {
		t.Fatalf("options = %+v", o)
	}
	for _, c := range []struct {
		set  map[string]string
		want string
	}{
		{map[string]string{ParamEndpoints: " , "}, ParamEndpoints},
		{map[string]string{ParamDialTimeout: "soon"}, ParamDialTimeout},
		{map[string]string{ParamDialTimeout: "-1s"}, ParamDialTimeout},
		{map[string]string{ParamMaxTxnOps: "many"}, ParamMaxTxnOps},
		{map[string]string{ParamMaxTxnOps: "-3"}, ParamMaxTxnOps},
		{map[string]string{ParamUsername: "u"}, ParamPassword},
		{map[string]string{ParamPassword: "p"}, ParamUsername},
		{map[string]string{ParamCert: "c.pem"}, ParamKey},
		{map[string]string{ParamCACert: "/does/not/exist.pem"}, ParamCACert},
		{map[string]string{ParamCert: "/nope.pem", ParamKey: "/nope.key"}, ParamCert},
	} {
		p := base()
		for k, v := range c.set {
			p[k] = v
		}
		_, err := optionsFromConfig(registry.Config{Params: p})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("params %v: error %v, want one naming %s", c.set, err, c.want)
		}
	}
}
