//go:build !unix

package fastproxy

import "syscall"

// peekEnd cannot look at a connection here: a client that leaves is seen
// only when the response is written, a closed upstream connection when a
// request is sent on it.
func peekEnd(syscall.RawConn, bool) bool { return false }
