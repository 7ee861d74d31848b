// Package netproxy is a TCP proxy for tests on loopback: it adds latency
// each way and can cut the link (a partition) and heal it, between a
// client and a real server (Redis across regions, a ZooKeeper session
// that must expire).
package netproxy

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy on loopback that holds every chunk of bytes
// for a delay in each direction: a cross-region link for tests. Cut makes
// it refuse and drop connections (a partition) until Heal.
type Proxy struct {
	ln     net.Listener
	target string
	delay  time.Duration
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

// Start proxies a new loopback port to target, adding delay each
// way. It stops when the test ends.
func Start(t testing.TB, target string, delay time.Duration) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, delay: delay, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut drops every connection and refuses new ones.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Heal lets connections through again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Close stops the proxy.
func (p *Proxy) Close() {
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.conns[c] = true
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil || !p.track(in) || !p.track(out) {
			in.Close()
			if out != nil {
				out.Close()
			}
			continue
		}
		p.wg.Add(2)
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

// pipe copies src to dst, each chunk after the delay, in order.
func (p *Proxy) pipe(src, dst net.Conn) {
	defer p.wg.Done()
	type chunk struct {
		b  []byte
		at time.Time
	}
	ch := make(chan chunk, 1024)
	go func() {
		for c := range ch {
			time.Sleep(time.Until(c.at)) // the injected latency itself
			if _, err := dst.Write(c.b); err != nil {
				break
			}
		}
		dst.Close()
		for range ch {
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			ch <- chunk{append([]byte(nil), buf[:n]...), time.Now().Add(p.delay)}
		}
		if err != nil {
			if err != io.EOF {
				src.Close()
			}
			close(ch)
			return
		}
	}
}
