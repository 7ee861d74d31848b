package engine

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// fakeClockEngine is an engine on a fake clock with the rules of yaml and
// no adaptive limit, closed when the test ends.
func fakeClockEngine(t testing.TB, yaml string) (*Engine, *sluice.FakeClock) {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte("adaptive: {algorithm: off}\n"+yaml))
	if err != nil {
		t.Fatal(err)
	}
	clock := sluice.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e, err := New(cfg, Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, clock
}
