package loadtest

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Profile is an arrival-rate shape over the length of a run.
type Profile struct {
	// Kind: constant, step, ramp, spike or sine.
	Kind string
	// Rate is the constant rate; the first step's rate; the ramp's start;
	// the spike's base; the sine's mean. Requests per second.
	Rate float64
	// StepRate is added every StepEvery (step).
	StepRate  float64
	StepEvery time.Duration
	// ToRate is where a ramp ends.
	ToRate float64
	// SpikeRate holds from SpikeAt for SpikeFor (spike).
	SpikeRate float64
	SpikeAt   time.Duration
	SpikeFor  time.Duration
	// Amplitude and Period shape a sine around Rate.
	Amplitude float64
	Period    time.Duration
	// Func is the rate at t for Kind "function" (scenarios built in Go).
	Func func(t time.Duration) float64
}

// RateAt is the profile's offered rate at t, in requests per second, over a
// run of length d.
func (p Profile) RateAt(t, d time.Duration) float64 {
	switch p.Kind {
	case "step":
		return p.Rate + p.StepRate*math.Floor(float64(t)/float64(p.StepEvery))
	case "ramp":
		if d <= 0 {
			return p.Rate
		}
		return p.Rate + (p.ToRate-p.Rate)*float64(t)/float64(d)
	case "spike":
		if t >= p.SpikeAt && t < p.SpikeAt+p.SpikeFor {
			return p.SpikeRate
		}
		return p.Rate
	case "sine":
		return p.Rate + p.Amplitude*math.Sin(2*math.Pi*float64(t)/float64(p.Period))
	case "function":
		return max(0, p.Func(t))
	default:
		return p.Rate
	}
}

// Validate checks the profile for a run of length d.
func (p Profile) Validate(d time.Duration) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("profile %s: "+format, append([]any{p.Kind}, args...)...)
	}
	if d <= 0 {
		return fmt.Errorf("duration: %v must be positive", d)
	}
	if p.Kind == "function" {
		if p.Func == nil {
			return bad("needs Func")
		}
		return nil
	}
	if !(p.Rate > 0) || math.IsInf(p.Rate, 0) {
		return bad("-rate %v must be a positive number", p.Rate)
	}
	switch p.Kind {
	case "constant":
	case "step":
		if p.StepEvery <= 0 {
			return bad("-step-every must be positive")
		}
		if p.RateAt(d, d) < 0 || math.IsNaN(p.StepRate) {
			return bad("-step-rate %v makes the rate negative", p.StepRate)
		}
	case "ramp":
		if !(p.ToRate >= 0) || math.IsInf(p.ToRate, 0) {
			return bad("-to-rate %v must be zero or more", p.ToRate)
		}
	case "spike":
		if !(p.SpikeRate >= 0) || math.IsInf(p.SpikeRate, 0) || p.SpikeFor <= 0 || p.SpikeAt < 0 {
			return bad("needs -spike-rate >= 0, -spike-at >= 0 and -spike-for > 0")
		}
	case "sine":
		if p.Period <= 0 || !(p.Amplitude >= 0) || p.Amplitude > p.Rate {
			return bad("needs -period > 0 and 0 <= -amplitude <= -rate")
		}
	default:
		return fmt.Errorf("profile: %q is not one of %s", p.Kind, strings.Join(Profiles, ", "))
	}
	return nil
}

// Profiles lists the profile kinds.
var Profiles = []string{"constant", "step", "ramp", "spike", "sine"}

// gridStep is the resolution of a schedule's cumulative count.
const gridStep = 5 * time.Millisecond

// schedule is when each request of a run is due: the cumulative count of
// the profile's rate, integrated on a fine grid. Request n (from 0) is due
// when the count reaches n. It is immutable, so the pacer and the recorder
// share it.
type schedule struct {
	duration time.Duration
	cum      []float64 // cum[i]: requests due by i*gridStep
	profile  Profile
	n        uint64 // requests in the run
}

func newSchedule(p Profile, d time.Duration) *schedule {
	n := int(d/gridStep) + 1
	s := &schedule{duration: d, cum: make([]float64, n+1), profile: p}
	prev := max(0, p.RateAt(0, d))
	for i := 1; i <= n; i++ {
		r := max(0, p.RateAt(time.Duration(i)*gridStep, d))
		s.cum[i] = s.cum[i-1] + (prev+r)/2*gridStep.Seconds()
		prev = r
	}
	// Requests 0..n-1 are due before the end; the tolerance keeps float
	// sums (40/s for 2s summing to 80.0000001) from adding one.
	s.n = uint64(math.Ceil(s.countAt(d) - 1e-6))
	return s
}

// total is how many requests the run sends.
func (s *schedule) total() uint64 { return s.n }

// countAt is how many requests are due by t.
func (s *schedule) countAt(t time.Duration) float64 {
	i := int(t / gridStep)
	if i >= len(s.cum)-1 {
		return s.cum[len(s.cum)-1]
	}
	frac := float64(t-time.Duration(i)*gridStep) / float64(gridStep)
	return s.cum[i] + frac*(s.cum[i+1]-s.cum[i])
}

// due is when request n is due; ok is false past the end of the run.
func (s *schedule) due(n uint64) (time.Duration, bool) {
	if n >= s.n {
		return s.duration, false
	}
	x := float64(n)
	if x == 0 {
		return 0, true
	}
	i := sort.SearchFloat64s(s.cum, x) // first i with cum[i] >= x
	if i >= len(s.cum) {
		return s.duration, false
	}
	lo, hi := s.cum[i-1], s.cum[i]
	t := time.Duration(i-1) * gridStep
	if hi > lo {
		t += time.Duration((x - lo) / (hi - lo) * float64(gridStep))
	}
	if t >= s.duration {
		return s.duration, false
	}
	return t, true
}

// Pace implements vegeta.Pacer: wait until the next request is due; stop
// after the last.
func (s *schedule) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	t, ok := s.due(hits)
	if !ok {
		return 0, true
	}
	return max(0, t-elapsed), false
}

// Rate implements vegeta.Pacer.
func (s *schedule) Rate(elapsed time.Duration) float64 {
	return max(0, s.profile.RateAt(elapsed, s.duration))
}
