package engine

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/static"
)

// left is what a rule's key has left, asked without taking (/v1/check).
func left(t *testing.T, e *Engine) int64 {
	t.Helper()
	v, err := e.CheckStatic(context.Background(), get(), false)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Allowed {
		return 0
	}
	// A dry run reports what would be left after its reservation.
	return v.Decision.Remaining + e.rules.Load().http[0].admissionCost()
}

// served admits one request, lets respond tell the response's cost, and
// ends it; it reports whether the request was admitted.
func served(t *testing.T, e *Engine, respond func(c *ResponseCost)) bool {
	t.Helper()
	v, err := e.Decide(context.Background(), get())
	if err != nil {
		t.Fatal(err)
	}
	if !v.Allowed {
		return false
	}
	c := v.Cost()
	if c == nil {
		t.Fatal("a request under a cost_from rule has no ResponseCost")
	}
	respond(c)
	v.Done(sluice.Success)
	return true
}

func header(v string) func(c *ResponseCost) {
	return func(c *ResponseCost) {
		c.ReadHeaders(func(name string) string {
			if name == "X-Tokens-Used" {
				return v
			}
			return ""
		})
	}
}

// The cost a response states is charged, admission needing only some quota
// left: a key with 100 tokens a minute serves answers of 40 until it is
// past its tokens, then refuses until they come back.
func TestCostFromHeader(t *testing.T) {
	e, clock := fakeClockEngine(t, "rules: [{rule_id: tokens, identifier_type: global, algorithm: fixed_window, limit: 100, window: 1m, cost_from: {header: X-Tokens-Used}}]\n")
	for i, want := range []int64{100, 60, 20} {
		if got := left(t, e); got != want {
			t.Fatalf("before answer %d: %d left, want %d", i, got, want)
		}
		if !served(t, e, header("40")) {
			t.Fatalf("answer %d refused with %d left", i, want)
		}
	}
	// 120 of 100 charged: refused, not lost.
	if served(t, e, header("40")) {
		t.Fatal("admitted past the tokens")
	}
	clock.Advance(time.Minute)
	if !served(t, e, header("1")) {
		t.Fatal("refused in the next minute")
	}
	if got := left(t, e); got != 99 {
		t.Errorf("after an answer of 1: %d left, want 99", got)
	}
}

// A cost that cannot be read is the rule's cost_default, counted by
// reason; an answer cheaper than the reservation gives the rest back.
func TestCostUnreadIsTheDefault(t *testing.T) {
	e, _ := fakeClockEngine(t, "rules: [{rule_id: tokens, identifier_type: global, algorithm: fixed_window, limit: 1000, window: 1m, cost_from: {header: X-Tokens-Used}, cost_default: 10, cost_estimate: 50}]\n")
	for _, v := range []string{"", "ten", "-3", "1e9", "99999999999999999"} {
		served(t, e, header(v))
	}
	if got := left(t, e); got != 950 {
		t.Fatalf("after 5 unread answers at 10 each: %d left, want 950", got)
	}
	served(t, e, header("2.5")) // reserved 50, charged 3
	if got := left(t, e); got != 947 {
		t.Errorf("after an answer of 2.5 (3): %d left, want 947", got)
	}
	var r *ruleCounters
	for _, c := range e.metrics.allRules() {
		if c.id == "tokens" {
			r = c
		}
	}
	if got := [3]uint64{r.costUnread[costMissing].Load(), r.costUnread[costInvalid].Load(), r.costCharged.Load()}; got != [3]uint64{1, 4, 53} {
		t.Errorf("missing, invalid, charged = %v, want [1 4 53]", got)
	}
}

// A JSON body's number, whole or in a text/event-stream's last event that
// has it; a body cut short, too large or not JSON is the default.
func TestCostFromJSON(t *testing.T) {
	e, _ := fakeClockEngine(t, "rules: [{rule_id: tokens, identifier_type: global, algorithm: token_bucket, limit: 100000, window: 1h, cost_from: {json: usage.total_tokens}, cost_default: 7}]\n")
	body := func(ct string, parts ...string) func(c *ResponseCost) {
		return func(c *ResponseCost) {
			if !c.WantsBody() {
				t.Fatal("a JSON rule wants no body")
			}
			c.SetContentType(ct)
			for _, p := range parts {
				_, _ = c.Write([]byte(p))
			}
		}
	}
	cases := []struct {
		name    string
		respond func(c *ResponseCost)
		cost    int64
	}{
		{"whole", body("application/json", `{"id":"x","usage":{"prompt_tokens":3,`, `"total_tokens":120}}`), 120},
		{"stream", body("text/event-stream; charset=utf-8", "data: {\"choices\":[]}\n\ndata: {\"usage\":{\"total", "_tokens\":33}}\n\ndata: [DONE]\n\n"), 33},
		{"stream without a last newline", body("text/event-stream", "data: {\"usage\":{\"total_tokens\":5}}"), 5},
		{"missing", body("application/json", `{"usage":{}}`), 7},
		{"not JSON", body("application/json", `{"usage":{"total_tokens":12}`), 7},
		{"negative", body("application/json", `{"usage":{"total_tokens":-12}}`), 7},
		{"too large", body("application/json", `{"usage":{"total_tokens":12},"pad":"`+strings.Repeat("x", MaxCostBody)+`"}`), 7},
		{"cut", func(c *ResponseCost) { body("application/json", `{"usage":{"total_tokens":12`)(c); c.Cut() }, 7},
	}
	for _, tc := range cases {
		before := left(t, e)
		served(t, e, tc.respond)
		if got := before - left(t, e); got != tc.cost {
			t.Errorf("%s: charged %d, want %d", tc.name, got, tc.cost)
		}
	}
}

// upstream_ms is the time from admission to the end, rounded up;
// response_bytes the bytes sent, whole or not.
func TestCostFromTimeAndBytes(t *testing.T) {
	e, clock := fakeClockEngine(t, `rules:
  - {rule_id: ms, identifier_type: global, algorithm: fixed_window, limit: 100000, window: 1h, cost_from: upstream_ms}
  - {rule_id: bytes, identifier_type: ip_address, algorithm: fixed_window, limit: 100000, window: 1h, cost_from: response_bytes}
`)
	v, err := e.Decide(context.Background(), get())
	if err != nil || !v.Allowed {
		t.Fatal(v, err)
	}
	c := v.Cost()
	_, _ = c.Write(make([]byte, 300))
	c.Cut()
	clock.Advance(1500*time.Millisecond + time.Microsecond)
	v.Done(sluice.Success)
	counts := map[string]uint64{}
	for _, r := range e.metrics.allRules() {
		counts[r.id] = r.costCharged.Load()
	}
	if counts["ms"] != 1501 || counts["bytes"] != 300 {
		t.Errorf("charged %v, want ms 1501, bytes 300", counts)
	}
}

// cost_estimate mean reserves the rule's recent mean: after answers of
// 100, a request is admitted only with 100 left.
func TestCostEstimateMean(t *testing.T) {
	e, _ := fakeClockEngine(t, "rules: [{rule_id: tokens, identifier_type: global, algorithm: fixed_window, limit: 350, window: 1m, cost_from: {header: X-Tokens-Used}, cost_estimate: mean}]\n")
	for range 3 {
		if !served(t, e, header("100")) {
			t.Fatal("refused within the tokens")
		}
	}
	// 50 left: enough for a reservation of 1, not of the mean (100).
	if served(t, e, header("100")) {
		t.Error("admitted with 50 left while answers cost 100")
	}
}

// A shadow rule that denied took nothing: its charge is the whole cost,
// never a give-back of what it did not take.
func TestCostShadowDeniedIsChargedWhole(t *testing.T) {
	e, _ := fakeClockEngine(t, "rules: [{rule_id: tokens, identifier_type: global, algorithm: fixed_window, limit: 10, window: 1m, mode: shadow, cost_from: {header: X-Tokens-Used}, cost_estimate: 8}]\n")
	served(t, e, header("8"))
	served(t, e, header("0")) // the shadow rule denied (8 of 10 used, 8 asked): nothing to give back
	served(t, e, header("0")) // still 2 left: denied again (a give-back of 8 not taken would admit it)
	if got := e.metrics.allRules()[0].wouldDeny.Load(); got != 2 {
		t.Fatalf("would_deny %d, want 2", got)
	}
}

func TestParseCost(t *testing.T) {
	for s, want := range map[string]int64{"0": 0, "12": 12, " 7 ": 7, "2.5": 3, "2.0": 2, ".5": 1, "1099511627776": 1 << 40} {
		if got, ok := ParseCost(s); !ok || got != want {
			t.Errorf("ParseCost(%q) = %d, %v; want %d", s, got, ok, want)
		}
	}
	for _, s := range []string{"", ".", "-1", "1e3", "0x10", "1099511627777", "12345678901234", "1,2", "+3", "3.x"} {
		if got, ok := ParseCost(s); ok {
			t.Errorf("ParseCost(%q) = %d, want refused", s, got)
		}
	}
}

func FuzzParseCost(f *testing.F) {
	for _, s := range []string{"12", "2.5", " 7", "-1", "1e3", "99999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := ParseCost(s)
		if ok && (n < 0 || n > maxCost) {
			t.Fatalf("ParseCost(%q) = %d", s, n)
		}
	})
}

// The response body's reader never keeps more than MaxCostBody, whatever
// is written, and never panics on any body.
func FuzzResponseCostBody(f *testing.F) {
	f.Add("application/json", []byte(`{"usage":{"total_tokens":3}}`), 5)
	f.Add("text/event-stream", []byte("data: {\"usage\":{\"total_tokens\":3}}\n\ndata: [DONE]\n"), 7)
	f.Add("text/event-stream", []byte("data: {\"usage\":{\"total_tokens\":\"4\"}}"), 1)
	e, _ := fakeClockEngine(f, "rules: [{rule_id: tokens, identifier_type: global, algorithm: token_bucket, limit: 1000000000, window: 1h, cost_from: {json: usage.total_tokens}}]\n")
	f.Fuzz(func(t *testing.T, ct string, body []byte, split int) {
		v, err := e.Decide(context.Background(), get())
		if err != nil || !v.Allowed {
			t.Skip()
		}
		c := v.Cost()
		c.SetContentType(ct)
		split = max(0, min(split, len(body)))
		_, _ = c.Write(body[:split])
		_, _ = c.Write(body[split:])
		if len(c.body) > MaxCostBody {
			t.Fatalf("kept %d bytes", len(c.body))
		}
		v.Done(sluice.Success)
	})
}

// Envoy's apply_on_stream_done on a hits_addend rule: the call before the
// request (hits 0) is admitted while a unit is left and takes nothing; the
// call at the stream's end is charged its hits, even past the limit, and
// never refused; once past, the next request's first call is refused.
func TestCostFromHitsAddend(t *testing.T) {
	e, clock := fakeClockEngine(t, "rules: [{rule_id: llm, algorithm: fixed_window, limit: 100, window: 1m, descriptor: {domain: d, entries: [{key: tenant}]}, cost_from: hits_addend}]\n")
	call := func(hits uint64) (bool, int64) {
		t.Helper()
		_, st, err := e.CheckDescriptors(context.Background(), DescriptorRequest{Domain: "d",
			Descriptors: []Descriptor{{Entries: []DescriptorEntry{{Key: "tenant", Value: "a"}}, Hits: hits}}})
		if err != nil {
			t.Fatal(err)
		}
		return st[0].Allowed, st[0].Remaining
	}
	for i := range 2 {
		if ok, _ := call(0); !ok {
			t.Fatalf("request %d: refused with tokens left", i)
		}
		if ok, _ := call(60); !ok {
			t.Fatalf("request %d: the stream's end was refused", i)
		}
	}
	if ok, rem := call(0); ok || rem != 0 {
		t.Errorf("after 120 of 100: allowed %v, remaining %d; want refused with 0", ok, rem)
	}
	clock.Advance(time.Minute)
	if ok, rem := call(0); !ok || rem != 100 {
		t.Errorf("the next minute: allowed %v, remaining %d; want allowed with 100", ok, rem)
	}
}

// BenchmarkResponseCostJSON is the time to read a JSON cost from a body of
// the given size (the usage object at its end, as an OpenAI answer has
// it): the body's bytes are kept as they stream, then validated and
// searched once when the request ends. At MaxCostBody this is the bound.
func BenchmarkResponseCostJSON(b *testing.B) {
	e, _ := fakeClockEngine(b, "rules: [{rule_id: tokens, identifier_type: global, algorithm: token_bucket, limit: 1000000000, window: 1h, cost_from: {json: usage.total_tokens}}]\n")
	for _, size := range []int{1 << 10, 64 << 10, MaxCostBody - 64} {
		pad := strings.Repeat("x", size-len(`{"text":"","usage":{"total_tokens":42}}`))
		body := []byte(`{"text":"` + pad + `","usage":{"total_tokens":42}}`)
		b.Run(strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				v, err := e.Decide(context.Background(), get())
				if err != nil || !v.Allowed {
					b.Fatal(v, err)
				}
				c := v.Cost()
				c.SetContentType("application/json")
				for off := 0; off < len(body); off += 32 << 10 {
					_, _ = c.Write(body[off:min(off+32<<10, len(body))])
				}
				v.Done(sluice.Success)
			}
		})
	}
}

// A body nested deeper than maxCostDepth is refused as invalid before it
// is parsed (the parse's time grows with the depth): the default is
// charged, at once.
func TestCostDeepJSONIsRefused(t *testing.T) {
	e, _ := fakeClockEngine(t, "rules: [{rule_id: tokens, identifier_type: global, algorithm: token_bucket, limit: 100000, window: 1h, cost_from: {json: usage.total_tokens}, cost_default: 9}]\n")
	deep := `{"usage":{"total_tokens":5},"x":` + strings.Repeat("[", 200_000) + strings.Repeat("]", 200_000) + "}"
	before := left(t, e)
	served(t, e, func(c *ResponseCost) { c.SetContentType("application/json"); _, _ = c.Write([]byte(deep)) })
	if got := before - left(t, e); got != 9 {
		t.Errorf("charged %d, want the default 9", got)
	}
	ok := `{"a":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"[[[","usage":{"total_tokens":5}}`
	before = left(t, e)
	served(t, e, func(c *ResponseCost) { c.SetContentType("application/json"); _, _ = c.Write([]byte(ok)) })
	if got := before - left(t, e); got != 5 {
		t.Errorf("brackets inside a string: charged %d, want 5", got)
	}
}

// failingCharges is a memory store whose charges fail, as Redis's do
// while it is down.
type failingCharges struct{ *static.Memory }

func (failingCharges) Charge(context.Context, []static.Limit, time.Time) error {
	return errors.New("connection refused")
}

// A store that cannot record charges (Redis down) fails every request's:
// each is counted, and logged once per chargeLogEvery with the count, not
// once per request.
func TestChargeFailuresLoggedOnce(t *testing.T) {
	cfg, err := config.Parse("test.yaml", []byte("adaptive: {algorithm: off}\nrules: [{rule_id: tokens, identifier_type: global, algorithm: fixed_window, limit: 100000, window: 1h, cost_from: {header: X-Tokens-Used}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	clock := sluice.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var logs bytes.Buffer
	mem := static.NewMemory(static.MemoryOptions{Clock: clock})
	e, err := New(cfg, Options{Clock: clock, Store: failingCharges{mem}, Memory: mem, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for range 100 {
		served(t, e, header("5"))
	}
	if n := strings.Count(logs.String(), "charging costs"); n != 1 {
		t.Errorf("%d log lines for 100 failed charges, want 1:\n%s", n, logs.String())
	}
	clock.Advance(chargeLogEvery)
	served(t, e, header("5"))
	if !strings.Contains(logs.String(), "failures=100") {
		t.Errorf("the second line does not count the failures since the first:\n%s", logs.String())
	}
}
