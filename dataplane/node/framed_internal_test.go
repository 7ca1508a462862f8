package node

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
)

// tcpPair is both ends of a loopback TCP connection, each as a framed stream.
func tcpPair(t *testing.T) (a, b *framed) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lis.Close() }()
	acc := make(chan net.Conn, 1)
	go func() {
		nc, _ := lis.Accept()
		acc <- nc
	}()
	da, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	db := <-acc
	if db == nil {
		t.Fatal("accept failed")
	}
	a = newFramed(da, bufio.NewReader(da), 1<<20)
	b = newFramed(db, bufio.NewReader(db), 1<<20)
	t.Cleanup(func() { a.close(); b.close() })
	return a, b
}

func frameHeader(kind byte, n uint32) []byte {
	h := []byte{kind, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(h[1:], n)
	return h
}

// TestFramedStream: frames arrive whole and in order, pings are not seen, an end
// frame is a clean io.EOF, a status its error.
func TestFramedStream(t *testing.T) {
	a, b := tcpPair(t)
	ack := &nodev1.LinkFrame{Frame: &nodev1.LinkFrame_BatchAck{BatchAck: &nodev1.BatchAck{Seq: 9}}}
	if err := a.SendMsg(ack); err != nil {
		t.Fatal(err)
	}
	if err := a.writeFrame(framePing, nil); err != nil {
		t.Fatal(err)
	}
	big := &nodev1.LinkFrame{Frame: &nodev1.LinkFrame_Batch{Batch: &nodev1.Batch{Seq: 1, Messages: []*nodev1.Message{{Payload: bytes.Repeat([]byte("x"), 300<<10)}}}}}
	if err := a.SendMsg(big); err != nil {
		t.Fatal(err)
	}
	if err := a.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []*nodev1.LinkFrame{ack, big} {
		got := &nodev1.LinkFrame{}
		if err := b.RecvMsg(got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("got a frame of %d bytes, want %d", proto.Size(got), proto.Size(want))
		}
	}
	if err := b.RecvMsg(&nodev1.LinkFrame{}); !errors.Is(err, io.EOF) {
		t.Fatalf("after the end frame: %v, want io.EOF", err)
	}

	a, b = tcpPair(t)
	if err := a.writeStatus(status.New(codes.PermissionDenied, "not you")); err != nil {
		t.Fatal(err)
	}
	if err := b.RecvMsg(&nodev1.LinkFrame{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("after a status frame: %v, want PERMISSION_DENIED", err)
	}
}

// TestFramedStreamEndsWithoutEnd: a connection that closes without an end frame (its
// peer died) is an error, not a clean end; so is one cut inside a frame.
func TestFramedStreamEndsWithoutEnd(t *testing.T) {
	for _, tail := range [][]byte{nil, frameHeader(frameData, 100)[:3], append(frameHeader(frameData, 100), 1, 2)} {
		a, b := tcpPair(t)
		if _, err := a.nc.Write(tail); err != nil {
			t.Fatal(err)
		}
		_ = a.nc.Close()
		err := b.RecvMsg(&nodev1.LinkFrame{})
		if err == nil || errors.Is(err, io.EOF) || status.Code(err) != codes.Unavailable {
			t.Errorf("connection closed after %d bytes: %v, want UNAVAILABLE", len(tail), err)
		}
	}
}

// TestFramedStreamEmptyMessage: a data frame without payload is a message whose
// fields are all unset (proto encodes one as nothing), for a link's frames as for the
// client API's messages; it once crashed the reader.
func TestFramedStreamEmptyMessage(t *testing.T) {
	a, b := tcpPair(t)
	if _, err := a.nc.Write(frameHeader(frameData, 0)); err != nil {
		t.Fatal(err)
	}
	if err := a.SendMsg(&nodev1.RespondResponse{}); err != nil {
		t.Fatal(err)
	}
	lf := &nodev1.LinkFrame{Frame: &nodev1.LinkFrame_Relink{}}
	if err := b.RecvMsg(lf); err != nil || lf.GetFrame() != nil {
		t.Fatalf("empty data frame read as %v, %v; want an empty LinkFrame", lf, err)
	}
	if err := b.RecvMsg(&nodev1.RespondResponse{}); err != nil {
		t.Fatalf("empty RespondResponse: %v", err)
	}
}

// TestFramedStreamRefusesBadFrames: an unknown kind, a ping with a payload, a frame
// over the limit end the stream before the payload is read.
func TestFramedStreamRefusesBadFrames(t *testing.T) {
	for _, hdr := range [][]byte{frameHeader(9, 0), frameHeader(framePing, 3), frameHeader(frameData, 2<<20)} {
		a, b := tcpPair(t)
		if _, err := a.nc.Write(hdr); err != nil {
			t.Fatal(err)
		}
		err := b.RecvMsg(&nodev1.LinkFrame{})
		if status.Code(err) != codes.Internal {
			t.Errorf("header %v: %v, want INTERNAL (malformed frame)", hdr, err)
		}
	}
}

// TestFramedKeepalive: an end that pings keeps the stream up while idle; one that
// goes silent is given up after interval + timeout.
func TestFramedKeepalive(t *testing.T) {
	a, b := tcpPair(t)
	a.keepalive(time.Second, 500*time.Millisecond)
	b.keepalive(time.Second, 500*time.Millisecond)
	got := make(chan error, 1)
	go func() { got <- b.RecvMsg(&nodev1.LinkFrame{}) }()
	select {
	case err := <-got:
		t.Fatalf("an idle stream whose peer pings ended: %v", err)
	case <-time.After(3 * time.Second):
	}
	// A peer that never pings, its connection open.
	_, lone := tcpPair(t)
	lone.keepalive(time.Second, 500*time.Millisecond)
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- lone.RecvMsg(&nodev1.LinkFrame{}) }()
	start := time.Now()
	select {
	case err := <-gaveUp:
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("silent peer: %v, want UNAVAILABLE", err)
		}
		t.Logf("silent peer given up after %s", time.Since(start).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("a silent peer was not given up within 10 s")
	}
}

func TestParseKeepalive(t *testing.T) {
	if i, to, err := parseKeepalive("10s/5s"); err != nil || i != 10*time.Second || to != 5*time.Second {
		t.Errorf("10s/5s: %v %v %v", i, to, err)
	}
	for _, bad := range []string{"10s", "10s/", "/5s", "1ms/5s", "10s/0s", "x/y"} {
		if _, _, err := parseKeepalive(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// FuzzReadFrame: whatever a connection carries, the reader neither crashes nor reads
// a payload over its limit, and a well-formed frame reads back as it was written.
func FuzzReadFrame(f *testing.F) {
	open, _ := proto.Marshal(&nodev1.LinkOpen{Headers: []*nodev1.LinkHeader{{Key: mdNode, Values: []string{"a/n1"}}, {Key: mdKeepalive, Values: []string{"10s/5s"}}}})
	f.Add(append(frameHeader(frameOpen, uint32(len(open))), open...))
	f.Add(frameHeader(framePing, 0))
	f.Add(append(frameHeader(frameData, 3), 1, 2, 3))
	f.Add(frameHeader(frameData, 1<<30))
	const limit = 4096
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		for {
			kind, buf, err := readFrame(r, limit)
			if err != nil {
				break
			}
			if buf != nil && len(*buf) > limit {
				t.Fatalf("payload of %d bytes over the limit", len(*buf))
			}
			sharedPool.Put(buf)
			if kind < frameData || kind > frameOpen {
				t.Fatalf("kind %d read", kind)
			}
		}
		md, err := readOpen(bufio.NewReader(bytes.NewReader(data)))
		if err == nil {
			_, _, _ = parseKeepalive(first(md, mdKeepalive))
		}
		// A payload written as a frame reads back the same.
		var out bytes.Buffer
		out.Write(frameHeader(frameData, uint32(len(data))))
		out.Write(data)
		kind, buf, err := readFrame(bufio.NewReader(&out), 1<<20)
		if err != nil || kind != frameData || (len(data) > 0) != (buf != nil) || (buf != nil && !bytes.Equal(*buf, data)) {
			t.Fatalf("a frame of %d bytes read back as kind %d, %v", len(data), kind, err)
		}
	})
}

// TestReadOpen: the headers of a LinkOpen are read as they were sent; anything other
// than a LinkOpen first is refused.
func TestReadOpen(t *testing.T) {
	md := metadata.Pairs(mdNode, "a/n1", mdSegments, "s1", mdSegments, "s2")
	var buf bytes.Buffer
	f := newFramed(nopConn{&buf}, nil, 1<<20)
	lo := &nodev1.LinkOpen{}
	for k, v := range md {
		lo.Headers = append(lo.Headers, &nodev1.LinkHeader{Key: k, Values: v})
	}
	b, _ := proto.Marshal(lo)
	if err := f.writeFrame(frameOpen, mem.BufferSlice{mem.SliceBuffer(b)}); err != nil {
		t.Fatal(err)
	}
	got, err := readOpen(bufio.NewReader(&buf))
	if err != nil || first(got, mdNode) != "a/n1" || len(got.Get(mdSegments)) != 2 {
		t.Fatalf("read %v, %v", got, err)
	}
	if _, err := readOpen(bufio.NewReader(bytes.NewReader(frameHeader(framePing, 0)))); !errors.Is(err, errMalformedFrame) {
		t.Fatalf("a ping first: %v, want a malformed frame", err)
	}
}

// nopConn is a net.Conn writing into a buffer (only Write is used).
type nopConn struct{ w io.Writer }

func (c nopConn) Write(p []byte) (int, error)    { return c.w.Write(p) }
func (nopConn) Read([]byte) (int, error)         { return 0, io.EOF }
func (nopConn) Close() error                     { return nil }
func (nopConn) LocalAddr() net.Addr              { return nil }
func (nopConn) RemoteAddr() net.Addr             { return nil }
func (nopConn) SetDeadline(time.Time) error      { return nil }
func (nopConn) SetReadDeadline(time.Time) error  { return nil }
func (nopConn) SetWriteDeadline(time.Time) error { return nil }

// TestTryWriteFrameNeverWaits: a write that must not wait writes to a peer that does
// not read until the socket is full, and then refuses; the frame the socket took only
// in part is finished before anything else, so once the peer reads, every frame
// arrives whole and in order — those written without waiting, then those written
// after them by a writer that waits.
func TestTryWriteFrameNeverWaits(t *testing.T) {
	a, b := tcpPair(t)
	frame := func(i int) mem.BufferSlice {
		p := bytes.Repeat([]byte{byte(i)}, 8<<10)
		binary.BigEndian.PutUint32(p, uint32(i))
		return mem.BufferSlice{mem.SliceBuffer(p)}
	}
	sent := 0
	for a.tryWriteFrame(frame(sent)) {
		sent++
		if sent > 100000 {
			t.Fatal("the socket never filled up")
		}
	}
	if sent == 0 {
		t.Fatal("nothing was written without waiting")
	}
	// Nothing else writes: the refusal means a frame is unfinished (or being
	// finished).
	// A writer that waits comes after the unfinished frame.
	const after = 20
	wrote := make(chan error, 1)
	go func() {
		for i := range after {
			if err := a.writeFrame(frameData, frame(sent+i)); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	_ = b.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	for i := range sent + after {
		kind, buf, err := b.readFrame()
		if err != nil {
			t.Fatalf("frame %d of %d: %v", i, sent+after, err)
		}
		if got := binary.BigEndian.Uint32(*buf); kind != frameData || got != uint32(i) || len(*buf) != 8<<10 || (*buf)[len(*buf)-1] != byte(i) {
			t.Fatalf("frame %d: kind %d, number %d, %d bytes", i, kind, got, len(*buf))
		}
		sharedPool.Put(buf)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
}
