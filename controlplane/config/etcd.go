package config

import (
	"time"

	"gopkg.in/yaml.v3"
)

// DefaultLeaseTTL is how long a leader that stopped renewing keeps the lead.
const DefaultLeaseTTL = 10 * time.Second

// Etcd is `database.etcd`: where the records live, and the leader election that
// picks which replica of the control plane reconciles.
type Etcd struct {
	Endpoints []string
	// Prefix is the key prefix of the records (and, under it, of the election).
	Prefix string
	// CAFile verifies etcd's certificate; CertFile and KeyFile are a client
	// certificate for etcd's mutual TLS.
	CAFile, CertFile, KeyFile string
	// Username and PasswordFile authenticate to an etcd with auth enabled; the
	// password is read from a file so that it stays out of the config file.
	Username, PasswordFile string
	DialTimeout            time.Duration
	// LeaseTTL is the election lease: a leader that cannot renew it (crashed, cut off
	// from etcd) loses the lead this long after its last renewal.
	LeaseTTL time.Duration
	// AdvertiseSouthbound and AdvertiseNorthbound are the addresses this replica's
	// listeners are reached at, which a standby names to callers as the leader's. They
	// default to the listen addresses.
	AdvertiseSouthbound, AdvertiseNorthbound string
}

func (d *decoder) etcd(n *yaml.Node, path string, e *Etcd) {
	e.LeaseTTL, e.DialTimeout = DefaultLeaseTTL, 5*time.Second
	d.mapping(n, path, map[string]fieldFunc{
		"endpoints": func(n *yaml.Node, p string) {
			d.sequence(n, p, func(n *yaml.Node, p string) {
				var ep string
				if d.str(n, p, &ep) {
					e.Endpoints = append(e.Endpoints, ep)
				}
			})
		},
		"prefix":               func(n *yaml.Node, p string) { d.str(n, p, &e.Prefix) },
		"ca_file":              func(n *yaml.Node, p string) { d.str(n, p, &e.CAFile) },
		"cert_file":            func(n *yaml.Node, p string) { d.str(n, p, &e.CertFile) },
		"key_file":             func(n *yaml.Node, p string) { d.str(n, p, &e.KeyFile) },
		"username":             func(n *yaml.Node, p string) { d.str(n, p, &e.Username) },
		"password_file":        func(n *yaml.Node, p string) { d.str(n, p, &e.PasswordFile) },
		"dial_timeout":         func(n *yaml.Node, p string) { d.duration(n, p, false, &e.DialTimeout) },
		"lease_ttl":            func(n *yaml.Node, p string) { d.duration(n, p, false, &e.LeaseTTL) },
		"advertise_southbound": func(n *yaml.Node, p string) { d.str(n, p, &e.AdvertiseSouthbound) },
		"advertise_northbound": func(n *yaml.Node, p string) { d.str(n, p, &e.AdvertiseNorthbound) },
	})
	switch {
	case e.LeaseTTL > 0 && e.LeaseTTL < 2*time.Second:
		// etcd's leases are whole seconds, and one second leaves no time to renew.
		d.fail(n, path+".lease_ttl", "%s is shorter than 2s", e.LeaseTTL)
	case (e.CertFile == "") != (e.KeyFile == ""):
		d.fail(n, path, "cert_file and key_file go together: give both or neither")
	case (e.Username == "") != (e.PasswordFile == ""):
		d.fail(n, path, "username and password_file go together: give both or neither")
	}
}

// checkEtcd: the etcd section belongs to type etcd, which needs endpoints.
func (d *decoder) checkEtcd(n *yaml.Node, path string, db *Database) {
	switch {
	case db.Type == DatabaseEtcd && len(db.Etcd.Endpoints) == 0:
		d.fail(n, path+".etcd.endpoints", "is required when type is %s", DatabaseEtcd)
	case db.Type != DatabaseEtcd && len(db.Etcd.Endpoints) > 0:
		d.fail(n, path+".etcd", "is only used when type is %s", DatabaseEtcd)
	}
}
