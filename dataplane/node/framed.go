package node

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
)

// The framed link transport carries a link's stream (LinkService.Link's frames, the
// same bytes) straight on a TCP or TLS connection, each frame behind a 5-byte header:
// its kind and its length. It exists for speed: on a hop, gRPC's HTTP/2 transport was
// half of the node's CPU (docs/dataplane.md), handing every batch to a writer
// goroutine, copying it into its buffer and splitting it into 16 KiB DATA frames under
// a flow-control window. Here the conn's own writer writes a batch with one system
// call, and the reader reads it into one pooled buffer.
//
// The stream's semantics are gRPC's: the dialer opens it with the headers a Link call
// carries as metadata (LinkOpen), the acceptor answers with a status (OK: accepted, or
// the refusal), either end closes its side cleanly with an end frame, and a silent
// connection is ended by keepalive pings (a ping every half interval while idle, the
// stream ended after interval + timeout without a frame). Identity is the TLS
// connection's, checked by the same code as a gRPC stream's; the control plane sees
// the same links either way. The node's listener serves both transports: a framed
// dialer starts with framesMagic (after the TLS handshake, whose ALPN is framesALPN).
// The same stream carries a call of the client API too (framedapi.go).
const (
	framesALPN     = "switchboard-link/1"
	framesMagic    = "SBLINK/1"
	frameHeaderLen = 5
	// finalWriteWait and finalCallWriteWait bound writing the frame that ends an
	// accepted link, and a call of the client API.
	finalWriteWait     = 5 * time.Second
	finalCallWriteWait = 30 * time.Second
	// openTimeout bounds an accepted connection's TLS handshake, magic and LinkOpen.
	openTimeout = 10 * time.Second
	// mdKeepalive is the header in which the dialer gives its keepalive interval and
	// timeout ("10s/5s"); both ends use it.
	mdKeepalive = "sb-keepalive"
	// framedReadBuffer is the read buffer of a framed connection: a full batch, or
	// many small frames, per system call. (32 KiB, reading most of a batch straight
	// into its pooled buffer, measured no faster.)
	framedReadBuffer = 256 << 10
)

// Kinds of frame.
const (
	frameData   byte = iota + 1 // a LinkFrame (or a batch in its wire form)
	framePing                   // keepalive; empty
	frameEnd                    // the sender is done; empty (a clean io.EOF)
	frameStatus                 // a google.rpc.Status: the answer to LinkOpen, or why the stream ended
	frameOpen                   // a LinkOpen: the dialer's headers
)

// errNoEnd is a connection that ended between frames without an end frame: its peer
// died or the path broke, as a gRPC stream that ends without a status.
var errNoEnd = status.Error(codes.Unavailable, "framed connection closed without an end of stream")

// framed is one link stream on a connection of its own. SendMsg is called by one
// goroutine at a time (the conn's writer), RecvMsg by one (its reader); the keepalive
// writes under the same lock as SendMsg.
type framed struct {
	nc    net.Conn
	r     *bufio.Reader
	plain bool // nc is a TCP connection: a frame is written with one writev
	w     *bufio.Writer
	limit int
	// idle bounds the wait for the next frame (interval + timeout; 0: none).
	idle     time.Duration
	interval time.Duration

	// raw, on TCP, writes without waiting (tryWriteFrame): writev writes bufs, and
	// leaves what it wrote, or why not, in wn and werr (a method value made once, not
	// a closure for every frame).
	raw    syscall.RawConn
	writev func(fd uintptr) bool
	wn     int
	werr   error

	wmu  sync.Mutex
	hdr  [frameHeaderLen]byte
	bufs net.Buffers // a frame's pieces for writev, kept for the next
	// pending is the rest of a frame that tryWriteFrame could not write at once; it
	// is written before anything else.
	pending   []byte
	lastWrite atomic.Int64 // unix nanoseconds
	stop      chan struct{}
	closeOnce sync.Once
}

func newFramed(nc net.Conn, r *bufio.Reader, limit int) *framed {
	tc, plain := nc.(*net.TCPConn)
	f := &framed{nc: nc, r: r, plain: plain, limit: limit, stop: make(chan struct{})}
	if plain {
		f.raw, _ = tc.SyscallConn()
		f.writev = f.writevNow
	} else {
		f.w = bufio.NewWriterSize(nc, streamBufferSize)
	}
	return f
}

// keepalive starts the pings and the read bound.
func (f *framed) keepalive(interval, timeout time.Duration) {
	if interval <= 0 {
		return
	}
	f.interval, f.idle = interval, interval+timeout
	go f.pinger()
}

// pinger sends a ping whenever nothing was written for half an interval, so that the
// far end hears from this one at least once per interval.
func (f *framed) pinger() {
	half := f.interval / 2
	t := time.NewTicker(half)
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case now := <-t.C:
			if now.UnixNano()-f.lastWrite.Load() < int64(half) {
				continue
			}
			if err := f.writeFrame(framePing, nil); err != nil {
				return
			}
		}
	}
}

// close ends the connection; a blocked SendMsg or RecvMsg returns.
func (f *framed) close() {
	f.closeOnce.Do(func() {
		close(f.stop)
		_ = f.nc.Close()
	})
}

// SendMsg writes v (a LinkFrame, or a batch in its wire form) as one data frame.
func (f *framed) SendMsg(v any) error {
	data, err := codec{}.Marshal(v)
	if err != nil {
		return err
	}
	defer data.Free()
	return f.writeFrame(frameData, data)
}

// writeFrame writes one frame: with one writev on TCP, through the write buffer (one
// TLS record, one system call) on TLS.
func (f *framed) writeFrame(kind byte, data mem.BufferSlice) error {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	if err := f.writePending(); err != nil {
		return err
	}
	var err error
	if f.plain {
		bufs := f.pieces(kind, data) // WriteTo consumes its receiver
		_, err = bufs.WriteTo(f.nc)
		clear(f.bufs)
	} else {
		f.setHeader(kind, data.Len())
		_, err = f.w.Write(f.hdr[:])
		for _, b := range data {
			if err == nil {
				_, err = f.w.Write(b.ReadOnlyData())
			}
		}
		if err == nil {
			err = f.w.Flush()
		}
	}
	f.lastWrite.Store(time.Now().UnixNano())
	if err != nil {
		f.close()
		return status.Errorf(codes.Unavailable, "framed connection: %v", err)
	}
	return nil
}

func (f *framed) setHeader(kind byte, n int) {
	f.hdr[0] = kind
	binary.BigEndian.PutUint32(f.hdr[1:], uint32(n))
}

// pieces are a frame's header and payload, for writev. Callers hold wmu.
func (f *framed) pieces(kind byte, data mem.BufferSlice) net.Buffers {
	f.setHeader(kind, data.Len())
	f.bufs = append(f.bufs[:0], f.hdr[:])
	for _, b := range data {
		f.bufs = append(f.bufs, b.ReadOnlyData())
	}
	return f.bufs
}

// tryWriteFrame writes a data frame on TCP without waiting: it reports false, having
// written nothing, when another write is under way or unfinished, or the connection
// is TLS or broken. When true, the frame is the connection's: written, or as much of
// it as the socket took, the rest left to a goroutine that writes it before anything
// else. So a writer that must not be held up (a link's reader, writing for a
// subscriber) may try it, and hand the frame to its queue when it cannot.
func (f *framed) tryWriteFrame(data mem.BufferSlice) bool {
	if f.raw == nil || !f.wmu.TryLock() {
		return false
	}
	defer f.wmu.Unlock()
	if len(f.pending) > 0 {
		return false
	}
	bufs := f.pieces(frameData, data)
	defer clear(f.bufs)
	err := f.raw.Write(f.writev)
	n, werr := max(f.wn, 0), f.werr
	f.werr = nil
	if err != nil || (werr != nil && !errors.Is(werr, unix.EAGAIN) && !errors.Is(werr, unix.EINTR)) {
		f.close()
		return false
	}
	f.lastWrite.Store(time.Now().UnixNano())
	for _, b := range bufs {
		if n >= len(b) {
			n -= len(b)
			continue
		}
		f.pending = append(f.pending, b[n:]...)
		n = 0
	}
	if len(f.pending) > 0 {
		go f.finishPending()
	}
	return true
}

// writevNow writes bufs with one writev, whether the socket has room or not.
func (f *framed) writevNow(fd uintptr) bool {
	f.wn, f.werr = unix.Writev(int(fd), f.bufs)
	return true // never wait for the socket
}

// finishPending writes what tryWriteFrame left, unless another write did first.
func (f *framed) finishPending() {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	_ = f.writePending()
}

// writePending writes the rest of a frame tryWriteFrame left. Callers hold wmu.
func (f *framed) writePending() error {
	if len(f.pending) == 0 {
		return nil
	}
	_, err := f.nc.Write(f.pending)
	f.pending = f.pending[:0]
	f.lastWrite.Store(time.Now().UnixNano())
	if err != nil {
		f.close()
		return status.Errorf(codes.Unavailable, "framed connection: %v", err)
	}
	return nil
}

// writeStatus sends st (the answer to LinkOpen, or why the stream ends).
func (f *framed) writeStatus(st *status.Status) error {
	b, err := proto.Marshal(st.Proto())
	if err != nil {
		return err
	}
	return f.writeFrame(frameStatus, mem.BufferSlice{mem.SliceBuffer(b)})
}

// CloseSend tells the far end this one is done (its RecvMsg returns io.EOF).
func (f *framed) CloseSend() error { return f.writeFrame(frameEnd, nil) }

// RecvMsg reads the next data frame into v. An end frame is io.EOF, a status frame
// its error (io.EOF when OK); pings are skipped.
func (f *framed) RecvMsg(v any) error {
	for {
		kind, buf, err := f.readFrame()
		if err != nil {
			return err
		}
		switch kind {
		case framePing:
			continue
		case frameEnd:
			return io.EOF
		case frameStatus:
			return statusFrame(buf)
		case frameData:
			if buf == nil {
				// A message whose fields are all unset: proto encodes it as nothing.
				return codec{}.Unmarshal(mem.BufferSlice{}, v)
			}
		}
		b := mem.NewBuffer(buf, sharedPool)
		err = codec{}.Unmarshal(mem.BufferSlice{b}, v)
		b.Free()
		return err
	}
}

// statusFrame is the error a status frame carries (io.EOF for OK).
func statusFrame(buf *[]byte) error {
	var st spb.Status
	if buf == nil {
		return io.EOF // OK encodes as nothing
	}
	err := proto.Unmarshal(*buf, &st)
	sharedPool.Put(buf)
	if err != nil {
		return status.Errorf(codes.Internal, "malformed frame: status: %v", err)
	}
	if err := status.FromProto(&st).Err(); err != nil {
		return err
	}
	return io.EOF
}

// readFrame reads one frame; its payload is a buffer of the pool (nil when empty).
// Any failure ends the connection, so that a writer blocked on it returns too.
func (f *framed) readFrame() (byte, *[]byte, error) {
	if f.idle > 0 {
		_ = f.nc.SetReadDeadline(time.Now().Add(f.idle))
	}
	kind, buf, err := readFrame(f.r, f.limit)
	if err != nil {
		f.close()
		var ne net.Error
		switch {
		case errors.Is(err, io.EOF):
			return 0, nil, errNoEnd
		case errors.As(err, &ne) && ne.Timeout():
			return 0, nil, status.Errorf(codes.Unavailable, "framed connection: keepalive: nothing heard for %s", f.idle)
		case errors.Is(err, errMalformedFrame):
			return 0, nil, status.Error(codes.Internal, err.Error())
		}
		return 0, nil, status.Errorf(codes.Unavailable, "framed connection: %v", err)
	}
	return kind, buf, nil
}

var errMalformedFrame = errors.New("malformed frame")

// readFrame reads a frame header and its payload from r. The payload is refused
// before it is read when longer than limit, or when a kind that has none carries one.
func readFrame(r *bufio.Reader, limit int) (byte, *[]byte, error) {
	var hdr [frameHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:1]); err != nil {
		return 0, nil, err // io.EOF between frames
	}
	if _, err := io.ReadFull(r, hdr[1:]); err != nil {
		return 0, nil, unexpected(err)
	}
	kind, n := hdr[0], binary.BigEndian.Uint32(hdr[1:])
	switch {
	case kind < frameData || kind > frameOpen:
		return 0, nil, fmt.Errorf("%w: unknown kind %d", errMalformedFrame, kind)
	case (kind == framePing || kind == frameEnd) && n != 0:
		return 0, nil, fmt.Errorf("%w: kind %d with a payload of %d bytes", errMalformedFrame, kind, n)
	case uint64(n) > uint64(limit):
		return 0, nil, fmt.Errorf("%w: %d bytes, over the limit of %d", errMalformedFrame, n, limit)
	case n == 0:
		return kind, nil, nil
	}
	buf := sharedPool.Get(int(n))
	if _, err := io.ReadFull(r, *buf); err != nil {
		sharedPool.Put(buf)
		return 0, nil, unexpected(err)
	}
	return kind, buf, nil
}

// unexpected is an end of the connection inside a frame.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// tlsState is the TLS state of a framed connection (nil on plaintext).
func tlsState(nc net.Conn) *tls.ConnectionState {
	if tc, ok := nc.(*tls.Conn); ok {
		st := tc.ConnectionState()
		return &st
	}
	return nil
}

// parseKeepalive reads mdKeepalive ("10s/5s").
func parseKeepalive(v string) (interval, timeout time.Duration, err error) {
	if v == "" {
		return 0, 0, nil
	}
	i, t, ok := strings.Cut(v, "/")
	if ok {
		interval, err = time.ParseDuration(i)
		if err == nil {
			timeout, err = time.ParseDuration(t)
		}
	}
	if !ok || err != nil || interval < time.Second || timeout <= 0 {
		return 0, 0, fmt.Errorf("header %s: %q is not INTERVAL/TIMEOUT (interval at least 1s)", mdKeepalive, v)
	}
	return interval, timeout, nil
}

// maxOpenBytes bounds a LinkOpen: a few headers.
const maxOpenBytes = 64 << 10

// openFramed dials c's endpoint on the framed transport and opens a stream with the
// headers md; it returns once the far end accepted it, with a context that carries the
// far end's address and TLS state.
func (n *Node) openFramed(c *conn, md metadata.MD) (*framed, context.Context, error) {
	ctx, cancel := context.WithTimeout(c.ctx, n.cfg.DialTimeout)
	defer cancel()
	endpoint := strings.TrimPrefix(strings.TrimPrefix(c.endpoint, "dns:///"), "passthrough:///")
	f, p, err := dialFramed(ctx, endpoint, n.cfg.LinkTLS, n.msgLimit())
	if err != nil {
		return nil, nil, err
	}
	md.Set(mdKeepalive, c.keepalive.Time.String()+"/"+c.keepalive.Timeout.String())
	if err := f.open(md); err != nil {
		f.close()
		return nil, nil, err
	}
	_ = f.nc.SetDeadline(time.Time{})
	f.keepalive(c.keepalive.Time, c.keepalive.Timeout)
	return f, peer.NewContext(context.Background(), p), nil
}

// dialFramed opens a connection of the framed transport to endpoint: over TLS with
// conf (its ALPN protocol framesALPN; the server name the endpoint's host unless conf
// names one) when conf is not nil. The connection's deadline is ctx's, until the
// caller clears it.
func dialFramed(ctx context.Context, endpoint string, conf *tls.Config, limit int) (*framed, *peer.Peer, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", endpoint)
	if err != nil {
		return nil, nil, err
	}
	p := &peer.Peer{Addr: nc.RemoteAddr(), LocalAddr: nc.LocalAddr()}
	if conf != nil {
		conf = conf.Clone()
		conf.NextProtos = []string{framesALPN}
		if conf.ServerName == "" {
			conf.ServerName, _, _ = net.SplitHostPort(endpoint)
		}
		tc := tls.Client(nc, conf)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, nil, err
		}
		nc = tc
		p.AuthInfo = tlsInfo(tc.ConnectionState())
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	return newFramed(nc, bufio.NewReaderSize(nc, framedReadBuffer), limit), p, nil
}

// open sends the magic and the LinkOpen, and waits for the far end's answer.
func (f *framed) open(md metadata.MD) error {
	lo := &nodev1.LinkOpen{}
	for _, k := range slices.Sorted(maps.Keys(md)) {
		lo.Headers = append(lo.Headers, &nodev1.LinkHeader{Key: k, Values: md[k]})
	}
	b, err := proto.Marshal(lo)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(f.nc, framesMagic); err != nil {
		return err
	}
	if err := f.writeFrame(frameOpen, mem.BufferSlice{mem.SliceBuffer(b)}); err != nil {
		return err
	}
	kind, buf, err := f.readFrame()
	switch {
	case err != nil:
		return err
	case kind != frameStatus:
		sharedPool.Put(buf)
		return status.Errorf(codes.Internal, "malformed frame: kind %d in answer to a LinkOpen", kind)
	}
	if err := statusFrame(buf); !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// acceptFramed serves a connection of the framed transport that listenMux routed
// here, from its LinkOpen on, with the same checks as a gRPC stream: a link, or a call
// of the client API when the LinkOpen names a method.
func (n *Node) acceptFramed(nc net.Conn, r *bufio.Reader) {
	f := newFramed(nc, r, n.msgLimit())
	defer f.close()
	// A node that stops does not wait out a connection still opening (openTimeout).
	opening := context.AfterFunc(n.ctx, f.close)
	md, err := readOpen(r)
	opening()
	var interval, timeout time.Duration
	if err == nil {
		interval, timeout, err = parseKeepalive(first(md, mdKeepalive))
	}
	if err != nil {
		n.cfg.Logger.Debug("framed connection refused", "node", n.id, "peer", nc.RemoteAddr().String(), "err", err)
		_ = f.writeStatus(status.New(codes.InvalidArgument, err.Error()))
		return
	}
	_ = nc.SetDeadline(time.Time{})
	f.keepalive(interval, timeout)
	p := &peer.Peer{Addr: nc.RemoteAddr(), LocalAddr: nc.LocalAddr()}
	if st := tlsState(nc); st != nil {
		p.AuthInfo = tlsInfo(*st)
	}
	ctx := metadata.NewIncomingContext(peer.NewContext(n.ctx, p), md)
	// The last write waits for the far end to read what is queued before it: a link's
	// far end always reads, so for a while; a client that stopped reading (a slow
	// consumer cut off) may start again, so longer, unless the node stops.
	wait := finalWriteWait
	if method := first(md, mdMethod); method != "" {
		err = n.serveCall(ctx, f, method) // framedapi.go
		wait = finalCallWriteWait
		defer context.AfterFunc(n.ctx, f.close)()
	} else {
		err = n.serveAccepted(ctx, f, func() error { return f.writeStatus(status.New(codes.OK, "")) })
	}
	_ = nc.SetWriteDeadline(time.Now().Add(wait))
	switch {
	case n.killed.Load():
		// A crash says nothing.
	case err != nil:
		_ = f.writeStatus(status.Convert(err))
	default:
		_ = f.CloseSend()
	}
}

// readOpen reads the LinkOpen that starts a framed connection.
func readOpen(r *bufio.Reader) (metadata.MD, error) {
	kind, buf, err := readFrame(r, maxOpenBytes)
	if err != nil {
		return nil, fmt.Errorf("reading LinkOpen: %w", err)
	}
	if kind != frameOpen || buf == nil {
		sharedPool.Put(buf)
		return nil, fmt.Errorf("%w: the first frame is of kind %d, not a LinkOpen", errMalformedFrame, kind)
	}
	var lo nodev1.LinkOpen
	err = proto.Unmarshal(*buf, &lo)
	sharedPool.Put(buf)
	if err != nil {
		return nil, fmt.Errorf("%w: LinkOpen: %v", errMalformedFrame, err)
	}
	md := metadata.MD{}
	for _, h := range lo.GetHeaders() {
		md.Append(h.GetKey(), h.GetValues()...)
	}
	return md, nil
}

func tlsInfo(st tls.ConnectionState) credentials.TLSInfo {
	return credentials.TLSInfo{State: st, CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
}
