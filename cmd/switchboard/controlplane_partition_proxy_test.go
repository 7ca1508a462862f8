package main

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// partitionProxy forwards TCP connections to one address (a replica's way to etcd)
// until the test partitions it:
//
//   - BlackHole: every byte in either direction is held back, connections stay open
//     and new ones are accepted and held too — a network that silently stops
//     delivering, which no read or write error reveals. Release delivers what was
//     held, late and in order (the late packets of a healed partition), then
//     forwards again; a side that closed meanwhile is closed on the other only
//     after partitionLinger, so that the late bytes are read and acted on.
//   - Cut: every connection is closed and new ones refused.
//
// A connection toward the target whose client went away during the black hole is
// delivered without its HTTP/2 RST_STREAM frames: the late request arrives, and the
// cancellation the client sent after it does not (the partition healed between the
// two) — so etcd acts on the late request, as it would on one from a paused process,
// and only the store's fencing can refuse it.
type partitionProxy struct {
	lis    net.Listener
	target string

	mu    sync.Mutex
	hold  bool
	cut   bool
	pipes []*heldPipe
	conns []net.Conn
	wg    sync.WaitGroup

	released atomic.Int64 // bytes delivered late toward the target by Release
}

// partitionLinger keeps a connection open after late bytes were delivered on it.
const partitionLinger = 2 * time.Second

func startPartitionProxy(t *testing.T, target string) *partitionProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &partitionProxy{lis: lis, target: target}
	p.wg.Go(p.accept)
	t.Cleanup(p.Cut)
	return p
}

func (p *partitionProxy) Addr() string { return p.lis.Addr().String() }

func (p *partitionProxy) accept() {
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			up.Close()
			return
		}
		toTarget := &heldPipe{dst: up, hold: p.hold, toTarget: true, p: p, h2: h2scan{preface: len(h2Preface)}}
		toClient := &heldPipe{dst: c, hold: p.hold, p: p}
		p.pipes = append(p.pipes, toTarget, toClient)
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Go(func() { toTarget.copyFrom(c) })
		p.wg.Go(func() { toClient.copyFrom(up) })
	}
}

// BlackHole stops delivering bytes, without closing anything.
func (p *partitionProxy) BlackHole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = true
	for _, h := range p.pipes {
		h.setHold(true)
	}
}

// Release delivers every held byte and forwards again.
func (p *partitionProxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = false
	for _, h := range p.pipes {
		h.setHold(false)
	}
}

// Cut closes the listener and every connection, and waits for the copies to end.
func (p *partitionProxy) Cut() {
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		return
	}
	p.cut = true
	p.lis.Close()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// heldPipe is one direction of a proxied connection.
type heldPipe struct {
	p        *partitionProxy
	toTarget bool

	mu        sync.Mutex
	dst       net.Conn
	hold      bool
	held      []byte
	srcClosed bool // the source ended while bytes were held: close dst after them
	h2        h2scan
}

func (h *heldPipe) copyFrom(src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			h.mu.Lock()
			if h.hold {
				h.held = append(h.held, buf[:n]...)
			} else {
				_, _ = h.dst.Write(h.scan(buf[:n], false))
			}
			h.mu.Unlock()
		}
		if err != nil {
			break
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hold {
		h.srcClosed = true // a black hole delivers no FIN either
		return
	}
	h.dst.Close()
	src.Close()
}

func (h *heldPipe) setHold(hold bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hold = hold
	if hold {
		return
	}
	if len(h.held) > 0 {
		if n, _ := h.dst.Write(h.scan(h.held, h.srcClosed)); h.toTarget {
			h.p.released.Add(int64(n))
		}
		h.held = nil
	}
	if h.srcClosed {
		dst := h.dst
		time.AfterFunc(partitionLinger, func() { dst.Close() })
	}
}

// h2Preface opens every HTTP/2 connection a client makes.
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// scan passes b through the toward-target HTTP/2 frame scanner (dropping RST_STREAM
// frames when dropRST); the other direction passes unchanged.
func (h *heldPipe) scan(b []byte, dropRST bool) []byte {
	if !h.toTarget {
		return b
	}
	return h.h2.feed(b, dropRST)
}

// h2scan follows the frame boundaries of a client's HTTP/2 byte stream.
type h2scan struct {
	preface int // bytes of the connection preface still to pass
	hdr     [9]byte
	nhdr    int
	left    int  // payload bytes left in the current frame
	rst     bool // the current frame is a RST_STREAM
}

// feed returns b, without the RST_STREAM frames when dropRST.
func (s *h2scan) feed(b []byte, dropRST bool) []byte {
	out := make([]byte, 0, len(b))
	for len(b) > 0 {
		switch {
		case s.preface > 0:
			n := min(s.preface, len(b))
			out, s.preface, b = append(out, b[:n]...), s.preface-n, b[n:]
		case s.left > 0:
			n := min(s.left, len(b))
			if !dropRST || !s.rst {
				out = append(out, b[:n]...)
			}
			s.left, b = s.left-n, b[n:]
		default:
			n := copy(s.hdr[s.nhdr:], b)
			s.nhdr, b = s.nhdr+n, b[n:]
			if s.nhdr < len(s.hdr) {
				continue
			}
			s.nhdr = 0
			s.left = int(s.hdr[0])<<16 | int(s.hdr[1])<<8 | int(s.hdr[2])
			s.rst = s.hdr[3] == 0x3 // RST_STREAM
			if !dropRST || !s.rst {
				out = append(out, s.hdr[:]...)
			}
		}
	}
	return out
}
