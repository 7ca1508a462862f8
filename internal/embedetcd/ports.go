package embedetcd

import (
	"fmt"
	"net"
)

// freePorts returns n distinct free TCP ports on 127.0.0.1. etcd must be told its
// peer URLs before it starts (every member lists every other), so ":0" cannot be
// used; the listeners are held until all n are found so the ports differ, then
// released for etcd to bind. Start retries if another process wins the race.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("embedetcd: find a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
