package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"

	"github.com/switchboard-mesh/switchboard/internal/loopback"
)

// checkListen refuses a listen address that cannot be bound whatever the machine's
// state (no port, a port beyond 65535), as bad input naming the flag, before
// anything starts. Empty means "off" for the flags that allow it; callers decide.
func checkListen(flag, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("--%s %q: want host:port, e.g. 127.0.0.1:8080 (%v)", flag, addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return usagef("--%s %q: port %q is not a number in 0..65535", flag, addr, port)
	}
	return nil
}

// checkListens runs checkListen on flag/address pairs, skipping empty addresses.
func checkListens(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] == "" {
			continue
		}
		if err := checkListen(pairs[i], pairs[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// addrInUse says which flag moves an address another process holds, at once and in
// words, rather than leaving the user to read a socket error (or a timeout).
func addrInUse(flag, addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s is in use (another switchboard, or another program, listens there): stop it, or choose another address with --%s", addr, flag)
	}
	return fmt.Errorf("--%s %s: %w", flag, addr, err)
}

// plaintextListen applies the rule that a plaintext API listens on loopback only:
// without TLS, an address the user did not give becomes its loopback form, and a
// non-loopback address the user gave needs --insecure. Without TLS the server
// cannot tell its callers apart, so anyone who reaches the port could change
// what it serves.
func plaintextListen(flag, addr string, given, insecure bool) (string, error) {
	if err := checkListen(flag, addr); err != nil {
		return "", err
	}
	host, port, _ := net.SplitHostPort(addr)
	if loopback.Host(host) {
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

// insecureWarning is logged when a plaintext API listens beyond loopback.
func insecureWarning(addr string) string {
	return fmt.Sprintf("listening in plaintext on %s (--insecure): any client that reaches it can read and change what it serves", addr)
}

// probeListens binds and releases each address with a fixed port, so a port another
// process holds is reported, with the flag that moves it, before anything starts.
func probeListens(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		flag, addr := pairs[i], pairs[i+1]
		if _, port, err := net.SplitHostPort(addr); err != nil || port == "0" {
			continue
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return addrInUse(flag, addr, err)
		}
		_ = ln.Close()
	}
	return nil
}
