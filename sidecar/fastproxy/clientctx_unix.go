//go:build unix

package fastproxy

import "syscall"

// peekClosed waits until the connection is readable and reports whether
// that is its end (the client closed it, or reset it) rather than bytes
// (a pipelined request, which it leaves unread). It returns false at once
// when the connection's read deadline passes.
func peekClosed(raw syscall.RawConn) bool {
	closed := false
	var b [1]byte
	err := raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == syscall.EAGAIN || err == syscall.EINTR:
			return false // nothing yet: wait for the descriptor to be readable
		case err != nil:
			closed = true // reset
		case n == 0:
			closed = true // end of stream
		}
		return true
	})
	return err == nil && closed
}

// peekEnded reports, without waiting, whether the connection has ended
// (closed or reset by its peer); not when it is merely idle, nor when
// bytes wait to be read.
func peekEnded(raw syscall.RawConn) bool {
	ended := false
	var b [1]byte
	_ = raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ended = n == 0 && err == nil || err != nil && err != syscall.EAGAIN && err != syscall.EINTR
		return true
	})
	return ended
}
