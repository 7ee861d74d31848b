package admin

import (
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// HistoryLength is how far back /v1/history (and so /ui, when opened)
// reaches; HistoryEvery is how often it takes a point.
const (
	HistoryLength = 5 * time.Minute
	HistoryEvery  = time.Second
)

// historyPoint is what /ui charts of one /v1/state, under the same JSON
// names, so that the page records a point of history as it records a poll.
type historyPoint struct {
	Time     time.Time        `json:"time"`
	Adaptive *historyAdaptive `json:"adaptive,omitempty"`
	Queue    *historyQueue    `json:"queue,omitempty"`
	Rules    []historyRule    `json:"rules"`
	Store    historyStore     `json:"store"`
}

type historyAdaptive struct {
	Limit    int            `json:"limit"`
	InFlight int            `json:"inflight"`
	Classes  []historyClass `json:"classes,omitempty"`
}

type historyClass struct {
	Name     string `json:"name"`
	Admitted uint64 `json:"admitted"`
	Shed     uint64 `json:"shed"`
}

type historyQueue struct {
	Length int `json:"length"`
}

type historyRule struct {
	RuleID  string `json:"rule_id"`
	Allowed uint64 `json:"allowed"`
	Denied  uint64 `json:"denied"`
}

type historyStore struct {
	Status  string `json:"status"`
	Healthy bool   `json:"healthy"`
}

// history keeps the last HistoryLength of the engine's state, a point every
// HistoryEvery, in a ring: the admin page shows the last five minutes when
// it opens, not only from then on. Its memory is bounded by the ring's
// length times the rules and classes in a point.
type history struct {
	e *engine.Engine

	mu     sync.Mutex
	points []historyPoint // a ring of cap HistoryLength/HistoryEvery
	next   int            // where the next point goes once the ring is full
}

func newHistory(e *engine.Engine) *history {
	return &history{e: e, points: make([]historyPoint, 0, int(HistoryLength/HistoryEvery))}
}

// record takes a point of the engine's state now.
func (h *history) record() {
	st := h.e.State()
	p := historyPoint{Time: st.Time, Store: historyStore{Status: st.Store.Status, Healthy: st.Store.Healthy},
		Rules: make([]historyRule, 0, len(st.Rules))}
	if a := st.Adaptive; a != nil {
		p.Adaptive = &historyAdaptive{Limit: a.Limit, InFlight: a.InFlight}
		for _, c := range a.Classes {
			p.Adaptive.Classes = append(p.Adaptive.Classes, historyClass{Name: c.Name, Admitted: c.Admitted, Shed: c.Shed})
		}
	}
	if q := st.Queue; q != nil {
		p.Queue = &historyQueue{Length: q.Length}
	}
	for _, r := range st.Rules {
		p.Rules = append(p.Rules, historyRule{RuleID: r.RuleID, Allowed: r.Allowed, Denied: r.Denied})
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.points) < cap(h.points) {
		h.points = append(h.points, p)
		return
	}
	h.points[h.next] = p
	h.next = (h.next + 1) % len(h.points)
}

// snapshot returns the points, oldest first.
func (h *history) snapshot() []historyPoint {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]historyPoint, 0, len(h.points))
	out = append(out, h.points[h.next:]...)
	return append(out, h.points[:h.next]...)
}

// run records a point every HistoryEvery until stop closes.
func (h *history) run(stop <-chan struct{}) {
	t := time.NewTicker(HistoryEvery)
	defer t.Stop()
	h.record()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			h.record()
		}
	}
}

// serve answers GET /v1/history: {"points": [...]}, oldest first.
func (h *history) serve(w http.ResponseWriter, _ *http.Request) {
	var points []historyPoint
	if h != nil {
		points = h.snapshot()
	}
	if points == nil {
		points = []historyPoint{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"points": points})
}
