package daemon

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// writeDeadlineConn bounds each write to a client by timeout: a client that
// stops reading (its window full, its socket buffer full) has its
// connection cut once a write has waited that long, and whatever the
// request held (its adaptive slot, its concurrency rule) comes back, as
// nginx's send_timeout does. The deadline is moved only when less than
// three quarters of timeout is left, so a stream of writes costs a clock
// read each, not a timer update each.
type writeDeadlineConn struct {
	net.Conn
	timeout time.Duration
	until   time.Time // the deadline set last
	fixed   bool      // the server set a deadline of its own: writes keep it
}

func withWriteDeadline(c net.Conn, timeout time.Duration) net.Conn {
	if timeout <= 0 {
		return c
	}
	return &writeDeadlineConn{Conn: c, timeout: timeout}
}

func (c *writeDeadlineConn) Write(p []byte) (int, error) {
	now := time.Now()
	if !c.fixed && c.until.Sub(now) < c.timeout*3/4 {
		c.until = now.Add(c.timeout)
		if err := c.Conn.SetWriteDeadline(c.until); err != nil {
			return 0, err
		}
	}
	return c.Conn.Write(p)
}

// SetWriteDeadline lets the server set a deadline of its own (a refusal's,
// a shutdown's), which writes then keep; the zero time hands the deadline
// back to the writes.
func (c *writeDeadlineConn) SetWriteDeadline(t time.Time) error {
	c.until, c.fixed = t, !t.IsZero()
	return c.Conn.SetWriteDeadline(t)
}

// SetDeadline is SetReadDeadline and SetWriteDeadline.
func (c *writeDeadlineConn) SetDeadline(t time.Time) error {
	c.until, c.fixed = t, !t.IsZero()
	return c.Conn.SetDeadline(t)
}

// CloseWrite half-closes the connection when the one under it can.
func (c *writeDeadlineConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("sidecar: the connection cannot half-close")
}

// SyscallConn reaches the socket under the wrapper (the fast engine watches
// a queued request's connection through it for the client leaving).
func (c *writeDeadlineConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.New("sidecar: the connection has no socket")
}

// writeDeadlineListener wraps each accepted connection in a
// writeDeadlineConn.
type writeDeadlineListener struct {
	net.Listener
	timeout time.Duration
}

func (l writeDeadlineListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return withWriteDeadline(c, l.timeout), nil
}
