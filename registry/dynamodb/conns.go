package dynamodb

import (
	"context"
	"net"
	"net/http"
	"sync"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// conns tracks the connections of the registry's HTTP client so Close can end them
// and their transport goroutines. The SDK's BuildableClient is kept (rather than a
// plain http.Client whose idle connections we could close) because the SDK's
// configuration loader needs it to apply AWS_CA_BUNDLE; it clones its transport, so
// the dial function is the one handle that reaches every connection.
type conns struct {
	dialer *net.Dialer
	mu     sync.Mutex
	open   map[*trackedConn]struct{}
	closed bool
}

func newHTTPClient() (*awshttp.BuildableClient, *conns) {
	b := awshttp.NewBuildableClient()
	c := &conns{dialer: b.GetDialer(), open: map[*trackedConn]struct{}{}}
	return b.WithTransportOptions(func(tr *http.Transport) { tr.DialContext = c.dial }), c
}

func (c *conns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	nc, err := c.dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: nc, owner: c}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		_ = nc.Close()
		return nil, net.ErrClosed
	}
	c.open[tc] = struct{}{}
	return tc, nil
}

// closeAll closes every connection and refuses new ones.
func (c *conns) closeAll() {
	c.mu.Lock()
	c.closed = true
	open := c.open
	c.open = map[*trackedConn]struct{}{}
	c.mu.Unlock()
	for tc := range open {
		_ = tc.Conn.Close()
	}
}

type trackedConn struct {
	net.Conn
	owner *conns
	once  sync.Once
}

func (tc *trackedConn) Close() error {
	tc.once.Do(func() {
		tc.owner.mu.Lock()
		delete(tc.owner.open, tc)
		tc.owner.mu.Unlock()
	})
	return tc.Conn.Close()
}
