package clientlimit

import (
	"net/http"
	"testing"
)

// FuzzRetryAfter: whatever a service sends as Retry-After, the client reads
// a delay that is not negative (a far date saturates, and is then past
// MaxRetryAfter), or none; it never panics.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"", "0", "1", "30", "-5", "99999999999999999999", "1.5", "Wed, 21 Oct 2015 07:28:00 GMT",
		"Wed, 21 Oct 2099 07:28:00 GMT", "soon", "\x00", "  7 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		resp := &http.Response{Header: http.Header{"Retry-After": {v}}}
		d, ok := retryAfter(resp)
		if d < 0 || (!ok && d != 0) {
			t.Fatalf("Retry-After %q: %v, %v", v, d, ok)
		}
	})
}
