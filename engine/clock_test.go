package engine

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// unequalClock is a Clock whose type cannot be compared with ==.
type unequalClock struct {
	f []*sluice.FakeClock
}

func (c unequalClock) Now() time.Time { return c.f[0].Now() }

// TestEngineOnAClockThatCannotBeCompared: the engine asks whether its
// memory store reads its own clock (to time a check with one reading); a
// Clock of a type == cannot compare must get a plain "no", not a panic.
func TestEngineOnAClockThatCannotBeCompared(t *testing.T) {
	cfg, err := config.Parse("t.yaml", []byte(`rules:
  - {rule_id: r, identifier_type: ip_address, algorithm: fixed_window, limit: 1, window: 1m}
`))
	if err != nil {
		t.Fatal(err)
	}
	clock := unequalClock{f: []*sluice.FakeClock{sluice.NewFakeClock(time.Unix(1_700_000_000, 0))}}
	e, err := New(cfg, Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.storeReadsClock {
		t.Error("a clock that cannot be compared taken for the store's")
	}
	req := &Request{Method: "GET", Path: "/", RemoteAddr: "192.0.2.1:1"}
	if v, err := e.Decide(context.Background(), req); err != nil || !v.Allowed {
		t.Fatalf("first request: %+v, %v", v, err)
	} else {
		v.Done(sluice.Success)
	}
	if v, _ := e.Decide(context.Background(), req); v.Allowed {
		t.Fatal("second request admitted over a limit of 1")
	}
	f, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !f.storeReadsClock {
		t.Error("the memory store the engine made on its own clock is not known to read it")
	}
}
