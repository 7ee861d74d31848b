//go:build !unix

package fastproxy

import "syscall"

// peekClosed cannot watch a connection here: a client that leaves is seen
// only when the response is written.
func peekClosed(syscall.RawConn) bool { return false }

// peekEnded cannot look here: a closed upstream connection is found when
// a request is sent on it.
func peekEnded(syscall.RawConn) bool { return false }
