package scenarios

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/loadtest"
)

// This file holds the scenarios about whom an overloaded service serves:
// priority classes under a surge of the lowest, one tenant flooding the
// queue, and a burst waiting for a quota (rules[].max_wait).

// classNames are the priority classes of the priority scenario, highest
// first, with their normal load (as a share of capacity).
var classNames = []struct {
	name  string
	share float64 // guaranteed share of the adaptive limit
	load  float64 // normal load, x capacity
}{
	{"critical", 0.25, 0.15}, {"degraded", 0.25, 0.15}, {"best_effort", 0.2, 0.15}, {"bulk", 0.3, 0.38},
}

// surge is the bulk class's multiplier during the priority scenario's surge:
// 12 x 0.38 + 0.45 = 5x capacity in all.
const surge = 12

func priorityClasses() Scenario {
	var cfg strings.Builder
	cfg.WriteString("adaptive:\n  classes:\n")
	var streams []Stream
	for _, c := range classNames {
		fmt.Fprintf(&cfg, "    - {name: %s, share: %g, match: {required_headers: {X-Class: %s}}}\n", c.name, c.share, c.name)
		load := constant(c.load)
		if c.name == "bulk" {
			load = during(3*sec, 11*sec, surge*c.load, c.load)
		}
		streams = append(streams, Stream{Name: c.name, Header: http.Header{"X-Class": {c.name}}, Load: load})
	}
	return Scenario{
		Name:     "priority_classes",
		Goal:     "bulk surges 12x (5x capacity in all): critical >= 99.5% served; goodput >= 90% of capacity; shed bulk, then best_effort, then degraded",
		Duration: 14 * sec, Model: baseModel(), Streams: streams, Config: cfg.String(),
		Score: func(r *Run) Verdict {
			served := func(name string, from, to int) float64 { return servedShare(r.Stream(name), from, to) }
			crit := served("critical", 0, 14)
			good := r.Share(4, 11)
			var shares []float64
			ordered := true
			for i, c := range classNames {
				shares = append(shares, served(c.name, 4, 11))
				if i > 0 && shares[i] > shares[i-1]+0.005 {
					ordered = false // a lower class served better than a higher one
				}
			}
			return Verdict{Met: crit >= 0.995 && good >= 0.9 && ordered,
				Figure: fmt.Sprintf("critical %.2f%% served; goodput %.0f%% during the surge; served critical/degraded/best_effort/bulk %.1f/%.1f/%.1f/%.1f%%",
					100*crit, 100*good, 100*shares[0], 100*shares[1], 100*shares[2], 100*shares[3])}
		},
	}
}

// servedShare is the share of the requests due in seconds [from, to) of s
// that were answered 2xx or 3xx.
func servedShare(s *loadtest.Summary, from, to int) float64 {
	ok, offered := 0, 0
	for i := from; i < to && i < len(s.Seconds); i++ {
		ok, offered = ok+s.Seconds[i].OK, offered+s.Seconds[i].Offered
	}
	return float64(ok) / float64(max(1, offered))
}

// quietTenantsServed scores a flood scenario whose first stream is the
// flood: every other stream must have at least want of its requests due
// from second from on served.
func quietTenantsServed(want float64, from int) func(r *Run) Verdict {
	return func(r *Run) Verdict {
		worst := 1.0
		for _, st := range r.Streams[1:] {
			worst = min(worst, servedShare(st.Summary, from, len(st.Summary.Seconds)))
		}
		flood := r.Streams[0].Summary
		return Verdict{Met: worst >= want,
			Figure: fmt.Sprintf("worst quiet tenant %.1f%% served; the flood %.0f%%", 100*worst, 100*float64(flood.OK)/float64(max(1, flood.Requests)))}
	}
}

// tenants is how many tenants the flood scenario has; one sends 20x each
// other's rate, 2x capacity in all.
const tenants = 10

func tenantFlood() Scenario {
	per := 2.0 / (tenants - 1 + 20) // each quiet tenant's load, x capacity
	var streams []Stream
	for i := range tenants {
		load := per
		if i == 0 {
			load = 20 * per
		}
		streams = append(streams, Stream{Name: fmt.Sprintf("tenant-%d", i), Header: http.Header{"X-User-Id": {fmt.Sprintf("tenant-%d", i)}},
			Load: constant(load)})
	}
	return Scenario{
		Name:     "tenant_flood",
		Goal:     "one tenant sends 20x each of 9 others (2x capacity in all): each other tenant >= 95% served",
		Duration: 10 * sec, Model: baseModel(), Streams: streams, Config: "queue: {fairness: user_id}\n",
		Score: quietTenantsServed(0.95, 2),
	}
}

// tenantFloodHeavy: one tenant floods at 4x capacity while three quiet
// ones ask 0.2x each, under a fair share (a quarter) each: max-min fairness
// serves every quiet tenant in full from the first second, however many
// buckets the flood touches.
func tenantFloodHeavy() Scenario {
	streams := []Stream{{Name: "flood", Header: http.Header{"X-Tenant": {"flood"}}, Load: constant(4)}}
	for i := range 3 {
		streams = append(streams, Stream{Name: fmt.Sprintf("quiet-%d", i), Header: http.Header{"X-Tenant": {fmt.Sprintf("quiet-%d", i)}},
			Load: constant(0.2)})
	}
	return Scenario{
		Name:     "tenant_flood_heavy",
		Goal:     "one tenant at 4x capacity, three at 0.2x (each under a fair share): each quiet tenant >= 99% served from the start",
		Duration: 8 * sec, Model: baseModel(), Streams: streams, Config: "queue: {fairness: 'header:X-Tenant'}\n",
		Score: quietTenantsServed(0.99, 0),
	}
}

// quotaRate is the quota scenario's rule: a token bucket of this many per
// second (and as many at once).
const quotaRate = 100

func quotaWait() Scenario {
	c := capacity(baseModel())
	return Scenario{
		Name:     "quota_wait",
		Goal:     fmt.Sprintf("a burst of 250 in 1 s against a %d/s token bucket with max_wait 2s: no 429, all admitted, none faster than the bucket allows", quotaRate),
		Duration: 8 * sec, Model: baseModel(),
		Load: func(t time.Duration) float64 {
			if t >= 3*sec && t < 4*sec {
				return 250 / c
			}
			return 20 / c
		},
		Config: fmt.Sprintf("rules:\n  - {rule_id: smooth, identifier_type: global, algorithm: token_bucket, limit: %d, window: 1s, max_wait: 2s}\n", quotaRate),
		Score: func(r *Run) Verdict {
			refused := r.Refused(0, 8)
			served := r.Summary.OK == r.Summary.Requests
			// What reached the backend: in the burst's second at most the
			// bucket's capacity and its refill, then its rate.
			var fast []string
			for i, limit := range map[int]float64{3: 2 * quotaRate, 4: quotaRate, 5: quotaRate} {
				if i < len(r.Arrived) && float64(r.Arrived[i]) > 1.05*limit+5 {
					fast = append(fast, fmt.Sprintf("second %d: %d", i, r.Arrived[i]))
				}
			}
			return Verdict{Met: refused == 0 && served && len(fast) == 0,
				Figure: fmt.Sprintf("%d refused; %d of %d served (waits up to %.0f ms); reached the backend in seconds 3-5: %v",
					refused, r.Summary.OK, r.Summary.Requests, r.Summary.OKLatency.Max, r.Arrived[3:6])}
		},
	}
}
