package replay_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/replay"
	"github.com/sluicehq/sluice/replay/logfmt"
	"github.com/sluicehq/sluice/replay/logfmt/logfmttest"
)

func parse(t testing.TB, yaml string) *config.Config {
	t.Helper()
	c, err := config.Parse("rules.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// A fixed window per client address, replayed: each client's requests
// past 10 in a minute are limited, exactly as counting them says, in every
// format; unknown lines are counted with their numbers and skipped.
func TestReplayFixedWindow(t *testing.T) {
	entries := logfmttest.Traffic(7, 3000, start, 40, 30)
	want := map[string]int64{} // ip -> limited
	counts := map[string]int64{}
	var total int64
	for _, e := range entries {
		k := fmt.Sprintf("%s@%d", e.ClientIP, e.Time.Unix()/60)
		counts[k]++
		if counts[k] > 10 {
			want[e.ClientIP.String()]++
			total++
		}
	}
	cfg := parse(t, "rules: [{rule_id: per_ip, identifier_type: ip_address, algorithm: fixed_window, limit: 10, window: 1m}]\n")
	for _, format := range logfmttest.Formats {
		t.Run(format, func(t *testing.T) {
			log, bad := logfmttest.Log(format, entries, 500)
			res, err := replay.Run(context.Background(), []*config.Config{cfg}, []replay.Source{{Name: "access.log", R: strings.NewReader(log)}}, replay.Options{TopKeys: 1000})
			if err != nil {
				t.Fatal(err)
			}
			r := res[0]
			if r.Requests != int64(len(entries)) || r.Unknown != int64(len(bad)) || r.Samples[0].Line != bad[0] {
				t.Fatalf("requests %d, unknown %d (first at %d); want %d, %d (first at %d)", r.Requests, r.Unknown, r.Samples[0].Line, len(entries), len(bad), bad[0])
			}
			rule := r.Rules[0]
			if rule.Limited != total || rule.Matched != int64(len(entries)) {
				t.Errorf("limited %d of %d, want %d of %d", rule.Limited, rule.Matched, total, len(entries))
			}
			for _, k := range rule.Top {
				if ip := strings.TrimPrefix(k.Key, "ip:"); k.Limited != want[ip] {
					t.Errorf("key %s: limited %d, want %d", k.Key, k.Limited, want[ip])
				}
			}
			if rule.LimitedKeys != len(want) {
				t.Errorf("%d keys limited, want %d", rule.LimitedKeys, len(want))
			}
		})
	}
}

// Two configurations in one pass: the second, twice as wide, limits fewer;
// a shadow rule counts what it would have refused and refuses nothing.
func TestReplayCompareAndShadow(t *testing.T) {
	entries := logfmttest.Traffic(8, 2000, start, 40, 20)
	log, _ := logfmttest.Log("nginx", entries, 0)
	narrow := parse(t, "rules: [{rule_id: per_user, identifier_type: user_id, algorithm: sliding_window, limit: 10, window: 1m}]\n")
	wide := parse(t, "rules: [{rule_id: per_user, identifier_type: user_id, algorithm: sliding_window, limit: 20, window: 1m}]\n")
	shadow := parse(t, "rules: [{rule_id: per_user, identifier_type: user_id, algorithm: sliding_window, limit: 10, window: 1m, mode: shadow}]\n")
	res, err := replay.Run(context.Background(), []*config.Config{narrow, wide, shadow}, []replay.Source{{Name: "-", R: strings.NewReader(log)}}, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n, w, s := res[0].Rules[0], res[1].Rules[0], res[2].Rules[0]
	if n.Limited == 0 || w.Limited >= n.Limited {
		t.Errorf("limited: narrow %d, wide %d; want the wide to limit fewer, the narrow some", n.Limited, w.Limited)
	}
	if s.Limited != 0 || s.WouldDeny != n.Limited {
		t.Errorf("shadow: limited %d, would deny %d; want 0 and the narrow rule's %d", s.Limited, s.WouldDeny, n.Limited)
	}
	if n.Suggested <= 0 || n.SuggestedForRequests <= 0 {
		t.Errorf("no suggestion: %+v", n)
	}
}

// A suggested limit, replayed, spares the share of keys it was made for.
func TestSuggestionSparesItsShare(t *testing.T) {
	entries := logfmttest.Traffic(9, 5000, start, 50, 200)
	log, _ := logfmttest.Log("sluice", entries, 0)
	run := func(limit int64) replay.RuleResult {
		cfg := parse(t, fmt.Sprintf("rules: [{rule_id: per_key, identifier_type: api_key, algorithm: fixed_window, limit: %d, window: 1m}]\n", limit))
		res, err := replay.Run(context.Background(), []*config.Config{cfg}, []replay.Source{{Name: "-", R: strings.NewReader(log)}}, replay.Options{SuggestKeys: 0.9})
		if err != nil {
			t.Fatal(err)
		}
		return res[0].Rules[0]
	}
	first := run(5)
	if first.LimitedKeys == 0 {
		t.Fatal("nothing limited at 5 a minute: the test needs some")
	}
	again := run(first.Suggested)
	if share := float64(again.LimitedKeys) / float64(again.Keys); share > 0.1 {
		t.Errorf("the suggested limit %d limits %d of %d keys (%.0f%%), want at most 10%%", first.Suggested, again.LimitedKeys, again.Keys, 100*share)
	}
	if again.Suggested != first.Suggested {
		t.Errorf("the suggestion moved: %d then %d", first.Suggested, again.Suggested)
	}
}

// max_wait: a request over a rule's quota that would get it back within
// max_wait is served late, not limited.
func TestReplayMaxWait(t *testing.T) {
	var entries []logfmt.Entry
	e := logfmttest.Traffic(10, 1, start, 1, 1)[0]
	for i := range 6 {
		e.Time = start.Add(time.Duration(i) * 10 * time.Millisecond)
		entries = append(entries, e)
	}
	log, _ := logfmttest.Log("sluice", entries, 0)
	cfg := parse(t, "rules: [{rule_id: paced, identifier_type: global, algorithm: token_bucket, limit: 10, window: 1s, burst: 2, max_wait: 250ms}]\n")
	var dec strings.Builder
	res, err := replay.Run(context.Background(), []*config.Config{cfg}, []replay.Source{{Name: "x", R: strings.NewReader(log)}}, replay.Options{Decisions: &dec})
	if err != nil {
		t.Fatal(err)
	}
	// 2 at once, then a token every 100 ms, reserved in order: the 3rd
	// and 4th wait 80 and 170 ms; the 5th (at 40 ms) would wait 260 ms,
	// past max_wait: limited; the 6th (at 50 ms) takes that token, 250 ms.
	if r := res[0].Rules[0]; r.Limited != 1 || res[0].Delayed != 3 {
		t.Errorf("limited %d, delayed %d; want 1, 3; decisions:\n%s", r.Limited, res[0].Delayed, dec.String())
	}
	if !strings.Contains(dec.String(), "x:5 429 paced") || strings.Count(dec.String(), " 200 ") != 5 {
		t.Errorf("want the 5th limited, the others served:\n%s", dec.String())
	}
}

// max_wait on a rule that does not reserve: a refused request waits in
// its key's line and is decided again when its quota comes back.
func TestReplayMaxWaitLine(t *testing.T) {
	var entries []logfmt.Entry
	e := logfmttest.Traffic(11, 1, start, 1, 1)[0]
	for i := range 7 {
		e.Time = start.Add(time.Duration(i) * time.Millisecond)
		entries = append(entries, e)
	}
	log, _ := logfmttest.Log("sluice", entries, 0)
	cfg := parse(t, "rules: [{rule_id: w, identifier_type: global, algorithm: fixed_window, limit: 2, window: 1s, max_wait: 2s}]\n")
	res, err := replay.Run(context.Background(), []*config.Config{cfg}, []replay.Source{{Name: "x", R: strings.NewReader(log)}}, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// 2 now, 2 at 1 s, 2 at 2 s (within their 2 s), the 7th past it.
	if r := res[0]; r.Rules[0].Limited != 1 || r.Delayed != 4 {
		t.Errorf("limited %d, delayed %d; want 1, 4", r.Rules[0].Limited, r.Delayed)
	}
}

// With a service model, the adaptive limit and its queue are replayed: a
// service of 5 slots x 100 ms (50 a second) offered 200 a second serves
// about its capacity and sheds the rest.
func TestReplayServiceModel(t *testing.T) {
	var entries []logfmt.Entry
	e := logfmttest.Traffic(12, 1, start, 1, 1)[0]
	e.Upstream = 100 * time.Millisecond
	for i := range 4000 { // 20 s at 200/s
		e.Time = start.Add(time.Duration(i) * 5 * time.Millisecond)
		e.Path = []string{"/api/orders", "/batch/export"}[i%2]
		entries = append(entries, e)
	}
	log, _ := logfmttest.Log("sluice", entries, 0)
	cfg := parse(t, "adaptive: {classes: [{name: api, share: 0.7, match: {path_pattern: /api/**}}, {name: batch, share: 0.3}], default_class: batch}\nrules: [{rule_id: wide, identifier_type: global, algorithm: fixed_window, limit: 1000000, window: 1h}]\n")
	res, err := replay.Run(context.Background(), []*config.Config{cfg}, []replay.Source{{Name: "x", R: strings.NewReader(log)}}, replay.Options{Slots: 5})
	if err != nil {
		t.Fatal(err)
	}
	m := res[0].Model
	if m == nil {
		t.Fatal("no service model result")
	}
	if m.Admitted+m.Shed != 4000 || m.Shed < 2000 || m.Admitted > 1300 || m.Admitted < 500 {
		t.Errorf("admitted %d, shed %d of 4000; want about the capacity (1,000) admitted, the rest shed", m.Admitted, m.Shed)
	}
	byClass := map[string]replay.ClassResult{}
	for _, c := range m.Classes {
		byClass[c.Class] = c
	}
	api, batch := byClass["api"], byClass["batch"]
	if len(byClass) != 2 || api.Admitted+api.Shed != 2000 || batch.Admitted+batch.Shed != 2000 || api.Admitted <= batch.Admitted {
		t.Errorf("by class %+v: want api and batch, 2,000 each, api (the larger share) served more", m.Classes)
	}
}

// Rotated logs given newest first, as a shell's glob lists them, are
// replayed oldest first: the answer is the one log's.
func TestReplayRotatedLogsInTimeOrder(t *testing.T) {
	entries := logfmttest.Traffic(13, 3000, start, 40, 30)
	cfg := parse(t, "rules: [{rule_id: per_ip, identifier_type: ip_address, algorithm: token_bucket, limit: 10, window: 1m, burst: 5}]\n")
	whole, _ := logfmttest.Log("envoy", entries, 0)
	older, _ := logfmttest.Log("envoy", entries[:1500], 0)
	newer, _ := logfmttest.Log("envoy", entries[1500:], 0)
	one, err := replay.Run(context.Background(), []*config.Config{cfg}, []replay.Source{{Name: "access.log", R: strings.NewReader(whole)}}, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	two, err := replay.Run(context.Background(), []*config.Config{cfg}, []replay.Source{
		{Name: "access.log", R: strings.NewReader(newer)}, {Name: "access.log.1", R: strings.NewReader(older)}}, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := one[0].Rules[0], two[0].Rules[0]; a.Limited == 0 || a.Limited != b.Limited || a.LimitedKeys != b.LimitedKeys {
		t.Errorf("one log: %d limited (%d keys); rotated, newest first: %d (%d keys)", a.Limited, a.LimitedKeys, b.Limited, b.LimitedKeys)
	}
}

// The slots of the service model read from a log: a request every 10 ms,
// each 50 ms in the upstream, keeps 5 in it at once.
func TestEstimateSlots(t *testing.T) {
	var entries []logfmt.Entry
	e := logfmttest.Traffic(14, 1, start, 1, 1)[0]
	e.Upstream = 50 * time.Millisecond
	for i := range 3000 {
		e.Time = start.Add(time.Duration(i) * 10 * time.Millisecond)
		entries = append(entries, e)
	}
	log, _ := logfmttest.Log("envoy", entries, 0)
	n, err := replay.EstimateSlots([]replay.Source{{Name: "x", R: strings.NewReader(log)}}, replay.Options{})
	if err != nil || n != 5 {
		t.Errorf("estimated %d slots (%v), want 5", n, err)
	}
}

// A line longer than 64 KiB is an unknown line, skipped whole; the lines
// after it are read as before.
func TestReplayLongLine(t *testing.T) {
	entries := logfmttest.Traffic(15, 10, start, 10, 3)
	log, _ := logfmttest.Log("nginx", entries, 0)
	long := `198.51.0.1 - - [01/Mar/2026:12:00:00 +0000] "GET /` + strings.Repeat("a", 100_000) + ` HTTP/1.1" 200 1 "-" "-"` + "\n"
	res, err := replay.Run(context.Background(), []*config.Config{parse(t, "rules: []\n")},
		[]replay.Source{{Name: "x", R: strings.NewReader(long + log + long)}}, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := res[0]
	if r.Requests != 10 || r.Unknown != 2 || r.Samples[0].Line != 1 || r.Samples[1].Line != 12 || !strings.Contains(r.Samples[0].Error, "64 KiB") {
		t.Errorf("requests %d, unknown %d %+v; want 10 and the two long lines (1, 12)", r.Requests, r.Unknown, r.Samples)
	}
}

// The service model's queue holds at most queue.max_size, as the live
// one: a burst past it is shed at once, not held until it times out.
func TestReplayQueueBounded(t *testing.T) {
	var entries []logfmt.Entry
	e := logfmttest.Traffic(16, 1, start, 1, 1)[0]
	e.Upstream = time.Second
	for range 100 {
		entries = append(entries, e) // all at once
	}
	log, _ := logfmttest.Log("sluice", entries, 0)
	cfg := parse(t, "adaptive: {algorithm: fixed, initial_limit: 1, min_limit: 1, max_limit: 1}\nqueue: {max_size: 10, max_wait: 100ms}\nrules: []\n")
	res, err := replay.Run(context.Background(), []*config.Config{cfg}, []replay.Source{{Name: "x", R: strings.NewReader(log)}}, replay.Options{Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	if m := res[0].Model; m.Admitted != 1 || m.Shed != 99 || m.QueueTimeouts != 10 || m.Queued != 10 {
		t.Errorf("%+v: want 1 admitted, 10 queued (timing out), 89 shed at once", m)
	}
}

// A rule's top keys are the same in every replay of one log: keys with
// as many requests as the last of the top are ranked by name, not by the
// order a map happens to give them in.
func TestReplayTopKeysTieByName(t *testing.T) {
	var entries []logfmt.Entry
	for i := range 60 {
		entries = append(entries, logfmt.Entry{Time: start.Add(time.Duration(i) * time.Second), Method: "GET", Path: "/",
			ClientIP: netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + i)}), Status: 200})
	}
	log, _ := logfmttest.Log("nginx", entries, 0)
	cfg := parse(t, "rules: [{rule_id: per_ip, identifier_type: ip_address, algorithm: fixed_window, limit: 10, window: 1m}]\n")
	for range 5 {
		res, err := replay.Run(context.Background(), []*config.Config{cfg}, []replay.Source{{Name: "access.log", R: strings.NewReader(log)}}, replay.Options{TopKeys: 3})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, k := range res[0].Rules[0].Top {
			got = append(got, k.Key)
		}
		if want := []string{"ip:10.0.0.1", "ip:10.0.0.10", "ip:10.0.0.11"}; !slices.Equal(got, want) {
			t.Fatalf("top keys %q, want %q (ties by name)", got, want)
		}
	}
}

// The summary of a log in which no line read as a request names no time
// span (there is none: it printed year 1 before) and says what to check;
// a log of requests states its span.
func TestSummaryOfALogWithoutRequests(t *testing.T) {
	cfg := parse(t, "rules: [{rule_id: per_ip, identifier_type: ip_address, algorithm: fixed_window, limit: 10, window: 1m}]\n")
	summary := func(log string) string {
		res, err := replay.Run(context.Background(), []*config.Config{cfg}, []replay.Source{{Name: "access.log", R: strings.NewReader(log)}}, replay.Options{Format: logfmt.Combined})
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		replay.Summary(&b, res)
		return b.String()
	}
	got := summary("not a log line\nnor this one\n")
	if strings.Contains(got, "0001-01-01") || !strings.Contains(got, "0 requests (nginx)") || !strings.Contains(got, "no line was read as a request") {
		t.Errorf("summary of unknown lines:\n%s", got)
	}
	log, _ := logfmttest.Log("nginx", logfmttest.Traffic(7, 20, start, 10, 3), 0)
	got = summary(log)
	if !strings.Contains(got, "requests from 2026-03-01T12:00:00Z to ") || strings.Contains(got, "no line was read") {
		t.Errorf("summary of requests:\n%s", got)
	}
}
