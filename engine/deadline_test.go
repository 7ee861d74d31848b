package engine

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

func TestParseBudget(t *testing.T) {
	for _, tc := range []struct {
		f    budgetFormat
		in   string
		want time.Duration
		ok   bool
	}{
		{formatGRPC, "250m", 250 * time.Millisecond, true},
		{formatGRPC, "2S", 2 * time.Second, true},
		{formatGRPC, "1H", time.Hour, true},
		{formatGRPC, "99999999n", 99999999, true},
		{formatGRPC, "0m", 0, true},
		{formatGRPC, "123456789m", 0, false}, // 9 digits
		{formatGRPC, "10x", 0, false},
		{formatGRPC, "-1m", 0, false},
		{formatGRPC, "+1m", 0, false},
		{formatGRPC, "m", 0, false},
		{formatMillis, "1500", 1500 * time.Millisecond, true},
		{formatMillis, "-5", 0, false},
		{formatMillis, "1.5", 0, false},
		{formatMillis, "99999999999999999999", 0, false},
		{formatSeconds, "1.5", 1500 * time.Millisecond, true},
		{formatSeconds, "2", 2 * time.Second, true},
		{formatSeconds, " 250ms ", 250 * time.Millisecond, true},
		{formatSeconds, "1m30s", 90 * time.Second, true},
		{formatSeconds, "-1s", 0, false},
		{formatSeconds, "NaN", 0, false},
		{formatSeconds, "1e400", 0, false},
		{formatSeconds, "soon", 0, false},
		{formatSeconds, "", 0, false},
		{formatSeconds, "1e12", maxBudget, true}, // far off: taken as the largest budget
	} {
		got, ok := parseBudget(tc.f, tc.in)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("parseBudget(%d, %q) = %v, %v; want %v, %v", tc.f, tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// A budget written for the upstream reads back as itself, rounded down to
// the millisecond, in every format.
func TestAppendBudgetReadsBack(t *testing.T) {
	for _, f := range []budgetFormat{formatSeconds, formatMillis, formatGRPC} {
		for _, b := range []time.Duration{0, 999 * time.Microsecond, 1500 * time.Millisecond, 42*time.Hour + 7*time.Millisecond, maxBudget} {
			s := string(appendBudget(nil, f, b))
			tolerance := time.Millisecond
			if f == formatGRPC && b >= 1e8*time.Millisecond {
				tolerance = time.Second // 8 digits of milliseconds do not reach: seconds
			}
			got, ok := parseBudget(f, s)
			if !ok || got > b || b-got >= tolerance {
				t.Errorf("format %d: %v written %q, read back %v, %v", f, b, s, got, ok)
			}
		}
		if s := string(appendBudget(nil, f, -time.Second)); s != map[budgetFormat]string{formatSeconds: "0", formatMillis: "0", formatGRPC: "0m"}[f] {
			t.Errorf("format %d: a passed deadline written %q", f, s)
		}
	}
}

// FuzzParseBudget: any header value is a budget in range or refused, never
// a panic, and what appendBudget writes reads back.
func FuzzParseBudget(f *testing.F) {
	for _, s := range []string{"250m", "2S", "1.5", "1500", "1m30s", "-1", "NaN", "99999999H"} {
		f.Add(uint8(0), s)
	}
	f.Fuzz(func(t *testing.T, format uint8, v string) {
		bf := budgetFormat(format % 3)
		b, ok := parseBudget(bf, v)
		if !ok {
			return
		}
		if b < 0 || b > maxBudget {
			t.Fatalf("%q read as %v", v, b)
		}
		if _, ok := parseBudget(bf, string(appendBudget(nil, bf, b))); !ok {
			t.Fatalf("%v written as %q does not read back", b, appendBudget(nil, bf, b))
		}
	})
}

func newTestEngine(t *testing.T, yaml string) *Engine {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func get(hdr ...string) *Request {
	h := http.Header{}
	for i := 0; i+1 < len(hdr); i += 2 {
		h.Set(hdr[i], hdr[i+1])
	}
	return &Request{Method: "GET", Path: "/", RemoteAddr: "192.0.2.1:1", Header: h}
}

// A deadline that has passed on arrival is refused at once with 503 and
// reason deadline; a budget that cannot be read is counted and ignored.
func TestDeadlinePassedOnArrival(t *testing.T) {
	e := newTestEngine(t, "adaptive: {algorithm: off}\n")
	for _, hdr := range [][]string{{"X-Request-Timeout", "0"}, {"grpc-timeout", "0m"}} {
		v, err := e.Decide(context.Background(), get(hdr...))
		if err != nil || v.Allowed || v.Status != StatusShed || v.Reason != sluice.ReasonDeadline {
			t.Errorf("%v: %+v %v, want a 503 for the deadline", hdr, v, err)
		}
	}
	v, err := e.Decide(context.Background(), get("X-Request-Timeout", "whenever"))
	if err != nil || !v.Allowed {
		t.Fatalf("an unreadable budget: %+v %v, want the request to go on", v, err)
	}
	v.Done(sluice.Success)
	if got := passedOn(&v); len(got) != 0 {
		t.Errorf("a request without a budget passes %v on", got)
	}
}

// A waiter in the queue whose deadline passes is refused then (reason
// deadline), not at max_wait; its client, still there, gets the answer.
// The slot it waited for goes to the next.
func TestDeadlineEndsTheQueueWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTestEngine(t, "adaptive: {algorithm: fixed, initial_limit: 1}\nqueue: {max_wait: 10s}\n")
		first, err := e.Decide(context.Background(), get())
		if err != nil || !first.Allowed {
			t.Fatalf("first: %+v %v", first, err)
		}
		start := time.Now()
		var wg sync.WaitGroup
		var waited Verdict
		wg.Add(1)
		go func() {
			defer wg.Done()
			waited, err = e.Decide(context.Background(), get("X-Request-Timeout", "300ms"))
		}()
		wg.Wait()
		if err != nil || waited.Allowed || waited.Reason != sluice.ReasonDeadline {
			t.Fatalf("waiter with a 300 ms budget: %+v %v, want refused for its deadline", waited, err)
		}
		if d := time.Since(start); d != 300*time.Millisecond {
			t.Errorf("refused after %v, want at the deadline (300 ms; the service's median is not known yet)", d)
		}
		first.Done(sluice.Success)
		v, err := e.Decide(context.Background(), get())
		if err != nil || !v.Allowed {
			t.Fatalf("after: %+v %v", v, err)
		}
		v.Done(sluice.Success)
	})
}

// A rule's max_wait ends at the deadline too, and what the wait took is
// given back.
func TestDeadlineEndsAQuotaWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTestEngine(t, `adaptive: {algorithm: off}
rules:
  - {rule_id: tb, identifier_type: global, algorithm: token_bucket, limit: 1, window: 10s, max_wait: 30s}
`)
		v, _ := e.Decide(context.Background(), get())
		v.Done(sluice.Success)
		start := time.Now()
		v, err := e.Decide(context.Background(), get("X-Request-Timeout", "2s"))
		if err != nil || v.Allowed || v.Reason != sluice.ReasonDeadline || time.Since(start) != 2*time.Second {
			t.Fatalf("%+v %v after %v, want a refusal for the deadline at 2 s", v, err, time.Since(start))
		}
		// The quota comes back at 10 s, whole: the refused wait took none.
		time.Sleep(8*time.Second + time.Millisecond)
		v, err = e.Decide(context.Background(), get())
		if err != nil || !v.Allowed {
			t.Fatalf("at 10 s: %+v %v, want the token back", v, err)
		}
		v.Done(sluice.Success)
	})
}

// passedOn collects the headers v passes upstream.
func passedOn(v *Verdict) map[string]string {
	out := map[string]string{}
	v.EachDeadlineHeader(func(name, value string) { out[name] = value })
	return out
}

// The budget passed upstream is what is left after the waits, in the
// header it came in (or deadlines.propagate), in that header's format;
// every deadline header the request carried is rewritten, so that none
// reaches the service with more time than is left.
func TestDeadlineHeaderPassedOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTestEngine(t, "adaptive: {algorithm: off}\n")
		for _, tc := range []struct{ name, in, want string }{
			{"X-Request-Timeout", "1.5", "1.2"},
			{"Grpc-Timeout", "1500m", "1200m"},
		} {
			v, err := e.Decide(context.Background(), get(tc.name, tc.in))
			if err != nil || !v.Allowed {
				t.Fatal(v, err)
			}
			time.Sleep(300 * time.Millisecond)
			if got := passedOn(&v); len(got) != 1 || got[tc.name] != tc.want {
				t.Errorf("%s %s after 300 ms: passed on as %v, want %q", tc.name, tc.in, got, tc.want)
			}
			v.Done(sluice.Success)
		}
		v, _ := e.Decide(context.Background(), get("X-Request-Timeout", "10", "Grpc-Timeout", "2S"))
		time.Sleep(500 * time.Millisecond)
		if got := passedOn(&v); len(got) != 2 || got["X-Request-Timeout"] != "1.5" || got["Grpc-Timeout"] != "1500m" {
			t.Errorf("both headers sent, the tighter 2 s, after 500 ms: passed on as %v, want both at 1.5 s", got)
		}
		v.Done(sluice.Success)
		e2 := newTestEngine(t, "adaptive: {algorithm: off}\ndeadlines: {from: [x-deadline-ms], propagate: grpc-timeout, default: 5s}\n")
		v, _ = e2.Decide(context.Background(), get("X-Deadline-Ms", "800"))
		if got := passedOn(&v); len(got) != 1 || got["Grpc-Timeout"] != "800m" {
			t.Errorf("propagate grpc-timeout: %v", got)
		}
		v.Done(sluice.Success)
		v, _ = e2.Decide(context.Background(), get())
		if d, ok := v.Deadline(); !ok || time.Until(d) != 5*time.Second {
			t.Errorf("the default budget: %v %v", d, ok)
		}
		v.Done(sluice.Success)
		e3 := newTestEngine(t, "adaptive: {algorithm: off}\ndeadlines: {propagate: none}\n")
		v, _ = e3.Decide(context.Background(), get("X-Request-Timeout", "2"))
		if got := passedOn(&v); len(got) != 0 {
			t.Errorf("propagate: none passed %v on", got)
		}
		v.Done(sluice.Success)
	})
}

// Once the service's median is known, a request whose budget is below it
// is refused on arrival (it would not be answered in time), counted with
// the service time it spared; one with room goes on.
func TestDeadlineBelowTheMedianRefusedOnArrival(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTestEngine(t, "adaptive: {algorithm: gradient2}\nrules: [{rule_id: wide, identifier_type: global, algorithm: token_bucket, limit: 1000000, window: 1s}]\n")
		for e.limiter.RTT() == 0 {
			v, err := e.Decide(context.Background(), get())
			if err != nil || !v.Allowed {
				t.Fatalf("warming up: %+v %v", v, err)
			}
			time.Sleep(100 * time.Millisecond)
			v.Done(sluice.Success)
		}
		rtt := e.limiter.RTT()
		if rtt < 90*time.Millisecond || rtt > 100*time.Millisecond {
			t.Fatalf("median %v, want the service's 100 ms (less the limiter's own CPU wait)", rtt)
		}
		start := time.Now()
		v, err := e.Decide(context.Background(), get("X-Request-Timeout", "50ms"))
		if err != nil || v.Allowed || v.Reason != sluice.ReasonDeadline || time.Since(start) != 0 {
			t.Fatalf("50 ms budget, 100 ms median: %+v %v after %v, want refused at once", v, err, time.Since(start))
		}
		v, err = e.Decide(context.Background(), get("X-Request-Timeout", "1s"))
		if err != nil || !v.Allowed {
			t.Fatalf("1 s budget: %+v %v", v, err)
		}
		v.Done(sluice.Success)
		// A stream (DecideStatic: no adaptive gate) is not held to the
		// unary median: with nothing to wait for, it starts.
		v, err = e.DecideStatic(context.Background(), get("X-Request-Timeout", "50ms"))
		if err != nil || !v.Allowed {
			t.Fatalf("a stream with a 50 ms budget: %+v %v, want it started", v, err)
		}
		v.Done(sluice.Success)
		got := map[string]float64{}
		mfs, _ := e.Metrics().Gatherer.Gather()
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				name := mf.GetName()
				for _, l := range m.GetLabel() {
					name += "/" + l.GetValue()
				}
				got[name] = m.GetCounter().GetValue()
			}
		}
		if got["sluice_deadline_refused_total/arrival"] != 1 || got["sluice_deadline_spared_seconds_total"] != rtt.Seconds() {
			t.Errorf("metrics %v, want 1 refused on arrival sparing the median, %v", got, rtt)
		}
	})
}

// A class's deadline is the budget of its requests that carry none; a
// header's wins over it, and other classes take deadlines.default.
func TestClassDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newTestEngine(t, `deadlines: {default: 10s}
adaptive:
  classes:
    - {name: interactive, share: 0.5, match: {path_pattern: /api/**}, deadline: 2s}
    - {name: batch, share: 0.5}
`)
		for _, tc := range []struct {
			path string
			hdr  []string
			want time.Duration
		}{
			{"/api/x", nil, 2 * time.Second},
			{"/api/x", []string{"X-Request-Timeout", "1"}, time.Second},
			{"/other", nil, 10 * time.Second},
		} {
			r := get(tc.hdr...)
			r.Path = tc.path
			v, err := e.Decide(context.Background(), r)
			if err != nil || !v.Allowed {
				t.Fatal(v, err)
			}
			if d, ok := v.Deadline(); !ok || time.Until(d) != tc.want {
				t.Errorf("%s %v: deadline in %v (%v), want %v", tc.path, tc.hdr, time.Until(d), ok, tc.want)
			}
			v.Done(sluice.Success)
		}
	})
}

// doneCounter counts the calls of Done: a face's context (the fast
// engine's) starts watching its client at the first.
type doneCounter struct {
	context.Context
	calls int
}

func (c *doneCounter) Done() <-chan struct{} { c.calls++; return c.Context.Done() }

// A request with a deadline that is admitted at once never asks its
// context for Done: no context is derived from the face's until a wait
// begins, so the fast engine starts no watch of the client for it.
func TestDeadlineDerivesNoContextWithoutAWait(t *testing.T) {
	e := newTestEngine(t, `adaptive: {algorithm: gradient2}
rules: [{rule_id: wide, identifier_type: global, algorithm: token_bucket, limit: 1000, window: 1s}]
`)
	ctx := &doneCounter{Context: context.Background()}
	v, err := e.Decide(ctx, get("X-Request-Timeout", "5"))
	if err != nil || !v.Allowed {
		t.Fatal(v, err)
	}
	v.Done(sluice.Success)
	if d, ok := v.Deadline(); !ok || time.Until(d) <= 0 {
		t.Fatalf("deadline %v %v, want the request's 5 s", d, ok)
	}
	if ctx.calls != 0 {
		t.Errorf("Done called %d times for a request that never waited", ctx.calls)
	}
}
