package engine

import (
	"context"
	"math"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/config"
)

// This file reads clients' deadlines (config.Deadlines): the budget a
// request carries, which decide turns into a refusal at arrival, a limit on
// its waits, and the remaining budget passed upstream.

// budgetFormat is how a header carries a budget.
type budgetFormat uint8

const (
	// formatSeconds: a Go duration ("1.5s", "250ms") or decimal seconds ("1.5").
	formatSeconds budgetFormat = iota
	// formatMillis: integer milliseconds (a header whose name ends in "-ms").
	formatMillis
	// formatGRPC: gRPC's grpc-timeout, up to 8 digits and a unit of H, M,
	// S, m, u or n.
	formatGRPC
)

// maxBudget is the largest budget read; a larger one is taken as this
// (a deadline that far off changes nothing).
const maxBudget = 30 * 24 * time.Hour

// budgetHeader is a header that carries a budget.
type budgetHeader struct {
	name   string // canonical, so that looking it up allocates nothing
	format budgetFormat
}

func newBudgetHeader(name string) budgetHeader {
	h := budgetHeader{name: textproto.CanonicalMIMEHeaderKey(name), format: formatSeconds}
	switch lower := strings.ToLower(name); {
	case lower == "grpc-timeout":
		h.format = formatGRPC
	case strings.HasSuffix(lower, "-ms"):
		h.format = formatMillis
	}
	return h
}

// deadlines is a rule set's reading of clients' deadlines.
type deadlines struct {
	from []budgetHeader
	// def is the budget of a request without one of its own; byClass
	// overrides it per class (0: def).
	def     time.Duration
	byClass []time.Duration
	// propagate is the header that carries the remaining budget upstream
	// (name "": the one it was read from); none: no header.
	propagate budgetHeader
	none      bool
	// on: a request can have a deadline at all (headers to read, or a
	// default budget).
	on bool
}

func compileDeadlines(cfg config.Deadlines, classes []config.Class) deadlines {
	d := deadlines{def: cfg.Default.D(), none: cfg.Propagate == "none"}
	for _, h := range cfg.From {
		d.from = append(d.from, newBudgetHeader(h))
	}
	if cfg.Propagate != "" && !d.none {
		d.propagate = newBudgetHeader(cfg.Propagate)
	}
	d.on = len(d.from) > 0 || d.def > 0
	for _, c := range classes {
		d.byClass = append(d.byClass, c.Deadline.D())
		d.on = d.on || c.Deadline > 0
	}
	return d
}

// waitCtx is the context a request's waits run under: the caller's, or,
// with a deadline (latest, the latest start that can finish), one derived
// from it that ends then. It is derived only when a wait begins: deriving
// from a face's context starts that context's watch of the client (the
// fast engine's: a goroutine and a peek at the socket), which a request
// that never waits should not pay for.
type waitCtx struct {
	parent context.Context
	latest time.Time // zero: no deadline
	ctx    context.Context
	cancel context.CancelFunc
}

// get returns the context to wait under.
func (w *waitCtx) get() context.Context {
	if w.latest.IsZero() {
		return w.parent
	}
	if w.ctx == nil {
		w.ctx, w.cancel = context.WithDeadline(w.parent, w.latest)
	}
	return w.ctx
}

// stop releases a derived context.
func (w *waitCtx) stop() {
	if w.cancel != nil {
		w.cancel()
	}
}

// budget returns req's budget: the tightest its headers (and
// Request.Deadline) carry, else its class's default, else the default.
// present has bit i set for each header from[i] the request carried a
// budget in (none for a default); ok is false without a budget. A value
// that cannot be read is counted in bad and ignored.
func (d *deadlines) budget(req *Request, class int, bad func()) (b time.Duration, present uint8, ok bool) {
	if req.Header != nil {
		for i, h := range d.from {
			v := req.Header.Get(h.name)
			if v == "" {
				continue
			}
			got, good := parseBudget(h.format, v)
			if !good {
				bad()
				continue
			}
			present |= 1 << i
			if !ok || got < b {
				b, ok = got, true
			}
		}
	}
	if !req.Deadline.IsZero() {
		if got := time.Until(req.Deadline); !ok || got < b {
			b, ok = got, true
		}
	}
	if ok {
		return b, present, true
	}
	if class >= 0 && class < len(d.byClass) && d.byClass[class] > 0 {
		return d.byClass[class], 0, true
	}
	return d.def, 0, d.def > 0
}

// eachHeader calls f with each header that carries the remaining budget
// upstream: propagate when set, else every header of from the request
// carried a budget in (present), so that none reaches the service with
// more time than is left.
func (d *deadlines) eachHeader(present uint8, f func(budgetHeader)) {
	switch {
	case d.none:
	case d.propagate.name != "":
		f(d.propagate)
	default:
		for i, h := range d.from {
			if present&(1<<i) != 0 {
				f(h)
			}
		}
	}
}

// parseBudget reads a budget in format f; ok is false for a value that is
// not one (negative, malformed, or out of the format's range).
func parseBudget(f budgetFormat, v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	switch f {
	case formatGRPC:
		// TimeoutValue: 1 to 8 ASCII digits; TimeoutUnit: one letter.
		if len(v) < 2 || len(v) > 9 {
			return 0, false
		}
		n, err := strconv.ParseUint(v[:len(v)-1], 10, 64)
		if err != nil || v[0] == '+' {
			return 0, false
		}
		var unit time.Duration
		switch v[len(v)-1] {
		case 'H':
			unit = time.Hour
		case 'M':
			unit = time.Minute
		case 'S':
			unit = time.Second
		case 'm':
			unit = time.Millisecond
		case 'u':
			unit = time.Microsecond
		case 'n':
			unit = time.Nanosecond
		default:
			return 0, false
		}
		return clampBudget(float64(n) * float64(unit)), true
	case formatMillis:
		if v == "" || v[0] == '+' || v[0] == '-' {
			return 0, false
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, false
		}
		return clampBudget(float64(n) * float64(time.Millisecond)), true
	}
	if v == "" || v[0] == '-' || v[0] == '+' {
		return 0, false
	}
	if last := v[len(v)-1]; last >= '0' && last <= '9' || last == '.' {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(s) || math.IsInf(s, 0) {
			return 0, false
		}
		return clampBudget(s * float64(time.Second)), true
	}
	dur, err := time.ParseDuration(v)
	if err != nil || dur < 0 {
		return 0, false
	}
	return min(dur, maxBudget), true
}

func clampBudget(ns float64) time.Duration {
	if ns >= float64(maxBudget) {
		return maxBudget
	}
	return time.Duration(ns)
}

// appendBudget writes b in format f, as parseBudget reads it: whole
// milliseconds, rounded down (a budget is never stretched), at least 0.
func appendBudget(dst []byte, f budgetFormat, b time.Duration) []byte {
	ms := max(b/time.Millisecond, 0)
	switch f {
	case formatGRPC:
		// At most 8 digits: milliseconds up to about 27 hours, else seconds.
		if ms < 1e8 {
			return append(strconv.AppendInt(dst, int64(ms), 10), 'm')
		}
		return append(strconv.AppendInt(dst, min(int64(b/time.Second), 99999999), 10), 'S')
	case formatMillis:
		return strconv.AppendInt(dst, int64(ms), 10)
	}
	return strconv.AppendFloat(dst, float64(ms)/1000, 'f', -1, 64)
}

// Deadline returns when the request's client gives up, if it said so (or
// a default gave it one).
func (v *Verdict) Deadline() (time.Time, bool) { return v.deadline, !v.deadline.IsZero() }

// EachDeadlineHeader calls f with each header, and its value now, that
// carries the request's remaining budget upstream (deadlines.propagate; by
// default every deadline header the request came with, rewritten): none
// when the request has no deadline or nothing is to be passed on.
func (v *Verdict) EachDeadlineHeader(f func(name, value string)) {
	if v.deadline.IsZero() || v.rs == nil {
		return
	}
	left := time.Until(v.deadline)
	v.rs.deadlines.eachHeader(v.deadlineFrom, func(h budgetHeader) {
		var buf [24]byte
		f(h.name, string(appendBudget(buf[:0], h.format, left)))
	})
}
