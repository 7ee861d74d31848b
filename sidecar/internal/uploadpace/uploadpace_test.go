package uploadpace

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// The pace's deadline: a window from the stream's start, moved on by each
// window's worth of bytes as it comes, never by more than one window
// whatever came before (no credit), and never past the request's end.
func TestUploadPaceDeadlines(t *testing.T) {
	clock := sluice.NewFakeClock(time.Unix(1000, 0))
	start := clock.Now()
	var set []time.Time
	body := strings.NewReader(strings.Repeat("x", 101))
	end := start.Add(12 * time.Second)
	p := New(body, 4, 5*time.Second, end, clock.Now, func(d time.Time) error { set = append(set, d); return nil })
	read := func(n int) {
		t.Helper()
		if _, err := io.ReadFull(p, make([]byte, n)); err != nil {
			t.Fatal(err)
		}
	}
	read(10) // half a window's 20 bytes
	if got := set[len(set)-1]; !got.Equal(start.Add(5 * time.Second)) {
		t.Fatalf("first deadline %v after start, want 5s", got.Sub(start))
	}
	clock.Advance(4 * time.Second)
	read(10) // the window's 20: the next window starts now
	clock.Advance(time.Second)
	read(1)
	if got := set[len(set)-1]; !got.Equal(start.Add(9 * time.Second)) {
		t.Errorf("deadline %v after start, want 9s (a window after the first window's bytes)", got.Sub(start))
	}
	read(60) // three windows' bytes at once earn no credit
	read(1)
	if got := set[len(set)-1]; !got.Equal(clock.Now().Add(5 * time.Second)) {
		t.Errorf("deadline %v after now, want one window", got.Sub(clock.Now()))
	}
	clock.Advance(4 * time.Second)
	read(19) // a window's bytes: the next would end past the request's end
	if _, err := p.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read past the body: %v", err)
	}
	if got := set[len(set)-2]; !got.Equal(end) {
		t.Errorf("deadline %v, want the request's end (read_timeout) when the window would pass it", got.Sub(start))
	}
	if got := set[len(set)-1]; !got.Equal(end) {
		t.Errorf("after the body's end the deadline is %v, want the request's own", got.Sub(start))
	}
	// Pace off: the request's end alone.
	set = nil
	p = New(strings.NewReader("ab"), 0, 5*time.Second, end, clock.Now, func(d time.Time) error { set = append(set, d); return nil })
	_, _ = p.Read(make([]byte, 1))
	if len(set) != 1 || !set[0].Equal(end) {
		t.Errorf("without a pace: deadlines %v, want only the request's end", set)
	}
}
