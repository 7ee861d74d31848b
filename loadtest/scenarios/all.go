package scenarios

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/clientlimit"
	"github.com/sluicehq/sluice/loadtest/backend"
	"github.com/sluicehq/sluice/throttle"
)

const sec = time.Second

func constant(x float64) func(time.Duration) float64 { return func(time.Duration) float64 { return x } }

// during is load x in [from, to) and base otherwise.
func during(from, to time.Duration, x, base float64) func(time.Duration) float64 {
	return func(t time.Duration) float64 {
		if t >= from && t < to {
			return x
		}
		return base
	}
}

// overload is a sustained overload of x times capacity.
func overload(x float64) Scenario {
	return Scenario{
		Name: fmt.Sprintf("overload_%gx", x), Goal: "goodput >= 95% of capacity; p99 <= 2x the backend's own p99 at half load",
		Duration: 8 * sec, Model: baseModel(), Load: constant(x),
		Score: func(r *Run) Verdict {
			share, p99 := r.Share(2, 8), r.Summary.OKLatency.P99
			return Verdict{Met: share >= 0.95 && p99 <= 2*r.RefP99,
				Figure: fmt.Sprintf("goodput %.0f%%, p99 %.0f ms (2x reference %.0f ms)", 100*share, p99, 2*r.RefP99)}
		},
	}
}

// belowCapacity is 12 s of a load at 0.7x the capacity of m, a service
// whose latencies spread without a queue (what says how), scored on at
// most 0.5% refused: a spread is no overload.
func belowCapacity(name, what string, m backend.Model) Scenario {
	return Scenario{
		Name: name, Goal: "<= 0.5% refused (" + what + " at 0.7x capacity)",
		Duration: 12 * sec, Model: m, Load: constant(0.7),
		Score: func(r *Run) Verdict {
			share := r.RefusedShare(0, 12)
			return Verdict{Met: share <= 0.005, Figure: fmt.Sprintf("%.2f%% refused", 100*share)}
		},
	}
}

// within5s scores an event at second at: goodput >= 90% of the new
// capacity within 5 s and for the rest of the run.
func within5s(at int) func(r *Run) Verdict {
	return func(r *Run) Verdict {
		rec := r.Recovered(at)
		return Verdict{Met: rec >= 0 && rec <= 5, Figure: fmt.Sprintf("90%% of the new capacity after %s; %.0f%% from 5 s on", secs(rec), 100*r.Share(at+5, len(r.Capacity)))}
	}
}

func secs(n int) string {
	if n < 0 {
		return "never"
	}
	return fmt.Sprintf("%d s", n)
}

// All returns every scenario of the suite.
func All() []Scenario {
	slots := func(n int) func(*backend.Model) { return func(m *backend.Model) { m.Slots = n } }
	service := func(d time.Duration) func(*backend.Model) { return func(m *backend.Model) { m.ServiceTime = d } }
	hung := func(h bool) func(*backend.Model) { return func(m *backend.Model) { m.Hung = h } }
	var creep []Event
	for t := 2 * sec; t <= 14*sec; t += 250 * time.Millisecond {
		d := baseService + time.Duration(float64(2*baseService)*float64(t-2*sec)/float64(12*sec))
		creep = append(creep, Event{At: t, Change: service(d)})
	}
	heavy := baseModel()
	heavy.Sigma = 1
	bimodal := baseModel()
	bimodal.SlowShare, bimodal.SlowFactor = 0.1, 10
	fast := baseModel()
	fast.ServiceTime = 2 * time.Millisecond
	return []Scenario{
		overload(2), overload(5), overload(10),
		{
			Name: "capacity_halves", Goal: ">= 90% of the new capacity within 5 s",
			Duration: 14 * sec, Model: baseModel(), Load: constant(2), Events: []Event{{At: 4 * sec, Change: slots(baseSlots / 2)}},
			Score: within5s(4),
		},
		{
			Name: "capacity_doubles", Goal: ">= 90% of the new capacity within 5 s",
			Duration: 14 * sec, Model: baseModel(), Load: constant(3), Events: []Event{{At: 4 * sec, Change: slots(2 * baseSlots)}},
			Score: within5s(4),
		},
		{
			Name: "service_doubles", Goal: ">= 90% of the new capacity within 5 s and for the rest of the run",
			Duration: 14 * sec, Model: baseModel(), Load: constant(2), Events: []Event{{At: 4 * sec, Change: service(2 * baseService)}},
			Score: within5s(4),
		},
		{
			Name: "service_creeps_3x", Goal: ">= 90% of capacity throughout (service time 3x over 12 s)",
			Duration: 16 * sec, Model: baseModel(), Load: constant(2), Events: creep,
			Score: func(r *Run) Verdict {
				worst := 1.0
				for i := 2; i < len(r.Capacity); i++ {
					worst = min(worst, r.Good(i)/r.Capacity[i])
				}
				share := r.Share(2, len(r.Capacity))
				return Verdict{Met: worst >= 0.9, Figure: fmt.Sprintf("%.0f%% overall, worst second %.0f%%", 100*share, 100*worst)}
			},
		},
		belowCapacity("heavy_tail", "lognormal sigma 1", heavy),
		belowCapacity("bimodal", "a tenth of the requests 10x slower,", bimodal),
		{
			Name: "hang_5s", Goal: "after the first second of the hang, at most min_limit sent into it per client timeout; >= 90% of capacity within 2 s after it",
			Duration: 14 * sec, Model: baseModel(), Load: constant(2),
			Events: []Event{{At: 4 * sec, Change: hung(true)}, {At: 9 * sec, Change: hung(false)}},
			Score: func(r *Run) Verdict {
				var into int64
				for i := 5; i < 9; i++ {
					into += r.Arrived[i]
				}
				rec := r.Recovered(9)
				return Verdict{Met: into <= 2 && rec >= 0 && rec <= 2,
					Figure: fmt.Sprintf("%d sent into the hang after its first second; 90%% after %s", into, secs(rec))}
			},
		},
		{
			// A service that pauses (a stop-the-world GC, a failover, a
			// dependency that stalls for a moment) under a load it has
			// room for serves every request, late, behind a static cap
			// at its slots: the backlog a pause leaves is no overload
			// (issue 23). Without a limit, that backlog's contention
			// slows the service below the load, and it never catches up.
			Name: "pauses", Goal: "a service pausing 300 ms every 2 s at 0.6x its capacity: >= 99% of the requests served, as behind a static cap at its slots",
			Duration: 10 * sec, Model: baseModel(), Load: constant(0.6),
			Events: []Event{
				{At: 2 * sec, Change: hung(true)}, {At: 2300 * time.Millisecond, Change: hung(false)},
				{At: 4 * sec, Change: hung(true)}, {At: 4300 * time.Millisecond, Change: hung(false)},
				{At: 6 * sec, Change: hung(true)}, {At: 6300 * time.Millisecond, Change: hung(false)},
				{At: 8 * sec, Change: hung(true)}, {At: 8300 * time.Millisecond, Change: hung(false)},
			},
			Score: func(r *Run) Verdict {
				share := float64(r.Summary.OK) / math.Max(1, float64(r.Summary.Requests))
				return Verdict{Met: share >= 0.99, Figure: fmt.Sprintf("%.1f%% of %d served", 100*share, r.Summary.Requests)}
			},
		},
		{
			Name: "flash_crowd", Goal: ">= 90% of capacity good during a 15x crowd of 2 s over 0.6x; no refusal of the base load from 1 s after",
			Duration: 10 * sec, Model: baseModel(),
			Load: during(4*sec, 6*sec, 15, 0.6),
			Score: func(r *Run) Verdict {
				share, after := r.Share(4, 6), r.Refused(7, 10)
				return Verdict{Met: share >= 0.9 && after == 0, Figure: fmt.Sprintf("%.0f%% during; %d refused from 1 s after; %.0f%% of the service's work wasted",
					100*share, after, 100*r.Wasted(4, 8))}
			},
		},
		{
			// flash_crowd again, but the clients say how long they wait
			// (X-Request-Timeout, the client's 2 s timeout): requests
			// that would be answered too late are refused before the
			// service spends its work on them (issue 27, deadlines).
			Name: "flash_crowd_deadlines", Goal: "as flash_crowd, clients sending X-Request-Timeout: 2; and the service's work on answers its clients no longer wait for at most 5% during the crowd",
			Duration: 10 * sec, Model: baseModel(),
			Streams: []Stream{{Name: "clients", Header: http.Header{"X-Request-Timeout": {"2"}}, Load: during(4*sec, 6*sec, 15, 0.6)}},
			Score: func(r *Run) Verdict {
				share, after, wasted := r.Share(4, 6), r.Refused(7, 10), r.Wasted(4, 8)
				return Verdict{Met: share >= 0.9 && after == 0 && wasted <= 0.05,
					Figure: fmt.Sprintf("%.0f%% during; %d refused from 1 s after; %.0f%% of the service's work wasted", 100*share, after, 100*wasted)}
			},
		},
		{
			// Clients whose retries make a surge worse (the SRE book's
			// retry storm): each refused or failed request sent again at
			// once, up to 3 times, through a 5x surge.
			Name: "retry_storm_naive", Goal: "a 5x surge of clients that retry every refusal or failure at once, up to 3 times: >= 90% of capacity good during it (for comparison with retry_storm_backoff)",
			Duration: 12 * sec, Model: baseModel(),
			Streams: []Stream{{Name: "retrying", Load: during(2*sec, 8*sec, 5, 0.5), Client: retryAtOnce}},
			Score:   scoreRetryStorm,
		},
		{
			// The same clients through clientlimit.Transport: adaptive
			// throttling and a retry budget (issue 27).
			Name: "retry_storm_backoff", Goal: "the 5x retrying surge, the clients using clientlimit (adaptive throttling, a retry budget, Retry-After): >= 90% of capacity good during it",
			Duration: 12 * sec, Model: baseModel(),
			Streams: []Stream{{Name: "backing-off", Load: during(2*sec, 8*sec, 5, 0.5), Client: backingOff}},
			Score:   scoreRetryStorm,
		},
		{
			Name: "overload_ends", Goal: "no refusal from 1 s after a 5x overload ends (0.7x after)",
			Duration: 10 * sec, Model: baseModel(),
			Load: during(0, 4*sec, 5, 0.7),
			Score: func(r *Run) Verdict {
				n := r.Refused(5, 10)
				return Verdict{Met: n == 0, Figure: fmt.Sprintf("%d refused from 1 s after", n)}
			},
		},
		{
			Name: "light_load_fast", Goal: "0.1x of a 2 ms service for 12 s: no refusal; then a 0.5x burst is served (<= 1% refused)",
			Duration: 15 * sec, Model: fast,
			Load: during(0, 12*sec, 0.1, 0.5),
			Score: func(r *Run) Verdict {
				light := r.Refused(0, 12)
				burst := r.RefusedShare(12, 15)
				return Verdict{Met: light == 0 && burst <= 0.01, Figure: fmt.Sprintf("%d refused at light load; %.1f%% of the burst", light, 100*burst)}
			},
		},
		{
			Name: "client_faults", Goal: "40/s malformed bodies beside 0.5x good load: good load not refused",
			Duration: 10 * sec, Model: baseModel(), Load: constant(0.5), Faulty: 40,
			Score: func(r *Run) Verdict {
				share := r.RefusedShare(0, 10)
				return Verdict{Met: share <= 0.005, Figure: fmt.Sprintf("%.2f%% of the good load refused", 100*share)}
			},
		},
		priorityClasses(), tenantFlood(), tenantFloodHeavy(), quotaWait(),
	}
}

// Named returns the scenarios with the given names, or an error naming an
// unknown one.
func Named(names []string) ([]Scenario, error) {
	all := append(All(), Sweep()...)
	var out []Scenario
	for _, n := range names {
		found := false
		for _, s := range all {
			if s.Name == n {
				out, found = append(out, s), true
			}
		}
		if !found {
			var known []string
			for _, s := range all {
				known = append(known, s.Name)
			}
			return nil, fmt.Errorf("unknown scenario %q (known: %v)", n, known)
		}
	}
	return out, nil
}

// scoreRetryStorm judges a retry storm from its second second on.
func scoreRetryStorm(r *Run) Verdict {
	share := r.Share(3, 8)
	var arrived int64
	for i := 3; i < 8 && i < len(r.Arrived); i++ {
		arrived += r.Arrived[i]
	}
	return Verdict{Met: share >= 0.9, Figure: fmt.Sprintf("%.0f%% of capacity good during the surge; %d requests reached the service", 100*share, arrived)}
}

// retryAtOnce is a client that sends a refused (429, 503) or failed
// request again at once, up to 3 times: a retry loop without a budget.
func retryAtOnce(base http.RoundTripper) http.RoundTripper { return retryLoop{next: base} }

type retryLoop struct{ next http.RoundTripper }

func (l retryLoop) RoundTrip(r *http.Request) (*http.Response, error) {
	for try := 0; ; try++ {
		resp, err := l.next.RoundTrip(r)
		if try == 3 || r.Context().Err() != nil || (err == nil && resp.StatusCode != 429 && resp.StatusCode != 503) {
			return resp, err
		}
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	}
}

// backingOff is a client using clientlimit's defaults: adaptive
// throttling (K 2) and a retry budget (10% of first tries + 10/s).
func backingOff(base http.RoundTripper) http.RoundTripper {
	return &clientlimit.Transport{Base: base, Throttle: throttle.New(throttle.Config{}),
		Budget: throttle.NewRetryBudget(throttle.BudgetConfig{})}
}
