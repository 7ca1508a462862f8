package freeport

import (
	"net"
	"strconv"
	"testing"
)

// The ports differ and are free to bind once On returns.
func TestOn(t *testing.T) {
	ports, err := On("127.0.0.1", 4)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d returned twice: %v", p, ports)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d is not free after On returned: %v", p, err)
		}
		l.Close()
	}
	if len(ports) != 4 {
		t.Fatalf("On(4) = %v", ports)
	}
}
