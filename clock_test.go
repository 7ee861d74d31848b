package sluice

import (
	"testing"
	"time"
)

// TestSystemClockTellsTheTime reads the cheap system clock many times, with
// an anchor that lasts one nanosecond (so most reads take a new one) and
// with the default anchor: every reading is within a generous bound of
// time.Now() taken around it, and readings never go back.
func TestSystemClockTellsTheTime(t *testing.T) {
	for _, every := range []time.Duration{time.Nanosecond, 50 * time.Microsecond, anchorEvery} {
		c := NewSystemClock().(*systemClock)
		c.every = every
		var last time.Time
		for i := range 20_000 {
			before := time.Now()
			got := c.Now()
			after := time.Now()
			// Wall clocks may be stepped by NTP while the test runs; a
			// second either way still catches a reading that is wrong.
			if got.Before(before.Add(-time.Second)) || got.After(after.Add(time.Second)) {
				t.Fatalf("every %v, read %d: %v outside [%v, %v]", every, i, got, before, after)
			}
			if got.Sub(last) < 0 && i > 0 {
				t.Fatalf("every %v, read %d: %v is before the previous reading %v", every, i, got, last)
			}
			if got.UnixNano() < last.UnixNano()-int64(time.Second) {
				t.Fatalf("every %v: wall reading went back by more than a second", every)
			}
			last = got
		}
	}
}

// TestSystemClockReanchors checks that a reading past the anchor's life
// takes a new anchor, so a stepped wall clock is followed.
func TestSystemClockReanchors(t *testing.T) {
	c := NewSystemClock().(*systemClock)
	old := time.Now().Add(-time.Hour) // as if the wall clock was stepped an hour ahead since
	c.anchor.Store(&anchor{t: old, unix: old.UnixNano()})
	got := c.Now()
	if d := time.Since(got); d > time.Second || d < -time.Second {
		t.Fatalf("reading %v is %v from time.Now(): the stale anchor was kept", got, d)
	}
	if a := c.anchor.Load(); !a.t.Equal(got) || a.unix != got.UnixNano() {
		t.Fatalf("anchor %v, want the new reading %v", a, got)
	}
}

func BenchmarkClock(b *testing.B) {
	b.Run("time_now", func(b *testing.B) {
		var n int64
		for b.Loop() {
			n += time.Now().UnixNano()
		}
		_ = n
	})
	b.Run("system_clock", func(b *testing.B) {
		c := NewSystemClock()
		var n int64
		for b.Loop() {
			n += c.Now().UnixNano()
		}
		_ = n
	})
}

// TestUnixNano reads the system clock and a fake one through UnixNano.
func TestUnixNano(t *testing.T) {
	c := NewSystemClock()
	before := time.Now().UnixNano()
	got := UnixNano(c)
	after := time.Now().UnixNano()
	if got < before-int64(time.Second) || got > after+int64(time.Second) {
		t.Fatalf("UnixNano %d outside [%d, %d]", got, before, after)
	}
	f := NewFakeClock(time.Unix(1_700_000_000, 42))
	if got := UnixNano(f); got != 1_700_000_000_000_000_042 {
		t.Fatalf("UnixNano of a fake clock = %d", got)
	}
}
