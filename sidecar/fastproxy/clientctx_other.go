//go:build !unix

package fastproxy

import "syscall"

// peekClosed cannot watch a connection here: a client that leaves is seen
// only when the response is written.
func peekClosed(syscall.RawConn) bool { return false }
