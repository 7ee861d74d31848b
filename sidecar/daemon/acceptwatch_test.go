package daemon

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A failure caused by the last connection in the backlog ends once no
// accept has failed for failureLapse, with no client to accept: before, it
// stayed in progress (and /readyz 503) until one came.
func TestAcceptFailureLapsesWithoutAClient(t *testing.T) {
	now := time.Unix(1000, 0)
	var logs bytes.Buffer
	w := newAcceptWatch(slog.New(slog.NewTextHandler(&logs, nil)), func() time.Time { return now })
	emfile := errors.New("accept4: too many open files")
	w.failed(emfile)
	if got := w.failing(); !strings.Contains(got, "too many open files") {
		t.Fatalf("failing() right after a failed accept = %q", got)
	}
	// Retries that fail keep it in progress past the lapse.
	for range 5 {
		now = now.Add(time.Second)
		w.failed(emfile)
	}
	now = now.Add(failureLapse - time.Millisecond)
	if got := w.failing(); !strings.Contains(got, "(for 6.999s)") {
		t.Fatalf("failing() %v after the latest of retries that fail = %q", failureLapse-time.Millisecond, got)
	}
	now = now.Add(time.Millisecond)
	if got := w.failing(); got != "" {
		t.Fatalf("failing() %v after the latest failed accept, none since = %q, want \"\"", failureLapse, got)
	}
	if !strings.Contains(logs.String(), "accepting connections again") || !strings.Contains(logs.String(), "failed_for=5s") {
		t.Errorf("no line for the failure's end:\n%s", logs.String())
	}
	// A new failure starts a new one.
	w.failed(emfile)
	if got := w.failing(); !strings.Contains(got, "(for 0s)") {
		t.Errorf("failing() after a new failed accept = %q", got)
	}
	w.ok()
	if got := w.failing(); got != "" {
		t.Errorf("failing() after an accept that worked = %q", got)
	}
}
