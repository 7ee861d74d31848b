package fastproxy

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// This file is the fast engine's one listener: each accepted connection
// goes to fasthttp (HTTP/1.1) or, when it opens with HTTP/2's preface (h2c
// with prior knowledge), to net/http; and fasthttp hands upgrade requests
// (websocket, h2c upgrade) over to net/http with the request replayed.

// h2Preface is what an HTTP/2 connection without TLS opens with.
var h2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// connQueue is a net.Listener fed by the sorter: Accept returns the
// connections pushed to it.
type connQueue struct {
	addr   net.Addr
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, conns: make(chan net.Conn, 64), closed: make(chan struct{})}
}

// Accept implements net.Listener.
func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.conns:
		return c, nil
	case <-q.closed:
		return nil, net.ErrClosed
	}
}

// push hands c to the queue's server; false (c closed) once it is closed.
func (q *connQueue) push(c net.Conn) bool {
	select {
	case q.conns <- c:
		return true
	case <-q.closed:
		c.Close()
		return false
	}
}

// Close implements net.Listener.
func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.closed) })
	return nil
}

// Addr implements net.Listener.
func (q *connQueue) Addr() net.Addr { return q.addr }

// sorter accepts from ln and sorts each connection by its first bytes.
type sorter struct {
	ln        net.Listener
	fast, std *connQueue
	// firstByte bounds the wait for a new connection's first bytes.
	firstByte time.Duration
	// burst is what the connections' writes join.
	burst *burst
	wg    sync.WaitGroup
}

func newSorter(ln net.Listener, firstByte time.Duration, b *burst) *sorter {
	return &sorter{ln: ln, fast: newConnQueue(ln.Addr()), std: newConnQueue(ln.Addr()), firstByte: firstByte, burst: b}
}

// run accepts until the listener closes, then closes both queues.
func (s *sorter) run() {
	defer func() {
		s.wg.Wait()
		s.fast.Close()
		s.std.Close()
	}()
	var delay time.Duration
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE, ENFILE, ECONNABORTED and the like: the listener still
			// works once descriptors free. Back off as net/http does (5 ms
			// doubling to 1 s) and keep accepting; never stop for good.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			time.Sleep(delay)
			continue
		}
		delay = 0
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.sort(c)
		}()
	}
}

// sort reads as much of the connection's first bytes as tell HTTP/2's
// preface from an HTTP/1 request line, and queues the connection with
// those bytes still to be read.
func (s *sorter) sort(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(s.firstByte))
	br := bufio.NewReaderSize(c, 256)
	h2 := true
	for i := 1; i <= len(h2Preface); i++ {
		b, err := br.Peek(i)
		if err != nil {
			c.Close() // silent or gone before a request
			return
		}
		if b[i-1] != h2Preface[i-1] {
			h2 = false
			break
		}
	}
	if !h2 && bareLF(br) {
		// fasthttp waits for a CRLF that never comes, then answers 400
		// after its read timeout: answer at once (net/http answers too).
		refuseAndLinger(&peekedConn{Conn: c, r: br}, http.StatusBadRequest)
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	pc := &peekedConn{Conn: c, r: br, burst: s.burst}
	if h2 {
		s.std.push(pc)
		return
	}
	s.fast.push(pc)
}

// bareLF reports whether the request head at the start of br ends a line
// with a bare LF, as far as br's buffer holds it: it reads on until the
// head's end, a bare LF, a full buffer or the read deadline.
func bareLF(br *bufio.Reader) bool {
	for n := 1; n <= br.Size(); n++ {
		b, err := br.Peek(n)
		if err != nil {
			return false // gone or silent: fasthttp decides
		}
		if b[n-1] != '\n' {
			continue
		}
		if n == 1 || b[n-2] != '\r' {
			return true
		}
		if bytes.HasSuffix(b, []byte("\r\n\r\n")) {
			return false // the whole head, well formed
		}
	}
	return false
}

// peekedConn is a connection whose first bytes sit in r; its writes join
// the burst of answers ready together (nil: written at once).
type peekedConn struct {
	net.Conn
	r     *bufio.Reader
	burst *burst
}

func (c *peekedConn) Write(p []byte) (int, error) {
	c.burst.join()
	return c.Conn.Write(p)
}

func (c *peekedConn) Read(p []byte) (int, error) {
	if c.r != nil {
		if c.r.Buffered() > 0 {
			return c.r.Read(p)
		}
		c.r = nil // drained: read the connection directly from now on
	}
	return c.Conn.Read(p)
}

// replayConn is a hijacked connection whose request fasthttp already read:
// net/http reads that request again from pre, then the connection.
type replayConn struct {
	net.Conn
	pre *bytes.Reader
}

func (c *replayConn) Read(p []byte) (int, error) {
	if c.pre != nil {
		if c.pre.Len() > 0 {
			return c.pre.Read(p)
		}
		c.pre = nil
	}
	return c.Conn.Read(p)
}
