package loadtest

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestScheduleCounts(t *testing.T) {
	d := 10 * time.Second
	cases := []struct {
		name string
		p    Profile
		want float64 // requests in the run
	}{
		{"constant", Profile{Kind: "constant", Rate: 100}, 1000},
		{"step", Profile{Kind: "step", Rate: 10, StepRate: 10, StepEvery: 2 * time.Second}, 2 * (10 + 20 + 30 + 40 + 50)},
		{"ramp", Profile{Kind: "ramp", Rate: 0.5, ToRate: 200}, (0.5 + 200) / 2 * 10},
		{"spike", Profile{Kind: "spike", Rate: 10, SpikeRate: 110, SpikeAt: 4 * time.Second, SpikeFor: 2 * time.Second}, 10*8 + 110*2},
		{"sine", Profile{Kind: "sine", Rate: 50, Amplitude: 40, Period: 5 * time.Second}, 500}, // whole periods
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.p.Validate(d); err != nil {
				t.Fatal(err)
			}
			s := newSchedule(c.p, d)
			if got := float64(s.total()); math.Abs(got-c.want) > c.want*0.01+2 {
				t.Fatalf("total %v, want %v", got, c.want)
			}
			// due is increasing and inverts countAt.
			prev := time.Duration(-1)
			for n := uint64(0); ; n++ {
				at, ok := s.due(n)
				if !ok {
					if float64(n) < c.want*0.99-2 {
						t.Fatalf("schedule ended at request %d of ~%v", n, c.want)
					}
					break
				}
				if at < prev {
					t.Fatalf("request %d due at %v, before request %d at %v", n, at, n-1, prev)
				}
				if got := s.countAt(at); math.Abs(got-float64(n)) > 0.01 {
					t.Fatalf("countAt(due(%d)) = %v", n, got)
				}
				prev = at
			}
		})
	}
}

func TestSchedulePace(t *testing.T) {
	s := newSchedule(Profile{Kind: "constant", Rate: 100}, time.Second)
	if w, stop := s.Pace(0, 0); w != 0 || stop {
		t.Fatalf("first request: wait %v stop %v", w, stop)
	}
	if w, stop := s.Pace(5*time.Millisecond, 1); stop || w < 4*time.Millisecond || w > 6*time.Millisecond {
		t.Fatalf("second request at 5ms: wait %v (want ~5ms) stop %v", w, stop)
	}
	if w, _ := s.Pace(500*time.Millisecond, 10); w != 0 {
		t.Fatalf("behind schedule: wait %v, want 0 (catch up)", w)
	}
	if _, stop := s.Pace(time.Second, 100); !stop {
		t.Fatal("no stop after the last request")
	}
}

func TestProfileValidate(t *testing.T) {
	d := 10 * time.Second
	bad := []struct {
		p    Profile
		want string
	}{
		{Profile{Kind: "constant", Rate: 0}, "-rate"},
		{Profile{Kind: "constant", Rate: math.NaN()}, "-rate"},
		{Profile{Kind: "nope", Rate: 1}, "not one of"},
		{Profile{Kind: "step", Rate: 1, StepRate: 1}, "-step-every"},
		{Profile{Kind: "step", Rate: 10, StepRate: -5, StepEvery: time.Second}, "negative"},
		{Profile{Kind: "ramp", Rate: 1, ToRate: -1}, "-to-rate"},
		{Profile{Kind: "spike", Rate: 1, SpikeRate: 5}, "-spike-for"},
		{Profile{Kind: "sine", Rate: 10, Amplitude: 20, Period: time.Second}, "-amplitude"},
	}
	for _, c := range bad {
		err := c.p.Validate(d)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one naming %q", c.p, err, c.want)
		}
	}
	if err := (Profile{Kind: "constant", Rate: 1}).Validate(0); err == nil {
		t.Error("zero duration accepted")
	}
}
