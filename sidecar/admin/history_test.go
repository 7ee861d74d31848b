package admin

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
)

// The history keeps the last HistoryLength/HistoryEvery points, oldest
// first, in bounded memory, and serves them under /v1/state's names.
func TestHistoryKeepsTheLastPoints(t *testing.T) {
	cfg, err := config.Parse("t.yaml", []byte("rules:\n  - {rule_id: g, identifier_type: global, algorithm: fixed_window, limit: 5, window: 1h}\n"))
	if err != nil {
		t.Fatal(err)
	}
	clock := sluice.NewFakeClock(time.Unix(1_700_000_000, 0))
	e, err := engine.New(cfg, engine.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	h := newHistory(e)
	n := int(HistoryLength / HistoryEvery)
	for range n + 7 {
		clock.Advance(HistoryEvery)
		h.record()
	}
	pts := h.snapshot()
	if len(pts) != n {
		t.Fatalf("%d points, want %d", len(pts), n)
	}
	for i := 1; i < len(pts); i++ {
		if !pts[i].Time.After(pts[i-1].Time) {
			t.Fatalf("point %d at %v not after %v: not oldest first", i, pts[i].Time, pts[i-1].Time)
		}
	}
	if got, want := pts[len(pts)-1].Time, clock.Now(); !got.Equal(want) {
		t.Errorf("newest point %v, want %v", got, want)
	}
	w := httptest.NewRecorder()
	h.serve(w, httptest.NewRequest("GET", "/v1/history", nil))
	var body struct {
		Points []struct {
			Rules []struct {
				RuleID string `json:"rule_id"`
			} `json:"rules"`
		} `json:"points"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || len(body.Points) != n || body.Points[0].Rules[0].RuleID != "g" {
		t.Errorf("GET /v1/history: %v, %d points, %s", err, len(body.Points), w.Body.String()[:200])
	}
}
