package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestEtcdDatabase: the etcd section is read whole, with the lease and dial defaults.
func TestEtcdDatabase(t *testing.T) {
	c, err := Parse([]byte(`database:
  type: etcd
  etcd:
    endpoints: ["https://e1:2379", "https://e2:2379"]
    prefix: /sb/cp
    ca_file: ca.pem
    cert_file: c.pem
    key_file: k.pem
    username: cp
    password_file: /run/secrets/etcd
    advertise_southbound: 10.0.0.5:50052
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Etcd{
		Endpoints: []string{"https://e1:2379", "https://e2:2379"}, Prefix: "/sb/cp",
		CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem", Username: "cp", PasswordFile: "/run/secrets/etcd",
		DialTimeout: 5 * time.Second, LeaseTTL: DefaultLeaseTTL, AdvertiseSouthbound: "10.0.0.5:50052",
	}
	if c.Database.Type != DatabaseEtcd || !reflect.DeepEqual(c.Database.Etcd, want) {
		t.Fatalf("database = %+v, want etcd %+v", c.Database, want)
	}
}

func TestEtcdDatabaseInvalid(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"database:\n  type: etcd\n", `database.etcd.endpoints: is required when type is etcd`},
		{"database:\n  etcd: {endpoints: [e:2379]}\n", `database.etcd: is only used when type is etcd`},
		{"database:\n  type: etcd\n  etcd: {endpoints: [e:2379], lease_ttl: 1s}\n", `database.etcd.lease_ttl: 1s is shorter than 2s`},
		{"database:\n  type: etcd\n  etcd: {endpoints: [e:2379], cert_file: c}\n", `database.etcd: cert_file and key_file go together`},
		{"database:\n  type: etcd\n  etcd: {endpoints: [e:2379], username: u}\n", `database.etcd: username and password_file go together`},
		{"database:\n  type: etcd\n  etcd: {endpoints: e}\n", `database.etcd.endpoints: must be a list`},
		{"database:\n  type: etcd\n  etcd: {endpoints: [e:2379], ttl: 3s}\n", `database.etcd.ttl: unknown key`},
	} {
		_, err := Parse([]byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got  %v\n want %s", c.src, err, c.want)
		}
	}
}
