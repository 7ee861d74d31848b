package main

import (
	"bytes"
	"context"
	"errors"
	"iter"
	"net"
	"net/http"
	"net/netip"
	"strconv"

	"github.com/panjf2000/gnet/v2"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
)

// proxy is the event handler: every callback runs on the one event loop.
type proxy struct {
	gnet.BuiltinEventEngine
	up    net.Addr
	e     *engine.Engine // nil: forward every request
	ready func()         // called once the engine listens (nil: none)
	// booted receives the engine once it listens, for run to stop it.
	booted chan gnet.Engine
}

func (p *proxy) OnBoot(eng gnet.Engine) gnet.Action {
	p.booted <- eng
	if p.ready != nil {
		p.ready()
	}
	return gnet.None
}

// pair is a client connection and its upstream connection, and the
// verdicts of the requests sent up and not yet answered, in order.
type pair struct {
	client, up gnet.Conn
	peer       netip.Addr
	pending    [][]byte // requests read before the upstream connection opened
	verdicts   []engine.Verdict
}

var (
	crlf2 = []byte("\r\n\r\n")
	xff   = []byte("X-Forwarded-For: ")
)

func (p *proxy) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	if pr, ok := c.Context().(*pair); ok { // the upstream side opened
		pr.up = c
		for _, b := range pr.pending {
			_, _ = c.Write(b)
		}
		pr.pending = nil
		return nil, gnet.None
	}
	pr := &pair{client: c}
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		pr.peer = a.AddrPort().Addr().Unmap()
	}
	c.SetContext(pr)
	if _, err := c.EventLoop().Register(gnet.NewContext(context.Background(), pr), p.up); err != nil {
		return nil, gnet.Close
	}
	return nil, gnet.None
}

func (p *proxy) OnClose(c gnet.Conn, _ error) gnet.Action {
	pr, ok := c.Context().(*pair)
	if !ok {
		return gnet.None
	}
	for i := range pr.verdicts {
		pr.verdicts[i].Done(sluice.Ignore)
	}
	pr.verdicts = nil
	if c == pr.client && pr.up != nil {
		_ = pr.up.Close()
	} else if c == pr.up {
		_ = pr.client.Close()
	}
	return gnet.None
}

func (p *proxy) OnTraffic(c gnet.Conn) gnet.Action {
	pr := c.Context().(*pair)
	buf, _ := c.Peek(-1)
	used := 0
	for used < len(buf) {
		n, head := frame(buf[used:])
		if n < 0 {
			return gnet.Close
		}
		if n == 0 {
			break
		}
		msg := buf[used : used+n]
		used += n
		if c == pr.client {
			p.request(pr, msg, head)
		} else {
			p.response(pr, msg, head)
		}
	}
	_, _ = c.Discard(used)
	return gnet.None
}

// request decides and forwards one request (head: its header's length).
func (p *proxy) request(pr *pair, msg []byte, head int) {
	if p.e != nil {
		req := engine.Request{Peer: pr.peer, Header: rawHeaders(msg[:head])}
		req.Method, req.Path = requestLine(msg)
		v, err := p.e.DecideNow(context.Background(), &req)
		if err != nil || !v.Allowed {
			status := engine.StatusShed
			switch {
			case errors.Is(err, engine.ErrAmbiguous):
				status = http.StatusBadRequest
			case err == nil:
				status = v.Status
			}
			out := []byte("HTTP/1.1 " + strconv.Itoa(status) + " Refused\r\nContent-Length: 0\r\n")
			v.EachHeader(func(k, val string) { out = append(append(append(append(out, k...), ": "...), val...), "\r\n"...) })
			_, _ = pr.client.Write(append(out, "\r\n"...))
			return
		}
		pr.verdicts = append(pr.verdicts, v)
	}
	// Forward with an X-Forwarded-For, as the nginx contender does.
	out := make([]byte, 0, len(msg)+len(xff)+48)
	out = append(out, msg[:head-2]...)
	out = append(out, xff...)
	out = pr.peer.AppendTo(out)
	out = append(out, "\r\n"...)
	out = append(out, msg[head-2:]...)
	if pr.up == nil {
		pr.pending = append(pr.pending, out)
		return
	}
	_, _ = pr.up.Write(out)
}

// response forwards one response, with the quota headers of its request's
// verdict.
func (p *proxy) response(pr *pair, msg []byte, head int) {
	if len(pr.verdicts) == 0 {
		_, _ = pr.client.Write(msg)
		return
	}
	v := &pr.verdicts[0]
	out := make([]byte, 0, len(msg)+256)
	out = append(out, msg[:head-2]...)
	v.EachHeader(func(k, val string) { out = append(append(append(append(out, k...), ": "...), val...), "\r\n"...) })
	out = append(out, msg[head-2:]...)
	_, _ = pr.client.Write(out)
	v.Done(engine.OutcomeOf(status(msg)))
	pr.verdicts = pr.verdicts[1:]
}

// frame returns the length of the first whole message in b (header and a
// Content-Length body) and of its header; 0 while incomplete; -1 when its
// Content-Length cannot be read.
func frame(b []byte) (n, head int) {
	i := bytes.Index(b, crlf2)
	if i < 0 {
		return 0, 0
	}
	head = i + 4
	n = head
	if v, ok := rawHeaders(b[:head]).value("content-length"); ok {
		cl, err := strconv.Atoi(v)
		if err != nil || cl < 0 {
			return -1, 0
		}
		n += cl
	}
	if len(b) < n {
		return 0, 0
	}
	return n, head
}

// requestLine returns a request's method and path.
func requestLine(msg []byte) (method, path string) {
	line := msg[:max(0, bytes.IndexByte(msg, '\r'))]
	m, rest, _ := bytes.Cut(line, []byte(" "))
	target, _, _ := bytes.Cut(rest, []byte(" "))
	if q := bytes.IndexByte(target, '?'); q >= 0 {
		target = target[:q]
	}
	return string(m), string(target)
}

// status returns a response's status code (0 when unreadable).
func status(msg []byte) int {
	if len(msg) < 12 {
		return 0
	}
	s, _ := strconv.Atoi(string(msg[9:12]))
	return s
}

// rawHeaders is a message's header block, read as engine.Headers and
// engine.HeaderCounter.
type rawHeaders []byte

// all yields the values of the header name (any case), in order.
func (h rawHeaders) all(name string) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for line := range bytes.SplitSeq(h, []byte("\r\n")) {
			k, v, ok := bytes.Cut(line, []byte(":"))
			if ok && len(k) == len(name) && bytes.EqualFold(k, []byte(name)) && !yield(bytes.TrimSpace(v)) {
				return
			}
		}
	}
}

// value returns the first value of the header name.
func (h rawHeaders) value(name string) (string, bool) {
	for v := range h.all(name) {
		return string(v), true
	}
	return "", false
}

// Get implements engine.Headers.
func (h rawHeaders) Get(name string) string {
	v, _ := h.value(name)
	return v
}

// Values implements engine.Headers.
func (h rawHeaders) Values(name string) []string {
	var out []string
	for v := range h.all(name) {
		out = append(out, string(v))
	}
	return out
}

// Count implements engine.HeaderCounter: the engine counts each header
// its rules read, and Values would copy them.
func (h rawHeaders) Count(name string) int {
	n := 0
	for range h.all(name) {
		n++
	}
	return n
}
