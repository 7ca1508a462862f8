package main

import (
	"fmt"
	"net"
	"net/netip"
)

// plaintextListen applies the rule that a plaintext API listens on loopback only:
// without TLS, an address the user did not give becomes its loopback form, and a
// non-loopback address the user gave needs --insecure. Without TLS the server
// cannot tell its callers apart, so anyone who reaches the port could change
// what it serves.
func plaintextListen(flag, addr string, given, insecure bool) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", usagef("--%s %q: %v", flag, addr, err)
	}
	if isLoopback(host) {
		return addr, nil
	}
	switch {
	case !given:
		return net.JoinHostPort("127.0.0.1", port), nil
	case insecure:
		return addr, nil
	}
	return "", usagef("--%s %s: plaintext on a non-loopback address; secure it with TLS (--tls-cert/--tls-key/--tls-client-ca or --spiffe-socket), listen on 127.0.0.1, or accept the risk with --insecure", flag, addr)
}

func isLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && isLoopback(host)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// insecureWarning is logged when a plaintext API listens beyond loopback.
func insecureWarning(addr string) string {
	return fmt.Sprintf("listening in plaintext on %s (--insecure): any client that reaches it can read and change what it serves", addr)
}
