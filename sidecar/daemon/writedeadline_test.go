package daemon

import (
	"net"
	"testing"
	"time"
)

// TestWriteDeadlineConn: a write to a peer that does not read fails after
// the timeout instead of blocking; a deadline the server sets itself is
// kept by the writes that follow; the zero time hands it back.
func TestWriteDeadlineConn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			peer <- c
		}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	p := <-peer // never reads
	defer p.Close()
	c := withWriteDeadline(raw, 200*time.Millisecond).(*writeDeadlineConn)
	chunk := make([]byte, 1<<20)
	began := time.Now()
	var werr error
	for i := 0; i < 1000 && werr == nil; i++ {
		_, werr = c.Write(chunk)
	}
	if werr == nil {
		t.Fatal("1 GB written to a peer that never reads")
	}
	if ne, ok := werr.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("write error %v, want a timeout", werr)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("the blocked write failed after %v, want about 200ms", d)
	}
	fixed := time.Now().Add(time.Hour)
	if err := c.SetWriteDeadline(fixed); err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write(nil)
	if !c.until.Equal(fixed) {
		t.Errorf("a write moved the server's own deadline to %v", c.until)
	}
	if err := c.SetWriteDeadline(time.Time{}); err != nil || c.fixed {
		t.Errorf("the zero time did not hand the deadline back: fixed %v, %v", c.fixed, err)
	}
	if _, ok := any(c).(interface{ CloseWrite() error }); !ok {
		t.Error("no CloseWrite")
	}
}
