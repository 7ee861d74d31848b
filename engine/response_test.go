package engine

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// WriteHeaders allocates once per request (the values and the bytes of
// their numbers in one block), and writes the same headers as EachHeader,
// for a short rule id and for one too long for the block.
func TestWriteHeadersAllocatesOnce(t *testing.T) {
	for _, id := range []string{"short", strings.Repeat("r", 120)} {
		cfg, err := config.Parse("test.yaml", []byte("adaptive: {algorithm: off}\nrules: [{rule_id: "+id+
			", identifier_type: global, algorithm: token_bucket, limit: 1000, window: 1s}]\n"))
		if err != nil {
			t.Fatal(err)
		}
		e, err := New(cfg, Options{Clock: sluice.NewFakeClock(time.Unix(1_700_000_000, 0))})
		if err != nil {
			t.Fatal(err)
		}
		v, err := e.Decide(context.Background(), &Request{Method: "GET", Path: "/", RemoteAddr: "192.0.2.1:1", Header: http.Header{}})
		if err != nil || !v.Allowed {
			t.Fatalf("%s: %+v, %v", id, v, err)
		}
		want := http.Header{}
		v.EachHeader(func(k, val string) { want[k] = []string{val} })
		h := http.Header{}
		v.WriteHeaders(h)
		if len(h) != 5 || len(h) != len(want) {
			t.Fatalf("%s: %v, want the 5 quota headers %v", id, h, want)
		}
		for k := range want {
			if h.Get(k) != want.Get(k) {
				t.Errorf("%s: %s %q, want %q", id, k, h.Get(k), want.Get(k))
			}
		}
		limit := 1.0
		if len(id) > 100 {
			limit = 2 // the numbers' bytes apart
		}
		if n := testing.AllocsPerRun(100, func() { clear(h); v.WriteHeaders(h) }); n > limit {
			t.Errorf("%s: WriteHeaders allocates %v times, want %v", id, n, limit)
		}
		v.Done(sluice.Ignore)
		e.Close()
	}
}
