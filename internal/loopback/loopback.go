// Package loopback says whether a listen address only accepts connections from this
// machine: the rule every server applies before it listens without authenticating
// its callers. It imports nothing of this module, so every layer may use it.
package loopback

import (
	"net"
	"strings"
)

// Host reports whether host is localhost or a literal loopback address. Other names
// are not resolved: what they resolve to can change after the check.
func Host(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Addr is Host for a host:port; an address that does not split is not loopback.
func Addr(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	return err == nil && Host(host)
}
