// Package rawserver serves TCP connections on a free loopback port with a
// function that reads and writes raw bytes, for tests that need an
// upstream answering what net/http would not write (or recording what it
// was sent, byte for byte). Stopped when the test ends.
package rawserver

import (
	"net"
	"testing"
)

// Start serves each connection to a free loopback port with serve (which
// closes nothing: the connection is closed when it returns), until the test
// ends, and returns the port's address.
func Start(t testing.TB, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return ln.Addr().String()
}
