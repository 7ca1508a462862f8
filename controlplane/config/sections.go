package config

import (
	"maps"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

func (d *decoder) config(n *yaml.Node, c *Config) {
	d.mapping(n, "", map[string]fieldFunc{
		"tracing": func(n *yaml.Node, p string) {
			d.mapping(n, p, map[string]fieldFunc{
				"log_level": func(n *yaml.Node, p string) {
					d.oneOf(n, p, &c.Tracing.LogLevel, "trace", "debug", "info", "warn", "error")
				},
			})
		},
		"northbound": func(n *yaml.Node, p string) {
			d.server(n, p, &c.Northbound, NorthboundPort, map[string]fieldFunc{
				"authorization": func(n *yaml.Node, p string) { d.authorization(n, p, &c.NorthboundAuthorization) },
			})
			if len(c.NorthboundAuthorization.Identities) > 0 && c.Northbound.TLS.CAFile == "" {
				d.fail(n, p+".authorization.identities", "client-certificate identities need tls.ca_file (mTLS)")
			}
		},
		"southbound": func(n *yaml.Node, p string) {
			d.server(n, p, &c.Southbound, SouthboundPort, map[string]fieldFunc{
				"send_timeout": func(n *yaml.Node, p string) { d.duration(n, p, false, &c.SendTimeout) },
			})
		},
		"allow_insecure_remote": func(n *yaml.Node, p string) { d.boolean(n, p, &c.AllowInsecureRemote) },
		"database":              func(n *yaml.Node, p string) { d.database(n, p, &c.Database) },
		"topology":              func(n *yaml.Node, p string) { c.Topology = d.topology(n, p) },
		"registration_auth":     func(n *yaml.Node, p string) { d.auth(n, p, &c.RegistrationAuth) },
		"reconciler":            func(n *yaml.Node, p string) { d.reconciler(n, p, &c.Reconciler) },
		"links":                 func(n *yaml.Node, p string) { d.linkSettings(n, p, &c.Links) },
	})
}

func (d *decoder) linkSettings(n *yaml.Node, path string, l *LinkSettings) {
	d.mapping(n, path, map[string]fieldFunc{
		"spire_socket_path":  func(n *yaml.Node, p string) { d.str(n, p, &l.SpireSocketPath) },
		"backoff_initial":    func(n *yaml.Node, p string) { d.duration(n, p, false, &l.BackoffInitial) },
		"backoff_max":        func(n *yaml.Node, p string) { d.duration(n, p, false, &l.BackoffMax) },
		"keepalive_interval": func(n *yaml.Node, p string) { d.duration(n, p, false, &l.KeepaliveInterval) },
		"keepalive_timeout":  func(n *yaml.Node, p string) { d.duration(n, p, false, &l.KeepaliveTimeout) },
	})
	if l.BackoffMax != 0 && l.BackoffMax < l.BackoffInitial {
		d.fail(n, path+".backoff_max", "%s is shorter than backoff_initial %s", l.BackoffMax, l.BackoffInitial)
	}
}

// server decodes an endpoint section; extra holds the keys only this endpoint has.
func (d *decoder) server(n *yaml.Node, path string, s *Server, port string, extra map[string]fieldFunc) {
	endpointSet := false
	fields := map[string]fieldFunc{
		"endpoint": func(n *yaml.Node, p string) {
			endpointSet = true
			if d.str(n, p, &s.Endpoint) {
				if msg := checkHostPort(s.Endpoint); msg != "" {
					d.fail(n, p, "%q %s", s.Endpoint, msg)
				}
			}
		},
		"tls": func(n *yaml.Node, p string) { d.tls(n, p, &s.TLS) },
	}
	maps.Copy(fields, extra)
	d.mapping(n, path, fields)
	// Plaintext stays on this machine unless an address is written down; a TLS
	// endpoint is meant to be reached from elsewhere.
	if !endpointSet && !s.TLS.Insecure {
		s.Endpoint = net.JoinHostPort("0.0.0.0", port)
	}
}

func (d *decoder) authorization(n *yaml.Node, path string, a *Authorization) {
	d.mapping(n, path, map[string]fieldFunc{
		"identities": func(n *yaml.Node, p string) { a.Identities = d.identities(n, p) },
		"token_file": func(n *yaml.Node, p string) {
			if d.str(n, p, &a.TokenFile) && a.TokenFile == "" {
				d.fail(n, p, "must not be empty")
			}
		},
	})
}

// identities decodes `role: [identity, ...]` into identity -> role.
func (d *decoder) identities(n *yaml.Node, path string) map[string]string {
	out := map[string]string{}
	d.mapping(n, path, map[string]fieldFunc{
		RoleViewer: func(n *yaml.Node, p string) { d.identityList(n, p, RoleViewer, out) },
		RoleAdmin:  func(n *yaml.Node, p string) { d.identityList(n, p, RoleAdmin, out) },
	})
	return out
}

func (d *decoder) identityList(n *yaml.Node, path, role string, out map[string]string) {
	d.sequence(n, path, func(n *yaml.Node, p string) {
		var id string
		if !d.str(n, p, &id) {
			return
		}
		if err := ValidIdentity(id); err != nil {
			d.fail(n, p, "%v", err)
			return
		}
		if prev, dup := out[id]; dup {
			d.fail(n, p, "%q is already bound to %s", id, prev)
			return
		}
		out[id] = role
	})
}

func checkHostPort(s string) string {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return "is not host:port"
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > math.MaxUint16 {
		return "has no valid port (0..65535)"
	}
	return ""
}

func (d *decoder) tls(n *yaml.Node, path string, t *TLS) {
	var insecure *bool
	d.mapping(n, path, map[string]fieldFunc{
		"insecure": func(n *yaml.Node, p string) {
			insecure = new(bool)
			d.boolean(n, p, insecure)
		},
		"cert_file": func(n *yaml.Node, p string) { d.str(n, p, &t.CertFile) },
		"key_file":  func(n *yaml.Node, p string) { d.str(n, p, &t.KeyFile) },
		"ca_file":   func(n *yaml.Node, p string) { d.str(n, p, &t.CAFile) },
	})
	hasFiles := t.CertFile != "" || t.KeyFile != "" || t.CAFile != ""
	t.Insecure = !hasFiles
	if insecure != nil {
		t.Insecure = *insecure
	}
	switch {
	case t.Insecure && hasFiles:
		d.fail(n, path+".insecure", "true contradicts cert_file, key_file and ca_file")
	case !t.Insecure && (t.CertFile == "" || t.KeyFile == ""):
		d.fail(n, path, "cert_file and key_file are required unless insecure is true")
	}
}

func (d *decoder) database(n *yaml.Node, path string, db *Database) {
	d.mapping(n, path, map[string]fieldFunc{
		"type": func(n *yaml.Node, p string) { d.oneOf(n, p, &db.Type, DatabaseInMemory, DatabaseSQLite, DatabaseEtcd) },
		"path": func(n *yaml.Node, p string) { d.str(n, p, &db.Path) },
		"etcd": func(n *yaml.Node, p string) { d.etcd(n, p, &db.Etcd) },
	})
	d.checkEtcd(n, path, db)
	switch {
	case db.Type == DatabaseSQLite && db.Path == "":
		d.fail(n, path+".path", "is required when type is %s", DatabaseSQLite)
	case db.Type == DatabaseInMemory && db.Path != "":
		d.fail(n, path+".path", "is only used when type is %s", DatabaseSQLite)
	}
}

func (d *decoder) auth(n *yaml.Node, path string, a *RegistrationAuth) {
	a.MaxTokenAge, a.Audience = 5*time.Minute, "switchboard-controlplane" // auth.DefaultAudience: what nodes request
	set := map[string]bool{}
	mark := func(key string, fn fieldFunc) fieldFunc {
		return func(n *yaml.Node, p string) { set[key] = true; fn(n, p) }
	}
	d.mapping(n, path, map[string]fieldFunc{
		"type":    func(n *yaml.Node, p string) { d.oneOf(n, p, &a.Type, AuthNoop, AuthSharedSecret, AuthSpire) },
		"secrets": mark("secrets", func(n *yaml.Node, p string) { a.Secrets = d.secrets(n, p) }),
		"max_token_age": mark("max_token_age", func(n *yaml.Node, p string) {
			d.duration(n, p, false, &a.MaxTokenAge)
		}),
		"socket_path": mark("socket_path", func(n *yaml.Node, p string) { d.str(n, p, &a.SocketPath) }),
		"audience":    mark("audience", func(n *yaml.Node, p string) { d.str(n, p, &a.Audience) }),
	})
	owner := map[string]string{
		"secrets": AuthSharedSecret, "max_token_age": AuthSharedSecret, "socket_path": AuthSpire, "audience": AuthSpire,
	}
	for _, key := range []string{"secrets", "max_token_age", "socket_path", "audience"} {
		if set[key] && a.Type != owner[key] {
			d.fail(n, path+"."+key, "is only used when type is %s", owner[key])
		}
	}
	switch {
	case a.Type == AuthSharedSecret && len(a.Secrets) == 0 && !set["secrets"]:
		d.fail(n, path+".secrets", "is required when type is %s", AuthSharedSecret)
	case a.Type == AuthSpire && a.SocketPath == "":
		d.fail(n, path+".socket_path", "is required when type is %s", AuthSpire)
	}
}

func (d *decoder) secrets(n *yaml.Node, path string) map[string]string {
	out := map[string]string{}
	if n = d.resolve(n, path); n == nil {
		return out
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "must be a mapping of group to secret")
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := join(path, k.Value)
		if err := ValidGroupName(k.Value); err != nil || k.Kind != yaml.ScalarNode {
			d.fail(k, p, "key must be a group name")
			continue
		}
		if _, dup := out[k.Value]; dup {
			d.fail(k, p, "duplicate key")
			continue
		}
		var secret string
		if !d.str(v, p, &secret) {
			continue
		}
		if len(secret) < MinSecretLen {
			// Never echo the secret itself.
			d.fail(v, p, "secret is %d bytes, must be at least %d", len(secret), MinSecretLen)
			continue
		}
		out[k.Value] = secret
	}
	if len(n.Content) == 0 {
		d.fail(n, path, "must name at least one group")
	}
	return out
}

func (d *decoder) reconciler(n *yaml.Node, path string, r *Reconciler) {
	d.mapping(n, path, map[string]fieldFunc{
		"max_requeues":     func(n *yaml.Node, p string) { d.integer(n, p, 0, 1_000_000, &r.MaxRequeues) },
		"base_retry_delay": func(n *yaml.Node, p string) { d.duration(n, p, false, &r.BaseRetryDelay) },
		"reconcile_period": func(n *yaml.Node, p string) { d.duration(n, p, true, &r.ReconcilePeriod) },
		"enable_orphan_detection": func(n *yaml.Node, p string) {
			d.boolean(n, p, &r.EnableOrphanDetection)
		},
		"workers": func(n *yaml.Node, p string) { d.integer(n, p, 1, 1024, &r.Workers) },
	})
}

// topology returns nil for an absent, null or empty section: API mode.
func (d *decoder) topology(n *yaml.Node, path string) *Topology {
	t := &Topology{}
	d.mapping(n, path, map[string]fieldFunc{
		"links": func(n *yaml.Node, p string) { t.Links = d.links(n, p, false) },
		"segments": func(n *yaml.Node, p string) {
			names := map[string]bool{}
			d.sequence(n, p, func(n *yaml.Node, p string) {
				if s, ok := d.segment(n, p); ok {
					if names[s.Name] {
						d.fail(n, p+".name", "duplicate segment name %q", s.Name)
					}
					names[s.Name] = true
					t.Segments = append(t.Segments, s)
				}
			})
		},
	})
	if t.IsEmpty() {
		return nil
	}
	return t
}

func (d *decoder) segment(n *yaml.Node, path string) (Segment, bool) {
	var s Segment
	before := len(d.errs)
	d.mapping(n, path, map[string]fieldFunc{
		"name": func(n *yaml.Node, p string) {
			if d.str(n, p, &s.Name) {
				if err := ValidSegmentName(s.Name); err != nil {
					d.fail(n, p, "%v", err)
				}
			}
		},
		"links": func(n *yaml.Node, p string) { s.Links = d.links(n, p, true) },
	})
	switch {
	case s.Name == "" && len(d.errs) == before:
		d.fail(n, path+".name", "is required")
	case len(s.Links) == 0 && len(d.errs) == before:
		d.fail(n, path+".links", "must list at least one link")
	case s.UsesGroupVar() && !strings.Contains(s.Name, GroupVar):
		d.fail(n, path+".name", "%q must contain %s because the segment's links use it", s.Name, GroupVar)
	}
	return s, len(d.errs) == before
}

func (d *decoder) links(n *yaml.Node, path string, inSegment bool) []Link {
	var out []Link
	d.sequence(n, path, func(n *yaml.Node, p string) {
		var l Link
		before := len(d.errs)
		d.mapping(n, p, map[string]fieldFunc{
			"group": func(n *yaml.Node, p string) {
				if d.str(n, p, &l.Group) {
					if err := validLinkGroup(l.Group, inSegment); err != nil {
						d.fail(n, p, "%v", err)
					}
				}
			},
			"neighbors": func(n *yaml.Node, p string) { l.Neighbors = d.neighbors(n, p, inSegment) },
		})
		switch {
		case len(d.errs) > before:
		case l.Group == "":
			d.fail(n, p+".group", "is required")
		case len(l.Neighbors) == 0:
			d.fail(n, p+".neighbors", "must list at least one group")
		case l.Group != Wildcard && slices.Contains(l.Neighbors, l.Group):
			d.fail(n, p+".neighbors", "%q cannot be its own neighbor", l.Group)
		}
		if len(d.errs) == before {
			out = append(out, l)
		}
	})
	return out
}

func (d *decoder) neighbors(n *yaml.Node, path string, inSegment bool) []string {
	var out []string
	seen := map[string]bool{}
	d.sequence(n, path, func(n *yaml.Node, p string) {
		var g string
		if !d.str(n, p, &g) {
			return
		}
		switch err := validLinkGroup(g, inSegment); {
		case err != nil:
			d.fail(n, p, "%v", err)
		case seen[g]:
			d.fail(n, p, "%q is listed twice", g)
		default:
			seen[g] = true
			out = append(out, g)
		}
	})
	return out
}
