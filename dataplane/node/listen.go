package node

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// listenMux shares the node's listener between its gRPC server (the client API, and
// links on the gRPC transport) and the framed link transport. It finishes the TLS
// handshake itself (offering both "h2" and framesALPN), then tells the two apart by the
// first bytes: framesMagic, or anything else for gRPC (HTTP/2's preface). gRPC gets
// the connection through Accept, with handshaked as its credentials.
type listenMux struct {
	lis     net.Listener
	tls     *tls.Config                        // nil: plaintext
	framed  func(nc net.Conn, r *bufio.Reader) // r reads nc, from after the magic
	conns   chan net.Conn
	done    chan struct{}
	ctx     context.Context // ends with done
	cancel  context.CancelFunc
	closing sync.Once
	// routes counts the connections being routed or served on the framed transport;
	// only acceptLoop adds to it, and looped closes when acceptLoop returns, so that
	// wait never runs beside an Add.
	routes sync.WaitGroup
	looped chan struct{}
}

func newListenMux(lis net.Listener, conf *tls.Config, framed func(net.Conn, *bufio.Reader)) *listenMux {
	m := &listenMux{lis: lis, framed: framed, conns: make(chan net.Conn), done: make(chan struct{}), looped: make(chan struct{})}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	if conf != nil {
		m.tls = conf.Clone()
		m.tls.NextProtos = append([]string{"h2", framesALPN}, slices.DeleteFunc(slices.Clone(conf.NextProtos), func(p string) bool {
			return p == "h2" || p == framesALPN
		})...)
	}
	go m.acceptLoop()
	return m
}

// acceptLoop accepts until the listener closes; other failures (out of file
// descriptors) are retried after a pause, as net/http does.
func (m *listenMux) acceptLoop() {
	defer close(m.looped)
	pause := 5 * time.Millisecond
	for {
		nc, err := m.lis.Accept()
		if errors.Is(err, net.ErrClosed) {
			_ = m.Close()
			return
		}
		if err != nil {
			select {
			case <-m.done:
				return
			case <-time.After(pause):
			}
			pause = min(2*pause, time.Second)
			continue
		}
		pause = 5 * time.Millisecond
		m.routes.Go(func() { m.route(nc) })
	}
}

// route finishes the connection's TLS handshake and hands it to its transport.
func (m *listenMux) route(nc net.Conn) {
	_ = nc.SetDeadline(time.Now().Add(openTimeout))
	// A listener that closes does not wait out a connection still routing.
	raw := nc // nc becomes the TLS connection below; its deadlines are raw's
	routing := context.AfterFunc(m.ctx, func() { _ = raw.SetDeadline(time.Now()) })
	if m.tls != nil {
		tc := tls.Server(nc, m.tls)
		if err := tc.Handshake(); err != nil { // within the deadline above
			_ = nc.Close()
			return
		}
		nc = tc
	}
	// A small buffer to peek with: a client's connection keeps it until gRPC has read
	// what it holds.
	r := bufio.NewReaderSize(nc, 64)
	first, err := r.Peek(len(framesMagic))
	if err != nil {
		_ = nc.Close()
		return
	}
	if !routing() {
		_ = nc.Close() // the listener closed
		return
	}
	pc := &peekedConn{Conn: nc, r: r}
	if string(first) == framesMagic {
		_, _ = r.Discard(len(framesMagic))
		m.framed(nc, bufio.NewReaderSize(pc, framedReadBuffer)) // clears the deadline once open
		return
	}
	_ = nc.SetDeadline(time.Time{})
	select {
	case m.conns <- pc:
	case <-m.done:
		_ = nc.Close()
	}
}

// Accept, Close and Addr make listenMux the gRPC server's listener.
func (m *listenMux) Accept() (net.Conn, error) {
	select {
	case nc := <-m.conns:
		return nc, nil
	case <-m.done:
		return nil, net.ErrClosed
	}
}

func (m *listenMux) Close() error {
	m.closing.Do(func() {
		close(m.done)
		m.cancel()
		_ = m.lis.Close()
	})
	return nil
}

func (m *listenMux) Addr() net.Addr { return m.lis.Addr() }

// wait closes the listener and waits until every connection it accepted has been
// handed to gRPC or has ended on the framed transport: a framed stream's goroutines
// are the node's (Node.wg), and must have started before the node waits for them.
func (m *listenMux) wait() {
	_ = m.Close()
	<-m.looped
	m.routes.Wait()
}

// peekedConn is a connection whose first bytes were read to route it: they are read
// again from r, and then the connection itself (gRPC buffers its reads: a second
// buffer would copy every byte once more).
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) {
	if c.r != nil {
		if c.r.Buffered() > 0 {
			return c.r.Read(p)
		}
		c.r = nil
	}
	return c.Conn.Read(p)
}

// handshaked are the gRPC server's credentials for connections whose TLS handshake
// listenMux has done: the peer's certificates reach the handlers as they would through
// credentials.NewTLS.
type handshaked struct{}

func (handshaked) ServerHandshake(nc net.Conn) (net.Conn, credentials.AuthInfo, error) {
	pc, ok := nc.(*peekedConn)
	if !ok {
		return nil, nil, errors.New("connection did not come through the node's listener")
	}
	tc, ok := pc.Conn.(*tls.Conn)
	if !ok {
		return nil, nil, errors.New("plaintext connection on a TLS listener")
	}
	return nc, tlsInfo(tc.ConnectionState()), nil
}

func (handshaked) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("server-side credentials")
}

func (handshaked) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

func (h handshaked) Clone() credentials.TransportCredentials { return h }

func (handshaked) OverrideServerName(string) error { return nil }
