package config

import (
	"errors"
	"fmt"

	"github.com/switchboard-mesh/switchboard/internal/loopback"
)

// ErrInsecureListen is matched by CheckListeners' errors: the file (or the flags) would
// expose an endpoint without protection and did not say that this is meant.
var ErrInsecureListen = errors.New("insecure listener")

// CheckListeners refuses endpoints that anyone on the network could use without
// credentials: a plaintext endpoint on a non-loopback address, a northbound
// endpoint without authorization on one, and a southbound endpoint without
// registration auth on one (TLS alone proves who the control plane is, not who the
// node is). AllowInsecureRemote permits all three; Insecurities lists what it then
// permits, for the start-up warning.
func (c *Config) CheckListeners() error {
	if c.AllowInsecureRemote {
		return nil
	}
	var errs []error
	for _, p := range c.Insecurities() {
		errs = append(errs, fmt.Errorf("%w: %s; configure %s, or pass --insecure (allow_insecure_remote: true) to accept this",
			ErrInsecureListen, p.What, p.Fix))
	}
	return errors.Join(errs...)
}

// Insecurity is one exposure CheckListeners refuses without AllowInsecureRemote.
type Insecurity struct {
	What string // what is exposed, naming the address
	Fix  string // what to configure instead
}

// Insecurities lists the endpoints exposed beyond loopback without protection.
func (c *Config) Insecurities() []Insecurity {
	var out []Insecurity
	for _, e := range []struct {
		name string
		s    Server
	}{{"northbound", c.Northbound}, {"southbound", c.Southbound}} {
		if e.s.TLS.Insecure && !loopback.Addr(e.s.Endpoint) {
			out = append(out, Insecurity{
				What: fmt.Sprintf("%s endpoint %s is plaintext on a non-loopback address", e.name, e.s.Endpoint),
				Fix:  e.name + ".tls (cert_file, key_file)",
			})
		}
	}
	if !c.NorthboundAuthorization.Enabled() && !loopback.Addr(c.Northbound.Endpoint) {
		out = append(out, Insecurity{
			What: fmt.Sprintf("northbound endpoint %s has no authorization: anyone who reaches it can change the topology", c.Northbound.Endpoint),
			Fix:  "northbound.authorization (identities or token_file)",
		})
	}
	if !c.RegistrationAuth.Enabled() && !loopback.Addr(c.Southbound.Endpoint) {
		out = append(out, Insecurity{
			What: fmt.Sprintf("southbound endpoint %s has no registration_auth: anyone who reaches it can register as any node", c.Southbound.Endpoint),
			Fix:  "registration_auth (type shared_secret or spire)",
		})
	}
	return out
}
