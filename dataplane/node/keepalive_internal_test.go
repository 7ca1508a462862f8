package node

import (
	"testing"
	"time"

	"google.golang.org/grpc/keepalive"
)

// A link's keepalive comes from its client configuration, the defaults filling what it
// leaves out; an interval below gRPC's minimum is raised to it.
func TestLinkConfigKeepalive(t *testing.T) {
	for _, tc := range []struct {
		lc   linkConfig
		want keepalive.ClientParameters
	}{
		{linkConfig{}, keepalive.ClientParameters{Time: DefaultKeepaliveInterval, Timeout: DefaultKeepaliveTimeout, PermitWithoutStream: true}},
		{linkConfig{KeepaliveInterval: "20s", KeepaliveTimeout: "2s"}, keepalive.ClientParameters{Time: 20 * time.Second, Timeout: 2 * time.Second, PermitWithoutStream: true}},
		{linkConfig{KeepaliveInterval: "1s"}, keepalive.ClientParameters{Time: 10 * time.Second, Timeout: DefaultKeepaliveTimeout, PermitWithoutStream: true}},
	} {
		got, err := tc.lc.keepalive()
		if err != nil || got != tc.want {
			t.Errorf("%+v: %+v, %v; want %+v", tc.lc, got, err, tc.want)
		}
	}
	if _, err := (linkConfig{KeepaliveTimeout: "soon"}).keepalive(); err == nil {
		t.Error("a bad duration was accepted")
	}
}
