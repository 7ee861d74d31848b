//go:build unix

package fastproxy

import "syscall"

// peekEnd reports whether the connection has ended (its peer closed or
// reset it) rather than being idle or holding bytes to read (a pipelined
// request, which it leaves unread). With wait, it waits until the
// connection is readable, and returns false at once when the connection's
// read deadline passes; without, it looks once.
func peekEnd(raw syscall.RawConn, wait bool) bool {
	ended := false
	var b [1]byte
	err := raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if err == syscall.EAGAIN || err == syscall.EINTR {
			return !wait // nothing yet: wait for the descriptor to be readable, or not
		}
		ended = err != nil || n == 0 // reset, or end of stream
		return true
	})
	return err == nil && ended
}
