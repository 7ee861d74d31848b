package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice"
)

// TestSlotFreeLetsTheNextIn: a request whose answer became a stream gives
// its adaptive place back (Slot.Free) while a static concurrency limit
// still counts it until Done, and Done after Free frees no place twice.
func TestSlotFreeLetsTheNextIn(t *testing.T) {
	e := newTestEngine(t, `adaptive: {algorithm: fixed, initial_limit: 1, min_limit: 1, max_limit: 1}
rules:
  - {rule_id: conns, identifier_type: global, algorithm: concurrency, limit: 2}
`)
	ctx := context.Background()
	stream, err := e.DecideNow(ctx, get())
	if err != nil || !stream.Allowed {
		t.Fatalf("stream: %+v, %v", stream, err)
	}
	if _, err := e.DecideNow(ctx, get()); !errors.Is(err, ErrWouldWait) {
		t.Fatalf("the only adaptive place is taken: %v, want ErrWouldWait", err)
	}
	stream.Slot().Free()
	stream.Slot().Free()
	next, err := e.DecideNow(ctx, get())
	if err != nil || !next.Allowed {
		t.Fatalf("after the stream freed its place: %+v, %v; want admitted", next, err)
	}
	// The static concurrency limit (2) still counts the stream.
	third, err := e.DecideNow(ctx, get())
	if errors.Is(err, ErrWouldWait) || third.Allowed || third.Status != StatusQuota {
		t.Fatalf("third: %+v, %v; want the concurrency rule's 429", third, err)
	}
	stream.Done(sluice.Success) // frees its concurrency place, and no adaptive one
	if _, err := e.DecideNow(ctx, get()); !errors.Is(err, ErrWouldWait) {
		t.Fatalf("the stream's Done freed next's adaptive place: %v, want ErrWouldWait", err)
	}
	next.Done(sluice.Success)
	last, err := e.DecideNow(ctx, get())
	if err != nil || !last.Allowed {
		t.Fatalf("last: %+v, %v", last, err)
	}
	last.Done(sluice.Success)
	var none Verdict
	none.Slot().Free() // a refused or zero verdict holds nothing
}

func TestIsStream(t *testing.T) {
	for _, c := range []struct {
		status int
		ct     string
		want   bool
	}{
		{101, "", true},
		{200, "text/event-stream", true},
		{200, "Text/Event-Stream; charset=utf-8", true},
		{200, " text/event-stream ;x=1", true},
		{206, "text/event-stream", true},
		{200, "text/event-streams", false},
		{200, "application/json", false},
		{200, "", false},
		{204, "", false},
		{500, "text/event-stream", false},
		{304, "text/event-stream", false},
		{100, "", false},
	} {
		if got := IsStream(c.status, c.ct); got != c.want {
			t.Errorf("IsStream(%d, %q) = %v, want %v", c.status, c.ct, got, c.want)
		}
	}
}
