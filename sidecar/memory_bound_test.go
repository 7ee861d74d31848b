package sidecar_test

import (
	"context"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
)

// Long identifiers are kept as fixed-size digests: 1,500 distinct 200 KB
// user ids cost kilobytes, not hundreds of megabytes, and each still has
// its own quota.
func TestLongIdentifiersBoundMemory(t *testing.T) {
	e := newEngine(t, `
adaptive: {algorithm: off}
rules:
  - {rule_id: user, identifier_type: user_id, algorithm: fixed_window, limit: 1, window: 1h}
  - {rule_id: key, identifier_type: api_key, algorithm: fixed_window, limit: 1, window: 1h}
  - {rule_id: hdr, identifier_type: "header:X-Tenant", algorithm: fixed_window, limit: 1, window: 1h}
`, nil)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	base := strings.Repeat("u", 200<<10)
	for i := range 1500 {
		v := strconv.Itoa(i) + base
		h := http.Header{}
		h.Set("X-User-ID", v)
		h.Set("X-API-Key", v)
		h.Set("X-Tenant", v)
		req := &engine.Request{Method: "GET", Path: "/", RemoteAddr: "192.0.2.1:1", Header: h}
		d, err := e.Decide(context.Background(), req)
		if err != nil || !d.Allowed {
			t.Fatalf("identity %d: first request refused: %+v %v", i, d.Decision, err)
		}
		d.Done(sluice.Success)
		if i == 0 {
			if again, _ := e.Decide(context.Background(), req); again.Allowed {
				t.Fatal("a long identifier's second request was admitted: its quota was lost")
			}
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(e)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 20<<20 {
		t.Errorf("4,500 keys of long identifiers grew the heap by %d MB", grew>>20)
	}
	if st := e.State(); st.Store.Keys != 4500 {
		t.Errorf("%d keys, want 4,500 (one per identity and rule)", st.Store.Keys)
	}
}
