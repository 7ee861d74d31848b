package adaptive

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Sample is what one sample window saw: the input of an Algorithm.
type Sample struct {
	// RTT is the window's round-trip time of successful requests: their
	// median (Config.Percentile).
	RTT time.Duration
	// Mean is their average.
	Mean time.Duration
	// MinRTT is the window's fastest success.
	MinRTT time.Duration
	// NoLoadRTT is the limiter's estimate of the round-trip time without
	// queueing (its baseline: see Limiter), the same statistic as RTT; 0
	// until measured.
	NoLoadRTT time.Duration
	// Successes and Drops count the window's outcomes (Ignore is neither).
	Successes, Drops int
	// MaxInFlight is the most requests in flight at once during the window.
	MaxInFlight int
	// Noise is the factor (>= 1) by which RTT may stand off the median of
	// the service's RTTs by chance alone: about 1.5 standard errors of a
	// median of Successes samples, their spread read from the window's
	// 10th and 90th percentiles as a lognormal's. A heavy tail makes it
	// wide (1.3 for 50 samples at sigma 1), a steady service narrow (1.05
	// at sigma 0.25); 0 or 1: none known.
	Noise float64
	// SelfDelay is how much of the round trips was the caller's own wait
	// for a CPU (Config.SelfDelay), already taken out of RTT and Mean.
	SelfDelay time.Duration
	// At is when the window closed.
	At time.Time
}

// Algorithm computes a new concurrency limit at the end of each sample
// window. It is called by one goroutine at a time and need not be safe for
// concurrent use. The Limiter clamps the result to its bounds.
type Algorithm interface {
	// Update returns the limit to use from now on, given the current one.
	Update(limit float64, s Sample) float64
	// Name is the algorithm's configuration name.
	Name() string
}

// SlowStarter is an Algorithm that the Limiter may slow-start: double the
// limit per window while demand exceeds it and the service shows no queue,
// until a queue forms, to at most twice the concurrency the window's
// answers were admitted at (see Limiter). Algorithms whose users expect their
// own growth only (AIMD's +1, Vegas's log steps) do not implement it.
type SlowStarter interface {
	Algorithm
	// SlowStarts reports whether the Limiter may slow-start it.
	SlowStarts() bool
}

// Fixed never changes the limit.
type Fixed struct{}

// Update returns limit.
func (Fixed) Update(limit float64, _ Sample) float64 { return limit }

// Name returns "fixed".
func (Fixed) Name() string { return "fixed" }

// AIMD is additive increase, multiplicative decrease: the limit grows by
// Increase per healthy window in which the limit was used, and is multiplied
// by Backoff on a window with drops, with an RTT above Tolerance times the
// no-load RTT (queueing), or with an RTT beyond Timeout.
type AIMD struct {
	// Backoff multiplies the limit on overload; default 0.9.
	Backoff float64
	// Increase is added per healthy window; default 1.
	Increase float64
	// Tolerance is how far the window's RTT may rise above the no-load RTT
	// before it counts as queueing; default 1.25 (of the window median). Below 1:
	// latency ignored.
	Tolerance float64
	// Timeout, when positive, counts a window RTT beyond it as overload.
	Timeout time.Duration
}

// Update implements Algorithm.
func (a AIMD) Update(limit float64, s Sample) float64 {
	backoff, inc, tol := a.Backoff, a.Increase, a.Tolerance
	if backoff <= 0 || backoff >= 1 {
		backoff = 0.9
	}
	if inc <= 0 {
		inc = 1
	}
	if tol == 0 {
		tol = 1.25
	}
	if s.Drops > 0 {
		return limit * backoff
	}
	if float64(s.MaxInFlight)*2 < limit {
		return limit // not using the limit: no evidence either way
	}
	queueing := tol >= 1 && s.NoLoadRTT > 0 && float64(s.RTT) > tol*float64(s.NoLoadRTT)
	if queueing || (a.Timeout > 0 && s.RTT > a.Timeout) {
		return limit * backoff
	}
	return limit + inc
}

// Name returns "aimd".
func (AIMD) Name() string { return "aimd" }

// Vegas is TCP Vegas as in Netflix concurrency-limits (and the math of
// github.com/platinummonkey/go-concurrency-limits' VegasLimit): it estimates
// the queue in front of the service as limit*(1 - noLoadRTT/RTT) and grows
// while that queue is below alpha, shrinks above beta, where alpha, beta and
// the steps scale with log10 of the limit. Unlike that package it probes
// nothing at random: the no-load RTT comes from the Limiter's long-horizon
// minimum, so runs are deterministic. Its defaults keep a smaller queue than
// Netflix's (alpha 1x and beta 2x log10 instead of 3x and 6x) so that the
// service's p99 stays within twice its no-load latency.
type Vegas struct {
	// Alpha and Beta scale log10(limit) into the queue bounds; defaults 1
	// and 2.
	Alpha, Beta float64
	// Smoothing weighs the new limit against the old (0, 1]; default 1.
	Smoothing float64
}

// Update implements Algorithm.
func (v Vegas) Update(limit float64, s Sample) float64 {
	sm, am, bm := v.Smoothing, v.Alpha, v.Beta
	if sm <= 0 || sm > 1 {
		sm = 1
	}
	if am <= 0 {
		am = 1
	}
	if bm <= am {
		bm = 2 * am
	}
	logf := func(x float64) float64 { return math.Max(1, math.Log10(math.Max(1, x))) }
	var next float64
	switch {
	case s.Drops > 0:
		next = limit - logf(limit)
	case float64(s.MaxInFlight)*2 < limit || s.RTT <= 0 || s.NoLoadRTT <= 0:
		return limit
	default:
		queue := limit * (1 - float64(s.NoLoadRTT)/float64(s.RTT))
		l := logf(limit)
		alpha, beta := am*l, bm*l
		switch {
		case queue < alpha/2:
			next = limit + beta
		case queue < alpha:
			next = limit + l
		case queue > beta:
			next = limit - l
		default:
			return limit
		}
	}
	return (1-sm)*limit + sm*next
}

// Name returns "vegas".
func (Vegas) Name() string { return "vegas" }

// Gradient2 follows Netflix's Gradient2: the ratio of a baseline RTT to the
// window's RTT, times a tolerance, is the gradient by which the limit is
// scaled (between 0.5 and the tolerance), growing by at least 1 while the
// gradient is above 1. Netflix's adds a queue allowance of sqrt(limit) to
// every update; that keeps a small limit oscillating by +-sqrt around its
// equilibrium (12-15 on a 10-slot service, 2-4% of goodput lost and a
// queue in the service), where the multiplicative form settles where the
// window's RTT is the tolerance above the baseline. Netflix's
// baseline is an exponential average of past RTTs, which follows the RTT up
// under sustained load so that latency creeps; here the baseline is the
// Limiter's no-load RTT, measured only where no queue can be (see Limiter),
// so it follows a service that got slower and not a queue. As in Netflix's,
// a window that used less than half the limit changes nothing (no evidence
// either way: at sub-millisecond RTTs its jitter would otherwise lower the
// limit of an idle service). Drops back off like AIMD. A Gradient2 holds
// state: use one per Limiter.
//
// A Limiter slow-starts Gradient2 (SlowStarter): on a service with no
// queue, demand far above the limit doubles it per window, until the first
// cut on latency.
type Gradient2 struct {
	// Tolerance is how much the window's RTT may exceed the baseline before
	// the limit shrinks; default 1.2 (of the window median).
	Tolerance float64
	// Smoothing weighs the new limit against the old (0, 1]; default 0.5.
	Smoothing float64
	// LongWindow is the number of windows the long-term RTT averages over,
	// the baseline until the Limiter has measured one; default 60.
	LongWindow int

	long float64 // long-term RTT, ns
}

// Update implements Algorithm.
func (g *Gradient2) Update(limit float64, s Sample) float64 {
	tol, sm, lw := g.Tolerance, g.Smoothing, g.LongWindow
	if tol < 1 {
		tol = 1.2
	}
	if sm <= 0 || sm > 1 {
		sm = 0.5
	}
	if lw <= 0 {
		lw = 60
	}
	if s.Drops > 0 && s.Successes < s.Drops {
		return limit * 0.9
	}
	if s.RTT <= 0 {
		return limit
	}
	short := float64(s.RTT)
	if g.long == 0 {
		g.long = short
	} else {
		g.long += (short - g.long) / float64(lw)
	}
	if s.Drops == 0 && float64(s.MaxInFlight)*2 < limit {
		return limit // app-limited
	}
	base := g.long
	if s.NoLoadRTT > 0 {
		base = float64(s.NoLoadRTT)
	}
	// A window's median above the baseline by no more than chance makes
	// it (Noise) is no queue: read as one, a heavy-tailed service's noisy
	// medians would be cut below its slots.
	gradient := math.Max(0.5, math.Min(tol, tol*base*math.Max(1, s.Noise)/short))
	next := limit * gradient
	if gradient > 1 {
		next = math.Max(next, limit+1)
	}
	next = (1-sm)*limit + sm*next
	if s.Drops > 0 {
		next = math.Min(next, limit*0.95)
	}
	return next
}

// Name returns "gradient2".
func (*Gradient2) Name() string { return "gradient2" }

// SlowStarts reports true: see SlowStarter.
func (*Gradient2) SlowStarts() bool { return true }

// AlgorithmNames returns the names NewAlgorithm knows: sluice's own, then
// go-concurrency-limits' (GCL).
func AlgorithmNames() []string {
	return append([]string{"gradient2", "vegas", "aimd", "fixed"}, gclNames[:]...)
}

// NewAlgorithm returns the algorithm named name ("fixed", "aimd", "vegas",
// "gradient2") with its defaults.
func NewAlgorithm(name string) (Algorithm, error) {
	switch name {
	case "fixed":
		return Fixed{}, nil
	case "aimd":
		return AIMD{}, nil
	case "vegas":
		return Vegas{}, nil
	case "gradient2":
		return &Gradient2{}, nil
	}
	if strings.HasPrefix(name, "gcl-") {
		return NewGCL(name)
	}
	return nil, fmt.Errorf("unknown adaptive algorithm %q (want %s)", name, strings.Join(AlgorithmNames(), ", "))
}
