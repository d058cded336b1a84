// Package connlimit bounds the connections a listener keeps open at once,
// refusing the excess at once instead of queueing it.
//
// golang.org/x/net/netutil.LimitListener stops accepting at its bound, so
// excess connections wait in the kernel's accept queue and then in
// Accept, where a client cannot tell a slow server from a full one, and a
// flood of idle connections holds every newcomer until the flood's own
// connections time out. A Listener accepts every connection and closes one
// beyond its bound straight away: the client learns at once that it was
// refused (EOF or a reset) and may retry elsewhere, and what the listener
// holds is never more than its bound.
package connlimit

import (
	"net"
	"sync"
	"sync/atomic"
)

// Listener is a net.Listener that keeps at most Max connections open: a
// connection accepted while Max are open is closed at once, counted in
// Refused, and not returned by Accept. A connection stops counting when it
// is closed (the first Close of the net.Conn that Accept returned). Safe
// for concurrent use; create it with New.
type Listener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	refused atomic.Int64
}

// New returns ln limited to max (≥ 1) open connections.
func New(ln net.Listener, max int) *Listener {
	return &Listener{Listener: ln, max: int64(max)}
}

// Accept waits for the next connection within the bound and returns it. A
// connection beyond the bound is closed and Accept waits for the next one.
// It returns the inner listener's error (for example net.ErrClosed).
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refused.Add(1)
			c.Close()
			continue
		}
		return &conn{Conn: c, l: l}, nil
	}
}

// Max returns the bound on open connections.
func (l *Listener) Max() int { return int(l.max) }

// Open returns the number of connections open now (accepted, not yet
// closed).
func (l *Listener) Open() int { return int(l.open.Load()) }

// Refused returns the number of connections closed on arrival because Max
// were open.
func (l *Listener) Refused() int64 { return l.refused.Load() }

// conn is an accepted connection; its first Close frees its place.
type conn struct {
	net.Conn
	l    *Listener
	once sync.Once
}

// Close closes the connection and, the first time, frees its place.
func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}

// CloseWrite shuts down the writing side of a TCP connection (a no-op on
// others). net/http half-closes a connection this way before it closes one
// it answered with an error (a 431, a 408), so the client reads the answer
// instead of a reset.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
