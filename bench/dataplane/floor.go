package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
)

// The floor (-only floor, link scenario only): the least a message path of the same
// shape can cost on this machine. Two relays, each a goroutine that reads
// length-prefixed frames from one TCP connection and writes each at once to the next,
// carry the publisher's messages to the subscriber: client → relay → relay → client,
// three TCP hops and three readers woken per message, as NATS's route and the node's
// link have, and nothing else (no parsing, routing, accounting or allocation). Its
// latency is what the host's scheduler and network stack give any process; what the
// systems measure above it is their own.

type floorTarget struct {
	lis      []net.Listener
	conns    []net.Conn
	pub      *bufio.Writer
	wg       sync.WaitGroup
	mu       sync.Mutex
	hdr      [4]byte
	subReady chan net.Conn
}

func startFloor(ctx context.Context) (target, error) {
	t := &floorTarget{subReady: make(chan net.Conn, 1)}
	// relay 2: the subscriber dials it; the link from relay 1 arrives on it too.
	l2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = l2.Close()
		return nil, err
	}
	t.lis = []net.Listener{l1, l2}
	link, linkIn, err := t.connect(ctx, l2)
	if err != nil {
		t.close()
		return nil, err
	}
	pub, pubIn, err := t.connect(ctx, l1)
	if err != nil {
		t.close()
		return nil, err
	}
	t.pub = bufio.NewWriterSize(pub, 64<<10)
	t.wg.Go(func() { relay(pubIn, link) })
	t.wg.Go(func() {
		sub, ok := <-t.subReady
		if ok {
			relay(linkIn, sub)
		}
	})
	return t, nil
}

// connect dials l and accepts the connection: both ends, closed with the target.
func (t *floorTarget) connect(ctx context.Context, l net.Listener) (dialed, accepted net.Conn, err error) {
	var d net.Dialer
	if dialed, err = d.DialContext(ctx, "tcp", l.Addr().String()); err != nil {
		return nil, nil, err
	}
	if accepted, err = l.Accept(); err != nil {
		_ = dialed.Close()
		return nil, nil, err
	}
	t.mu.Lock()
	t.conns = append(t.conns, dialed, accepted)
	t.mu.Unlock()
	return dialed, accepted, nil
}

// relay copies frames from in to out, each written as soon as it is read.
func relay(in, out net.Conn) {
	r := bufio.NewReaderSize(in, 64<<10)
	buf := make([]byte, 4, 64<<10)
	for {
		if _, err := io.ReadFull(r, buf[:4]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(buf[:4]))
		if cap(buf) < 4+n {
			buf = append(buf[:4], make([]byte, n)...)
		}
		buf = buf[:4+n]
		if _, err := io.ReadFull(r, buf[4:]); err != nil {
			return
		}
		if _, err := out.Write(buf); err != nil {
			return
		}
	}
}

func (t *floorTarget) name() string { return "floor (2 Go relays over TCP)" }

func (t *floorTarget) subscribe(ctx context.Context, k int, got func([]byte)) error {
	if k != 1 {
		return errors.New("the floor has one subscriber")
	}
	sub, subIn, err := t.connect(ctx, t.lis[1])
	if err != nil {
		return err
	}
	t.subReady <- subIn
	t.wg.Go(func() {
		r := bufio.NewReaderSize(sub, 64<<10)
		var hdr [4]byte
		buf := make([]byte, 64<<10)
		for {
			if _, err := io.ReadFull(r, hdr[:]); err != nil {
				return
			}
			n := int(binary.BigEndian.Uint32(hdr[:]))
			if n > len(buf) {
				buf = make([]byte, n)
			}
			if _, err := io.ReadFull(r, buf[:n]); err != nil {
				return
			}
			got(buf[:n])
		}
	})
	return nil
}

func (t *floorTarget) publish(p []byte, _ bool) error {
	binary.BigEndian.PutUint32(t.hdr[:], uint32(len(p)))
	if _, err := t.pub.Write(t.hdr[:]); err != nil {
		return err
	}
	_, err := t.pub.Write(p)
	return err
}

func (t *floorTarget) flush() error { return t.pub.Flush() }

func (t *floorTarget) dropped() uint64 { return 0 }

func (t *floorTarget) close() {
	for _, l := range t.lis {
		_ = l.Close()
	}
	t.mu.Lock()
	for _, c := range t.conns {
		_ = c.Close()
	}
	t.mu.Unlock()
	close(t.subReady)
	t.wg.Wait()
}
