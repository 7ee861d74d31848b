package replay

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/config"
)

// Result is what one configuration would have done to the logs' traffic.
type Result struct {
	// Config is the configuration's file.
	Config string `json:"config"`
	// Format is the logs' format as read.
	Format string `json:"format"`
	// Lines were read; Requests of them were requests; Unknown were not
	// (Samples shows the first, with their line numbers).
	Lines    int64         `json:"lines"`
	Requests int64         `json:"requests"`
	Unknown  int64         `json:"unknown_lines"`
	Samples  []UnknownLine `json:"unknown_samples,omitempty"`
	// From and To span the requests' times.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Elapsed is the replay's own time; LinesPerSecond its pace.
	Elapsed        time.Duration `json:"elapsed_ns"`
	LinesPerSecond float64       `json:"lines_per_second"`
	// Limited counts the requests a rule refused (429); Delayed those
	// served after waiting (a rule's max_wait, a leaky bucket's pacing,
	// the adaptive queue).
	Limited int64 `json:"limited"`
	Delayed int64 `json:"served_after_waiting"`
	// Rules are in the configuration's order.
	Rules []RuleResult `json:"rules"`
	// Minutes are the requests and refusals of each minute of the log.
	Minutes []MinuteResult `json:"minutes"`
	// Model is what the adaptive limit and its queue did, with a service
	// model (nil without).
	Model *ModelResult `json:"service_model,omitempty"`
}

// UnknownLine is a line that was not a request.
type UnknownLine struct {
	Source string `json:"source"`
	Line   int    `json:"line"`
	Error  string `json:"error"`
	Text   string `json:"text"`
}

// RuleResult is one rule's part.
type RuleResult struct {
	RuleID    string `json:"rule_id"`
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	Window    string `json:"window,omitempty"`
	Mode      string `json:"mode"`
	// Matched counts the requests the rule applied to; Limited those it
	// refused (429); WouldDeny those a shadow (or elastic) rule would have
	// refused.
	Matched   int64 `json:"matched"`
	Limited   int64 `json:"limited"`
	WouldDeny int64 `json:"would_deny"`
	// Keys counts the keys it saw; LimitedKeys those it refused at least
	// once.
	Keys        int `json:"keys"`
	LimitedKeys int `json:"limited_keys"`
	// Top are the keys it refused most (then the busiest).
	Top []KeyResult `json:"top_keys"`
	// Closeness counts keys by the most of the limit they used at once:
	// [i] for 10i% to 10(i+1)%, [10] for keys refused at least once.
	Closeness [11]int `json:"closeness"`
	// Suggested is the limit that would have refused none of
	// SuggestedShare of the keys (the busiest window of each key), and
	// SuggestedForRequests the one that would have refused at most
	// 0.1% of the requests; 0 when not computed (concurrency).
	Suggested            int64   `json:"suggested_limit,omitempty"`
	SuggestedShare       float64 `json:"suggested_share,omitempty"`
	SuggestedForRequests int64   `json:"suggested_limit_requests,omitempty"`
}

// KeyResult is one key under one rule.
type KeyResult struct {
	Key      string `json:"key"`
	Requests int64  `json:"requests"`
	Limited  int64  `json:"limited"`
	// Share is the part of the key's requests the rule refused.
	Share float64 `json:"share"`
}

// MinuteResult is one minute of the log.
type MinuteResult struct {
	Start    time.Time        `json:"start"`
	Requests int64            `json:"requests"`
	Limited  map[string]int64 `json:"limited,omitempty"` // by rule
	Shed     int64            `json:"shed,omitempty"`
}

// ModelResult is what the adaptive limit and its queue did in front of
// the service model.
type ModelResult struct {
	Slots         int   `json:"slots"`
	Admitted      int64 `json:"admitted"`
	Queued        int64 `json:"queued"`
	Shed          int64 `json:"shed"`
	QueueTimeouts int64 `json:"queue_timeouts"`
	// Classes are by priority class ("" without classes).
	Classes []ClassResult `json:"classes,omitempty"`
}

// ClassResult is one priority class's part.
type ClassResult struct {
	Class    string `json:"class"`
	Admitted int64  `json:"admitted"`
	Shed     int64  `json:"shed"`
}

// ruleStats are one rule's counts as the replay goes.
type ruleStats struct {
	id, algorithm, mode string
	index               int
	limit               int64
	window              time.Duration
	maxWait             time.Duration
	matched, limited    int64
	wouldDeny           int64
	keys                []*keyStat // in the order first seen
	// windows counts (key, window) pairs by their requests, for the
	// suggested limit by requests.
	windows map[int64]int64
}

// keyStat is one key's counts under one rule: memory per key, never per
// request.
type keyStat struct {
	id                           *identity // whose, for its name
	requests, limited, wouldDeny int64
	peak                         int64 // the most of the limit used at once
	win                          int64 // the current window's index
	winStart, winEnd             int64 // its span (Unix ns), to count without dividing
	inWin                        int64 // its requests
	busiest                      int64 // the most requests in one window
}

func newRuleStats(cr *config.Rule) *ruleStats {
	rs := &ruleStats{id: cr.RuleID, algorithm: string(cr.Algorithm), mode: string(cr.Mode),
		windows: map[int64]int64{}, maxWait: cr.MaxWait.D()}
	if cr.Limit != nil {
		rs.limit = *cr.Limit
	}
	if p, err := cr.Policy(); err == nil {
		rs.window = p.Window
	}
	return rs
}

// identity is one identity's key stats, "{<prefix><value>}" as the
// engine keys it: every rule that keys this identity finds its stats here,
// so that a line looks each of its identities up once, not once a rule.
type identity struct {
	name string
	keys []ruleKey // the rules that matched it, in the order first seen
}

// ruleKey is one rule's stats of an identity.
type ruleKey struct {
	rule int // ruleStats.index
	ks   *keyStat
}

// key returns rs's stats of id, new on rs's first request from id.
func (id *identity) key(rs *ruleStats) *keyStat {
	for _, k := range id.keys {
		if k.rule == rs.index {
			return k.ks
		}
	}
	ks := &keyStat{id: id, win: -1}
	id.keys = append(id.keys, ruleKey{rule: rs.index, ks: ks})
	rs.keys = append(rs.keys, ks)
	return ks
}

// identityOf is the identity part of the engine's key of rule id,
// "{<identifier>}:<rule id>": the key less ":<rule id>" (the whole key
// should it ever not end so).
func identityOf(key, id string) string {
	if cut := len(key) - len(id) - 1; cut > 0 && key[cut] == ':' && key[cut+1:] == id {
		return key[:cut]
	}
	return key
}

// count counts a request at now (Unix ns) in the key's aligned window.
// The window's index is divided out only when now leaves its span, not
// once a rule and line.
func (ks *keyStat) count(now int64, w time.Duration, rs *ruleStats) {
	if w <= 0 {
		return
	}
	if now < ks.winStart || now >= ks.winEnd {
		win := now / int64(w)
		if win != ks.win {
			ks.close(rs)
			ks.win, ks.inWin = win, 0
		}
		// (Before 1970 the index truncates towards zero and the span may
		// not hold now: then it is computed every time, as before.)
		ks.winStart = win * int64(w)
		ks.winEnd = ks.winStart + int64(w)
	}
	ks.inWin++
}

// close ends the key's current window.
func (ks *keyStat) close(rs *ruleStats) {
	if ks.inWin > 0 {
		rs.windows[ks.inWin]++
		ks.busiest = max(ks.busiest, ks.inWin)
		ks.inWin = 0
	}
}

// flush ends every key's window, at the end of the replay.
func (rs *ruleStats) flush() {
	for _, ks := range rs.keys {
		ks.close(rs)
	}
}

// minute is one minute's counts.
type minute struct {
	requests, shed int64
	limited        []int64 // by rule index
}

func (m *minute) limit(i int) {
	if i >= len(m.limited) {
		m.limited = append(m.limited, make([]int64, i+1-len(m.limited))...)
	}
	m.limited[i]++
}

// minute returns the current minute's counts: the last one's while now
// is in its span, without dividing.
func (r *run) minute() *minute {
	if now := r.clock.UnixNano(); r.cur != nil && now >= r.curStart && now < r.curEnd {
		return r.cur
	}
	i := int64(r.now.Sub(r.base) / time.Minute)
	m := r.minutes[i]
	if m == nil {
		m = &minute{}
		r.minutes[i] = m
	}
	r.cur = m
	r.curStart = r.base.Add(time.Duration(i) * time.Minute).UnixNano()
	r.curEnd = r.curStart + int64(time.Minute)
	return m
}

// result builds the run's Result.
func (r *run) result(st readStats, elapsed time.Duration, o Options) *Result {
	res := &Result{Config: r.cfg.File, Format: st.format.String(), Lines: st.lines, Requests: st.requests, Unknown: st.unknown,
		Samples: st.samples, From: st.first, To: st.last, Elapsed: elapsed, Delayed: r.delayed}
	if elapsed > 0 {
		res.LinesPerSecond = float64(st.lines) / elapsed.Seconds()
	}
	for _, rs := range r.rules {
		rr := RuleResult{RuleID: rs.id, Algorithm: rs.algorithm, Limit: rs.limit, Mode: rs.mode, Matched: rs.matched,
			Limited: rs.limited, WouldDeny: rs.wouldDeny, Keys: len(rs.keys)}
		if rs.window > 0 {
			rr.Window = rs.window.String()
		}
		res.Limited += rs.limited
		var peaks []int64
		for _, ks := range rs.keys {
			if ks.limited > 0 {
				rr.LimitedKeys++
				rr.Closeness[10]++
			} else if rs.limit > 0 {
				rr.Closeness[min(9, int(ks.peak*10/rs.limit))]++
			}
			kr := KeyResult{Key: displayKey(ks.id.name + ":" + rs.id), Requests: ks.requests, Limited: ks.limited,
				Share: float64(ks.limited) / float64(max(ks.requests, 1))}
			if len(rr.Top) < o.TopKeys || compareKeys(kr, rr.Top[len(rr.Top)-1]) < 0 {
				// In the top, whatever order the keys come in: ties go to
				// the first key by name, so that a replay's report is the
				// same every time.
				rr.Top = append(rr.Top, kr)
				sortKeys(rr.Top)
				rr.Top = rr.Top[:min(len(rr.Top), o.TopKeys)]
			}
			peaks = append(peaks, ks.busiest)
		}
		if rs.window > 0 && rs.algorithm != "concurrency" && len(peaks) > 0 {
			rr.Suggested, rr.SuggestedShare = suggestForKeys(peaks, o.SuggestKeys), o.SuggestKeys
			rr.SuggestedForRequests = suggestForRequests(rs.windows, rs.matched, 0.001)
		}
		res.Rules = append(res.Rules, rr)
	}
	idx := make([]int64, 0, len(r.minutes))
	for i := range r.minutes {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	for _, i := range idx {
		m := r.minutes[i]
		mr := MinuteResult{Start: r.base.Add(time.Duration(i) * time.Minute), Requests: m.requests, Shed: m.shed}
		for ri, n := range m.limited {
			if n > 0 {
				if mr.Limited == nil {
					mr.Limited = map[string]int64{}
				}
				mr.Limited[r.rules[ri].id] = n
			}
		}
		res.Minutes = append(res.Minutes, mr)
	}
	if r.slots > 0 {
		m := r.model
		m.Slots = r.slots
		for _, c := range r.classes {
			m.Classes = append(m.Classes, *c)
		}
		slices.SortFunc(m.Classes, func(a, b ClassResult) int { return strings.Compare(a.Class, b.Class) })
		res.Model = &m
	}
	return res
}

// sortKeys sorts a rule's top keys: the most limited first, then the
// busiest, then by name.
func sortKeys(ks []KeyResult) { slices.SortFunc(ks, compareKeys) }

// compareKeys orders two top keys as sortKeys does.
func compareKeys(a, b KeyResult) int {
	if c := cmp.Compare(b.Limited, a.Limited); c != 0 {
		return c
	}
	if c := cmp.Compare(b.Requests, a.Requests); c != 0 {
		return c
	}
	return strings.Compare(a.Key, b.Key)
}

// displayKey is a limit's key as people read it: the identifier, without
// the braces and the rule id ("{ip:192.0.2.1}:rule" -> "ip:192.0.2.1").
func displayKey(k string) string {
	if strings.HasPrefix(k, "{") {
		if i := strings.LastIndex(k, "}:"); i > 0 {
			return k[1:i]
		}
	}
	return k
}

// suggestForKeys is the least limit under which share of the keys never
// had more requests in one window.
func suggestForKeys(peaks []int64, share float64) int64 {
	slices.Sort(peaks)
	i := int(float64(len(peaks))*share+0.999999) - 1
	i = max(0, min(i, len(peaks)-1))
	return max(1, peaks[i])
}

// suggestForRequests is the least limit that would have refused at most
// share of the requests: windows counts the (key, window) pairs by their
// requests; a window of c requests under a limit L refuses c-L.
func suggestForRequests(windows map[int64]int64, total int64, share float64) int64 {
	if total == 0 {
		return 0
	}
	counts := make([]int64, 0, len(windows))
	for c := range windows {
		counts = append(counts, c)
	}
	slices.Sort(counts)
	allowed := int64(float64(total) * share)
	// From the largest count down, over(L) = S1 - L*S0 over the counts
	// above L (S0 their windows, S1 their requests) grows as L falls.
	best := counts[len(counts)-1]
	var s0, s1 int64
	for i := len(counts) - 1; i >= 0; i-- {
		l := counts[i]
		if s1-l*s0 > allowed {
			break
		}
		best = l
		s0 += windows[l]
		s1 += l * windows[l]
	}
	return max(1, best)
}
