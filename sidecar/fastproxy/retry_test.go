package fastproxy

import (
	"errors"
	"fmt"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestRetryStaleConn: the fast engine's upstream client retries once, and
// only a GET, HEAD or OPTIONS whose connection the upstream had closed (it
// never reached the service); never a timeout, never a PUT or POST.
func TestRetryStaleConn(t *testing.T) {
	closed := fmt.Errorf("write: %w", fasthttp.ErrConnectionClosed)
	cases := []struct {
		method   string
		attempts int
		err      error
		want     bool
	}{
		{"GET", 1, closed, true},
		{"HEAD", 1, closed, true},
		{"OPTIONS", 1, closed, true},
		{"GET", 2, closed, false},
		{"PUT", 1, closed, false},
		{"POST", 1, closed, false},
		{"GET", 1, fasthttp.ErrTimeout, false},
		{"GET", 1, errors.New("dial tcp: connection refused"), false},
	}
	for _, c := range cases {
		var req fasthttp.Request
		req.Header.SetMethod(c.method)
		if _, got := retryStaleConn(&req, c.attempts, c.err); got != c.want {
			t.Errorf("%s after %d attempts on %v: retry %v, want %v", c.method, c.attempts, c.err, got, c.want)
		}
	}
}
