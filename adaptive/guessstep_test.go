package adaptive

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestFirstProbeGuessConfirmedOrUndone: a first probe's step at 11 of 22,
// its median 12 ms against a fastest answer of 1 ms, RTTs spread wider
// than a queue's (p90 over 2x p10) but less than a heavy tail's, with
// requests refused during it, guesses a queue and steps to 5, the 11
// recorded as saturated. If the step at 5 reads 5 ms (fallen with the
// concurrency, as a queue's median does) the guess stands; if it reads
// 11 ms (no faster at half) there was no queue, and nothing is saturated.
// A step spread like a heavy tail's (p90 over 4x p10) guesses nothing.
func TestFirstProbeGuessConfirmedOrUndone(t *testing.T) {
	ms := float64(time.Millisecond)
	newStep := func(t *testing.T) *Limiter {
		t.Helper()
		l, err := New(Config{Algorithm: &Gradient2{}, Clock: sluice.NewFakeClock(time.Unix(0, 0)), InitialLimit: 22})
		if err != nil {
			t.Fatal(err)
		}
		l.estimate, l.probeFraction, l.minRTT = 22, deepProbe, 1*ms
		l.rejected.Store(10) // refused during the step: the load filled it
		return l
	}
	spread := stepSpread{moderate: true, noise: 1}

	l := newStep(t)
	l.mu.Lock()
	went := l.deeper(0, 20, 12*ms, stepSpread{noise: 1}) // neither narrow nor moderate
	l.mu.Unlock()
	if went || l.guessed || l.saturated != 0 || l.probeLevel() != 11 {
		t.Fatalf("a heavy tail's spread: went deeper %v, guessed %v, saturated %v, level %v; want no guess, at 11", went, l.guessed, l.saturated, l.probeLevel())
	}

	for _, c := range []struct {
		name          string
		next          float64 // the step at 5's median
		wantSaturated float64
	}{{"fell", 5 * ms, 11}, {"did not fall", 11 * ms, 0}} {
		l := newStep(t)
		l.mu.Lock()
		went := l.deeper(0, 20, 12*ms, spread)
		guessed, saturated, level := l.guessed, l.saturated, l.probeLevel()
		l.mu.Unlock()
		if !went || !guessed || saturated != 11 || level != 5 {
			t.Fatalf("%s: the step at 11 went deeper %v, guessed %v, saturated %v, next level %v; want a guess, 11 saturated, 5", c.name, went, guessed, saturated, level)
		}
		// The step at 5 refused nothing more: it goes no deeper either way.
		l.mu.Lock()
		went = l.deeper(0, 20, c.next, stepSpread{narrow: true, noise: 1})
		guessed, saturated = l.guessed, l.saturated
		l.mu.Unlock()
		if went || guessed || saturated != c.wantSaturated {
			t.Errorf("%s: the step at 5 went deeper %v, guess pending %v, saturated %v; want none, none, %v", c.name, went, guessed, saturated, c.wantSaturated)
		}
	}
}
