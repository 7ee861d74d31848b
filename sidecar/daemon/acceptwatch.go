package daemon

import (
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// acceptWatch follows whether the proxy's listener accepts connections. An
// accept fails when file descriptors run out (EMFILE, ENFILE) or a client
// resets a connection still in the backlog; both engines keep accepting
// (backing off), and the watch makes the failure seen: logged once when it
// starts and once when it ends, counted, and shown by /readyz (503 while
// failing) so that an orchestrator stops sending traffic to a sidecar that
// cannot take it.
//
// A failure ends with the next accept that works or, when no client comes
// to be accepted, once no accept has failed for failureLapse: both engines
// retry a failed accept within a second, so a failure still in progress
// fails again sooner. Before, a failure caused by the last connection in
// the backlog stayed "in progress" until a client came, and a sidecar out
// of its orchestrator's rotation for it never got one.
type acceptWatch struct {
	log  *slog.Logger
	now  func() time.Time
	errs atomic.Uint64
	// since is when accepting started failing (Unix nanoseconds); 0 while
	// it works.
	since atomic.Int64
	// lastFail is when the latest accept failed (Unix nanoseconds).
	lastFail atomic.Int64
	last     atomic.Pointer[string] // the error that started the failure
	addr     string

	errsDesc, failingDesc *prometheus.Desc
}

func newAcceptWatch(log *slog.Logger, now func() time.Time) *acceptWatch {
	return &acceptWatch{log: log, now: now,
		errsDesc: prometheus.NewDesc("sluice_accept_errors_total",
			"Accepts of a client connection on the proxy port that failed (file descriptors exhausted, a connection reset in the backlog); the proxy retries, backing off 5 ms doubling to 1 s.", nil, nil),
		failingDesc: prometheus.NewDesc("sluice_accept_failing",
			"1 while accepting on the proxy port fails (and /readyz answers 503): from a failed accept until one succeeds or none has failed for 2 s.", nil, nil),
	}
}

// failureLapse is how long after the latest failed accept, with none
// since, accepting counts as working again: twice the engines' longest
// wait (1 s) before they retry a failed accept.
const failureLapse = 2 * time.Second

// failed records a failed accept.
func (w *acceptWatch) failed(err error) {
	w.errs.Add(1)
	now := w.now().UnixNano()
	w.lastFail.Store(now)
	if w.since.Load() != 0 {
		return
	}
	msg := err.Error()
	w.last.Store(&msg)
	if w.since.CompareAndSwap(0, now) {
		w.log.Warn("accepting connections fails; retrying (5 ms doubling to 1 s) until it works; /readyz answers 503 meanwhile",
			"addr", w.addr, "error", msg)
	}
}

// ok records an accept that worked.
func (w *acceptWatch) ok() {
	if since := w.since.Load(); since != 0 && w.since.CompareAndSwap(since, 0) {
		w.log.Info("accepting connections again", "addr", w.addr, "failed_for", w.now().Sub(time.Unix(0, since)).Round(time.Millisecond).String())
	}
}

// lapse ends a failure in progress once no accept has failed for
// failureLapse, and returns when the failure in progress began (0 for
// none).
func (w *acceptWatch) lapse() int64 {
	since := w.since.Load()
	if since == 0 {
		return 0
	}
	last := w.lastFail.Load()
	if w.now().UnixNano()-last < int64(failureLapse) {
		return since
	}
	if w.since.CompareAndSwap(since, 0) {
		w.log.Info("accepting connections again (no accept failed since)", "addr", w.addr,
			"failed_for", time.Unix(0, last).Sub(time.Unix(0, since)).Round(time.Millisecond).String())
	}
	return 0
}

// failing describes the failure in progress, or returns "" while accepting
// works.
func (w *acceptWatch) failing() string {
	since := w.lapse()
	if since == 0 {
		return ""
	}
	msg := "accepting connections fails"
	if p := w.last.Load(); p != nil {
		msg += ": " + *p
	}
	return msg + " (for " + w.now().Sub(time.Unix(0, since)).Round(time.Millisecond).String() + ")"
}

// Describe implements prometheus.Collector.
func (w *acceptWatch) Describe(ch chan<- *prometheus.Desc) {
	ch <- w.errsDesc
	ch <- w.failingDesc
}

// Collect implements prometheus.Collector.
func (w *acceptWatch) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(w.errsDesc, prometheus.CounterValue, float64(w.errs.Load()))
	failing := 0.0
	if w.lapse() != 0 {
		failing = 1
	}
	ch <- prometheus.MustNewConstMetric(w.failingDesc, prometheus.GaugeValue, failing)
}

// watchedListener reports each accept of the net/http engine's listener to
// its watch; net/http itself backs off and retries.
type watchedListener struct {
	net.Listener
	watch *acceptWatch
}

// Accept implements net.Listener.
func (l watchedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		if !errors.Is(err, net.ErrClosed) {
			l.watch.failed(err)
		}
		return c, err
	}
	l.watch.ok()
	return c, nil
}
