package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
)

// The lean watcher (-watcher h2): a minimal gRPC client for the benchmark's watcher
// children. It speaks gRPC over HTTP/2 on a real TCP connection, as gRPC-go does, but
// one goroutine per connection reads the frames of all its streams and hands each
// complete message to the stream's handler right there: no goroutine, receive
// buffer and wake-up per stream. On a 2-core machine the watchers' child shares the
// cores with the registrar it measures, and gRPC-go's per-stream receive path costs
// the child more CPU per event than the registrar spends sending it; agents pay
// that on their own nodes. h2load-style load generators read the same way.

const (
	// h2StreamWindow and h2ConnWindow are the receive windows the lean watcher
	// grants: large, so the registrar's sends are never held up by a watcher that
	// reads promptly (gRPC-go grows its windows to as much by BDP estimation).
	h2StreamWindow = 4 << 20
	h2ConnWindow   = 16 << 20
	// h2HeadKeep is how much of each message a handler in the initial phase gets:
	// a SNAPSHOT_COMPLETE fits whole, a snapshot part is only looked at by its head
	// (see head), so its 64 KiB are never copied.
	h2HeadKeep = 512
	// watchPath is the method the lean watcher calls.
	watchPath = "/switchboard.registrar.v1.Registrar/WatchEndpoints"
)

// h2Conn is one HTTP/2 connection carrying many watch streams.
type h2Conn struct {
	nc   net.Conn
	fr   *http2.Framer // reads on the reader goroutine; writes under wmu
	addr string
	// failed is told (on the reader goroutine) why the connection stopped being
	// usable: a GOAWAY, or the reader's error. Nil: not told. Not called after close.
	failed func(error)

	wmu         sync.Mutex
	cond        *sync.Cond // on wmu: a stream slot or send window became free, or the connection failed
	bw          *bufio.Writer
	henc        *hpack.Encoder
	hbuf        bytes.Buffer
	nextID      uint32
	sendWin     int64  // connection send window the server granted us
	peerWin     int64  // the server's initial stream window: how much one request may carry
	maxStreams  uint32 // the server's SETTINGS_MAX_CONCURRENT_STREAMS
	active      uint32 // streams open
	err         error  // why no more streams may be opened (GOAWAY, reader error, close)
	dirty       bool   // written and not flushed
	closing     atomic.Bool
	readerDone  chan struct{}
	smu         sync.Mutex
	streams     map[uint32]*h2Stream // the reader's; opened streams are added under smu
	connUnacked int                  // received bytes not yet given back by WINDOW_UPDATE; reader only
	// streamWin and connWin are the receive windows we grant; WINDOW_UPDATEs give
	// back half of one at a time.
	streamWin, connWin int
}

// h2Stream is one watch stream; everything but its registration is the reader's.
type h2Stream struct {
	id uint32
	// keep is how many bytes of each message onMsg gets (0: all); a handler may
	// change it for the messages after the current one.
	keep  int
	onMsg func(s *h2Stream, msg []byte, size int) error
	onEnd func(error)

	hdr      [5]byte // the current message's gRPC prefix, nh bytes of it so far
	nh       int
	size     int    // the current message's length
	left     int    // of it still to come
	buf      []byte // what is kept of it, when it spans DATA frames
	headers  bool   // the response headers came
	unacked  int    // received bytes not yet given back by WINDOW_UPDATE
	finished bool
}

// dialH2 connects to addr: the client preface, our SETTINGS and windows, and the
// server's SETTINGS (which say how many streams we may open) before it returns.
func dialH2(addr string, failed func(error)) (*h2Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c := &h2Conn{nc: nc, addr: addr, failed: failed, nextID: 1, sendWin: 65535, peerWin: 65535,
		maxStreams: ^uint32(0), streams: map[uint32]*h2Stream{}, readerDone: make(chan struct{})}
	c.cond = sync.NewCond(&c.wmu)
	bufSize := 64 << 10
	if transport.buffer > 0 {
		bufSize = transport.buffer
	}
	c.bw = bufio.NewWriterSize(nc, bufSize)
	c.fr = http2.NewFramer(c.bw, bufio.NewReaderSize(nc, bufSize))
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.SetReuseFrames() // a DATA frame is consumed before the next is read
	c.henc = hpack.NewEncoder(&c.hbuf)
	c.streamWin, c.connWin = h2StreamWindow, h2ConnWindow
	if transport.window > 0 {
		c.streamWin, c.connWin = transport.window, transport.window
	}
	_, err = io.WriteString(c.bw, http2.ClientPreface)
	if err == nil {
		err = c.fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 0},
			http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(c.streamWin)})
	}
	if err == nil && c.connWin > 65535 {
		err = c.fr.WriteWindowUpdate(0, uint32(c.connWin-65535))
	}
	if err == nil {
		err = c.bw.Flush()
	}
	if err == nil {
		err = c.serverSettings()
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("h2 dial %s: %w", addr, err)
	}
	go c.read()
	return c, nil
}

// serverSettings reads the server's first frame, its SETTINGS, and acks it.
func (c *h2Conn) serverSettings() error {
	if err := c.nc.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	f, err := c.fr.ReadFrame()
	if err != nil {
		return err
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		return fmt.Errorf("first frame from the server is %v, not SETTINGS", f.Header())
	}
	if err := c.settings(sf); err != nil {
		return err
	}
	return c.nc.SetReadDeadline(time.Time{})
}

func (c *h2Conn) settings(f *http2.SettingsFrame) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	err := f.ForeachSetting(func(s http2.Setting) error {
		switch s.ID {
		case http2.SettingMaxConcurrentStreams:
			c.maxStreams = s.Val
		case http2.SettingInitialWindowSize:
			c.peerWin = int64(s.Val)
		}
		return nil
	})
	if err == nil {
		err = c.fr.WriteSettingsAck()
	}
	if err == nil {
		err = c.bw.Flush()
	}
	c.cond.Broadcast()
	return err
}

// watch opens a WatchEndpoints stream for req. onMsg gets each message (its first
// keep bytes, 0: all) and onEnd how the stream ended, which it always does with an
// error (a watch does not end on its own), both on the connection's reader
// goroutine: they must not block. The request is not flushed: flush sends what
// was opened, so a batch of streams goes out together.
func (c *h2Conn) watch(req *registrarv1.WatchEndpointsRequest, keep int, onMsg func(*h2Stream, []byte, int) error, onEnd func(error)) error {
	body, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	msg := make([]byte, 5+len(body)) // gRPC's prefix: not compressed, length
	binary.BigEndian.PutUint32(msg[1:], uint32(len(body)))
	copy(msg[5:], body)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if int64(len(msg)) > c.peerWin {
		return fmt.Errorf("request of %d bytes exceeds the server's stream window %d", len(msg), c.peerWin)
	}
	for c.err == nil && (c.active >= c.maxStreams || c.sendWin < int64(len(msg))) {
		// Out of stream slots or send window: what is buffered goes out first,
		// since what frees either may depend on it.
		if err := c.flushLocked(); err != nil {
			return err
		}
		c.cond.Wait()
	}
	if c.err != nil {
		return c.err
	}
	s := &h2Stream{id: c.nextID, keep: keep, onMsg: onMsg, onEnd: onEnd}
	c.nextID += 2
	c.active++
	c.sendWin -= int64(len(msg))
	c.smu.Lock()
	c.streams[s.id] = s // before the HEADERS go out, so the reader knows the stream
	c.smu.Unlock()
	c.hbuf.Reset()
	for _, f := range [...]hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: watchPath},
		{Name: ":authority", Value: c.addr}, {Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	} {
		if err := c.henc.WriteField(f); err != nil {
			return err
		}
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: s.id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true}); err != nil {
		return err
	}
	// END_STREAM with the one request: gRPC-go's generated client half-closes a
	// server-streaming call after its request too (CloseSend); the registrar's
	// events still flow the other way.
	c.dirty = true
	return c.fr.WriteData(s.id, true, msg)
}

// flush sends the streams watch opened.
func (c *h2Conn) flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.flushLocked()
}

func (c *h2Conn) flushLocked() error {
	if !c.dirty {
		return nil
	}
	c.dirty = false
	return c.bw.Flush()
}

// write runs fn (a frame write) and flushes, under wmu: for the reader's frames.
func (c *h2Conn) write(fn func() error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := fn(); err != nil {
		return err
	}
	c.dirty = true
	return c.flushLocked()
}

// close closes the connection; its streams end without being told.
func (c *h2Conn) close() {
	c.closing.Store(true)
	c.nc.Close()
	<-c.readerDone
}

// read is the connection's one reader: it reads every frame, and when it stops,
// every open stream has ended with its error.
func (c *h2Conn) read() {
	defer close(c.readerDone)
	err := c.readFrames()
	if c.closing.Load() {
		err = net.ErrClosed
	}
	c.wmu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.cond.Broadcast()
	c.wmu.Unlock()
	c.smu.Lock()
	open := make([]*h2Stream, 0, len(c.streams))
	for _, s := range c.streams {
		open = append(open, s)
	}
	c.smu.Unlock()
	if c.closing.Load() {
		return
	}
	for _, s := range open {
		c.end(s, fmt.Errorf("connection: %w", err))
	}
	if c.failed != nil {
		c.failed(err)
	}
}

func (c *h2Conn) readFrames() error {
	for {
		f, err := c.fr.ReadFrame()
		if se, ok := err.(http2.StreamError); ok { // one stream's frame was malformed
			if s := c.stream(se.StreamID); s != nil {
				c.end(s, se)
			}
			continue
		}
		if err != nil {
			return err
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			if err := c.data(f); err != nil {
				return err
			}
		case *http2.MetaHeadersFrame:
			c.headers(f)
		case *http2.RSTStreamFrame:
			if s := c.stream(f.StreamID); s != nil {
				c.end(s, fmt.Errorf("RST_STREAM %v", f.ErrCode))
			}
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := c.settings(f); err != nil {
					return err
				}
			}
		case *http2.PingFrame:
			if !f.IsAck() { // the registrar's keepalive
				if err := c.write(func() error { return c.fr.WritePing(true, f.Data) }); err != nil {
					return err
				}
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				c.wmu.Lock()
				c.sendWin += int64(f.Increment)
				c.cond.Broadcast()
				c.wmu.Unlock()
			}
		case *http2.GoAwayFrame:
			c.goAway(f)
		}
	}
}

// goAway stops new streams and ends the ones the server will not process; the
// others continue until the server ends them.
func (c *h2Conn) goAway(f *http2.GoAwayFrame) {
	err := fmt.Errorf("GOAWAY %v (last stream %d) %q", f.ErrCode, f.LastStreamID, f.DebugData())
	c.wmu.Lock()
	c.err = err
	c.cond.Broadcast()
	c.wmu.Unlock()
	var lost []*h2Stream
	c.smu.Lock()
	for id, s := range c.streams {
		if id > f.LastStreamID {
			lost = append(lost, s)
		}
	}
	c.smu.Unlock()
	for _, s := range lost {
		c.end(s, err)
	}
	if c.failed != nil && !c.closing.Load() {
		c.failed(err)
	}
}

func (c *h2Conn) stream(id uint32) *h2Stream {
	c.smu.Lock()
	defer c.smu.Unlock()
	return c.streams[id]
}

// end removes s and tells its owner why it ended.
func (c *h2Conn) end(s *h2Stream, err error) {
	if s.finished {
		return
	}
	s.finished = true
	c.smu.Lock()
	delete(c.streams, s.id)
	c.smu.Unlock()
	c.wmu.Lock()
	c.active--
	c.cond.Broadcast()
	c.wmu.Unlock()
	s.onEnd(err)
}

// data hands a DATA frame to its stream and gives the window back as it is
// consumed: half a window at a time, so WINDOW_UPDATEs are few.
func (c *h2Conn) data(f *http2.DataFrame) error {
	n := int(f.Length) // flow control counts padding too
	var streamIncr, connIncr uint32
	if s := c.stream(f.StreamID); s != nil {
		switch err := s.data(f.Data()); {
		case err != nil:
			c.end(s, err)
		case f.StreamEnded():
			c.end(s, errors.New("stream ended without trailers"))
		default:
			if s.unacked += n; s.unacked >= c.streamWin/2 {
				streamIncr, s.unacked = uint32(s.unacked), 0
			}
		}
	}
	if c.connUnacked += n; c.connUnacked >= c.connWin/2 {
		connIncr, c.connUnacked = uint32(c.connUnacked), 0
	}
	if streamIncr == 0 && connIncr == 0 {
		return nil
	}
	return c.write(func() error {
		if streamIncr > 0 {
			if err := c.fr.WriteWindowUpdate(f.StreamID, streamIncr); err != nil {
				return err
			}
		}
		if connIncr > 0 {
			return c.fr.WriteWindowUpdate(0, connIncr)
		}
		return nil
	})
}

// data reassembles gRPC messages from a DATA frame's payload: a message may span
// frames, and one frame may end one message and start the next.
func (s *h2Stream) data(p []byte) error {
	for len(p) > 0 {
		if s.nh < 5 {
			n := copy(s.hdr[s.nh:], p)
			s.nh, p = s.nh+n, p[n:]
			if s.nh < 5 {
				return nil
			}
			if s.hdr[0] != 0 {
				return errors.New("compressed message (none was asked for)")
			}
			s.size = int(binary.BigEndian.Uint32(s.hdr[1:]))
			s.left, s.buf = s.size, s.buf[:0]
		}
		want := s.size
		if s.keep > 0 {
			want = min(want, s.keep)
		}
		n := min(len(p), s.left)
		chunk := p[:n]
		p, s.left = p[n:], s.left-n
		var msg []byte
		if n == s.size { // the whole message is in this frame: read it where it is
			msg = chunk[:want]
		} else {
			if room := want - len(s.buf); room > 0 {
				s.buf = append(s.buf, chunk[:min(room, n)]...)
			}
			msg = s.buf
		}
		if s.left > 0 {
			continue
		}
		s.nh = 0
		if err := s.onMsg(s, msg, s.size); err != nil {
			return err
		}
		if cap(s.buf) > 4<<10 { // a large message (up to 64 KiB) is rare once the snapshot is in: do not keep its buffer for every stream
			s.buf = nil
		}
	}
	return nil
}

// headers reads a stream's response headers, then its trailers: a watch that ends
// ends with an error, whatever its grpc-status.
func (c *h2Conn) headers(f *http2.MetaHeadersFrame) {
	s := c.stream(f.StreamID)
	if s == nil {
		return
	}
	if !s.headers && !f.StreamEnded() {
		s.headers = true
		if st := f.PseudoValue("status"); st != "200" {
			c.end(s, fmt.Errorf("HTTP status %s", st))
		}
		return
	}
	if !f.StreamEnded() {
		c.end(s, errors.New("a second HEADERS without END_STREAM"))
		return
	}
	code, msg := -1, ""
	for _, hf := range f.RegularFields() {
		switch hf.Name {
		case "grpc-status":
			code, _ = strconv.Atoi(hf.Value)
		case "grpc-message":
			msg = hf.Value
		}
	}
	if code < 0 {
		c.end(s, errors.New("trailers without grpc-status"))
		return
	}
	c.end(s, fmt.Errorf("watch ended: %w", status.Error(codes.Code(code), msg)))
}

// dialH2N opens n lean connections to addr, each reporting its failure to failed.
func dialH2N(addr string, n int, failed func(error)) ([]*h2Conn, error) {
	cs := make([]*h2Conn, 0, n)
	for range n {
		c, err := dialH2(addr, failed)
		if err != nil {
			closeH2(cs)
			return nil, err
		}
		cs = append(cs, c)
	}
	return cs, nil
}

func closeH2(cs []*h2Conn) {
	for _, c := range cs {
		c.close()
	}
}

// h2Watchers opens one watch per token at once, spread over cs, each reading its
// initial phase as untilCompleteFast does (by heads, counted in initialBytes);
// complete gets watcher i's SNAPSHOT_COMPLETE (nil: not needed), then each later
// message goes to then (nil: dropped undecoded) with the index in cs of the
// watcher's connection, on that connection's reader goroutine. A stream that ends
// before its SNAPSHOT_COMPLETE fails the call; one that ends after it goes to
// ended. It returns how long until every watcher had its SNAPSHOT_COMPLETE.
func h2Watchers(cs []*h2Conn, tokens []string, complete func(i int, msg []byte) error, then func(conn int, msg []byte) error, ended func(error)) (time.Duration, error) {
	var all sync.WaitGroup
	all.Add(len(tokens))
	errs := make(chan error, len(tokens))
	start := time.Now()
	for i, tok := range tokens {
		initial := true
		onMsg := func(s *h2Stream, msg []byte, size int) error {
			if !initial {
				if then != nil {
					return then(i%len(cs), msg)
				}
				return nil
			}
			initialBytes.Add(int64(size))
			if h := headOf(msg, size); !h.is(registrarv1.EndpointEvent_SNAPSHOT_COMPLETE) {
				return nil
			}
			if len(msg) < size {
				return fmt.Errorf("SNAPSHOT_COMPLETE of %d bytes, more than the %d kept", size, len(msg))
			}
			initial, s.keep = false, 0
			if complete != nil {
				if err := complete(i, msg); err != nil {
					return err
				}
			}
			all.Done()
			return nil
		}
		onEnd := func(err error) {
			if initial {
				errs <- fmt.Errorf("watcher %d: %w", i, err)
				return
			}
			ended(err)
		}
		req := &registrarv1.WatchEndpointsRequest{NodeName: fmt.Sprintf("w%d", i), LastVersion: tok, AcceptBatches: transport.batches, AcceptCompressed: transport.compressed}
		if err := cs[i%len(cs)].watch(req, h2HeadKeep, onMsg, onEnd); err != nil {
			return 0, err
		}
	}
	for _, c := range cs {
		if err := c.flush(); err != nil {
			return 0, err
		}
	}
	done := make(chan struct{})
	go func() { all.Wait(); close(done) }()
	select {
	case <-done:
		return time.Since(start), nil
	case err := <-errs:
		return 0, err
	case <-time.After(10 * time.Minute):
		return 0, errors.New("watchers' initial phase not done after 10m")
	}
}
