package client

import (
	"strings"
	"sync"
	"time"
)

// Connection is the state of the client's link to the registrar, for the agent's
// page: read-only introspection.
type Connection struct {
	// Target lists the registrar addresses; the client uses one at a time.
	Target string
	// Channel is the gRPC channel's connectivity state (IDLE, CONNECTING, READY,
	// TRANSIENT_FAILURE, SHUTDOWN).
	Channel string
	// Connected says the watch stream is up and has caught up: the cache is current.
	Connected bool
	// Since is when Connected last changed, or when the client started.
	Since time.Time
	// LastError is why the watch stream last ended, at LastErrorAt; empty if it
	// never has.
	LastError   string
	LastErrorAt time.Time
	// Version is the last registrar version the cache applied; empty before the
	// first snapshot.
	Version string
}

// Connection returns the state of the client's link to the registrar.
func (c *Client) Connection() Connection { return c.d.Connection() }

// Connection returns the state of the client's link to the registrar; the agent
// finds it on the driver behind a registry.Front opened by name.
func (c *driver) Connection() Connection {
	current, since := c.cache.connState()
	msg, at := c.lost.get()
	return Connection{Target: strings.Join(c.opts.Addresses, ","), Channel: c.conn.GetState().String(),
		Connected: current, Since: since, LastError: msg, LastErrorAt: at, Version: c.cache.token()}
}

// connState reports whether the cache is current and since when it is, or since
// when it is not: since the stream came up and caught up, or since it went down.
// A snapshot on the same stream (a scoped client's new set of services) does not
// move it.
func (c *cache) connState() (current bool, since time.Time) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.current, c.currentSince
}

// lastError is the last error a watch stream ended with.
type lastError struct {
	mu  sync.Mutex
	msg string
	at  time.Time
}

func (l *lastError) set(err error, at time.Time) {
	if err == nil {
		return
	}
	l.mu.Lock()
	l.msg, l.at = err.Error(), at
	l.mu.Unlock()
}

func (l *lastError) get() (string, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.msg, l.at
}
