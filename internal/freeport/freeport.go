// Package freeport finds TCP ports free to bind, for servers that must be told their
// addresses before they start: cluster members list each other's, and a restarted
// child keeps its address.
package freeport

import (
	"fmt"
	"net"
)

// On returns n distinct ports that were free on host a moment ago. It binds them all
// at once, so that they differ, then releases them for the caller's servers. Another
// process may take one in between; on loopback, in tests and benchmarks, that window
// is harmless (the callers that start clusters retry).
func On(host string, n int) ([]int, error) {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("find a free port on %s: %w", host, err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
