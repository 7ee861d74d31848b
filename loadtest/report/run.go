package report

import (
	"fmt"

	"github.com/sluicehq/sluice/loadtest"
)

// WriteRun writes a load test's summary.json, report.html and charts
// (throughput.png, latency.png, and sluice.png when the admin port was
// sampled) into dir.
func WriteRun(dir string, s *loadtest.Summary) error {
	if err := WriteJSON(dir, "summary.json", s); err != nil {
		return err
	}
	return Write(dir, RunPage(s))
}

// RunPage lays out a load test's report.
func RunPage(s *loadtest.Summary) Page {
	n := len(s.Seconds)
	t := make([]float64, n)
	offered, good, rejected, errs := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	p50, p90, p99 := make([]float64, 0, n), make([]float64, 0, n), make([]float64, 0, n)
	tl := make([]float64, 0, n)
	for i, x := range s.Seconds {
		t[i] = float64(x.T)
		offered[i] = float64(x.Offered)
		good[i] = float64(x.OK)
		rejected[i] = float64(x.Rejected + x.Shed)
		errs[i] = float64(x.Errors + x.Other)
		if x.OK > 0 {
			tl = append(tl, float64(x.T))
			p50, p90, p99 = append(p50, x.P50), append(p90, x.P90), append(p99, x.P99)
		}
	}
	l := s.OKLatency
	p := Page{
		Title: "sluice loadtest: " + s.Target,
		Facts: [][2]string{
			{"schedule", fmt.Sprintf("%s at %g/s for %gs", s.Profile, s.Rate, s.DurationS)},
			{"requests", fmt.Sprintf("%d (%.1f/s offered)", s.Requests, s.OfferedRPS)},
			{"goodput", fmt.Sprintf("%.1f/s (%d ok)", s.GoodputRPS, s.OK)},
			{"rejected", fmt.Sprintf("429: %d, 503: %d", s.Status["429"], s.Status["503"])},
			{"errors", fmt.Sprintf("%d no response, %.2f%% failed in all", s.Errors, 100*s.ErrorRate())},
			{"latency of ok responses", fmt.Sprintf("p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, p99.9 %.1f ms, max %.1f ms", l.P50, l.P90, l.P99, l.P999, l.Max)},
		},
		Notes: []string{"Requests leave on a fixed schedule whatever the target does; latencies run from the time each request was due, so queueing shows (no coordinated omission)."},
		Charts: []Chart{
			{File: "throughput.png", Title: "Requests per second", XLabel: "seconds", YLabel: "requests/s", Series: []Series{
				{Name: "offered", X: t, Y: offered, Dashed: true},
				{Name: "good (2xx/3xx)", X: t, Y: good},
				{Name: "rejected (429/503)", X: t, Y: rejected},
				{Name: "errors", X: t, Y: errs},
			}},
			{File: "latency.png", Title: "Latency of ok responses, by second due", XLabel: "seconds", YLabel: "ms", Series: []Series{
				{Name: "p50", X: tl, Y: p50},
				{Name: "p90", X: tl, Y: p90},
				{Name: "p99", X: tl, Y: p99},
			}},
		},
	}
	if len(s.Admin) > 0 {
		at, lim, inf, q := make([]float64, len(s.Admin)), make([]float64, len(s.Admin)), make([]float64, len(s.Admin)), make([]float64, len(s.Admin))
		for i, a := range s.Admin {
			at[i], lim[i], inf[i], q[i] = a.T, float64(a.Limit), float64(a.Inflight), float64(a.Queue)
		}
		p.Charts = append(p.Charts, Chart{File: "sluice.png", Title: "sluice: adaptive limit, in flight, queue", XLabel: "seconds", YLabel: "requests", Series: []Series{
			{Name: "adaptive limit", X: at, Y: lim},
			{Name: "in flight", X: at, Y: inf},
			{Name: "queue length", X: at, Y: q},
		}})
	}
	return p
}
