package loadtest

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Summary is what a run measured: the body of summary.json.
type Summary struct {
	// Target is the first target's URL (and how many more there were).
	Target  string  `json:"target"`
	Profile string  `json:"profile"`
	Rate    float64 `json:"rate"`
	// DurationS is the length of the schedule, in seconds.
	DurationS float64 `json:"duration_s"`
	// Requests is how many were sent; OK how many answered 2xx or 3xx.
	Requests int `json:"requests"`
	OK       int `json:"ok"`
	// Status counts responses by status code ("200", "429", ...).
	Status map[string]int `json:"status"`
	// Errors are requests without a response: timeouts, refused or reset
	// connections. ErrorKinds breaks them down; FirstError is one message.
	Errors     int            `json:"errors"`
	ErrorKinds map[string]int `json:"error_kinds,omitempty"`
	FirstError string         `json:"first_error,omitempty"`
	// OfferedRPS is Requests per second of schedule; GoodputRPS is OK per
	// second.
	OfferedRPS float64 `json:"offered_rps"`
	GoodputRPS float64 `json:"goodput_rps"`
	// Latency is of every request that got a response or timed out,
	// OKLatency of the successful ones; both measured from the time the
	// schedule said the request was due, not from when it was sent.
	Latency   Percentiles `json:"latency_ms"`
	OKLatency Percentiles `json:"ok_latency_ms"`
	// Seconds is the per-second series, by the second a request was due.
	Seconds []Second `json:"seconds"`
	// Admin is the sluice admin port sampled once a second (when -admin).
	Admin []AdminSample `json:"admin,omitempty"`
}

// Percentiles of a latency distribution, in milliseconds.
type Percentiles struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

// Second is one second of a run.
type Second struct {
	T int `json:"t"`
	// Offered were due in this second; OK answered 2xx/3xx; Rejected 429;
	// Shed 503; Other any other status; Errors no response.
	Offered  int `json:"offered"`
	OK       int `json:"ok"`
	Rejected int `json:"rejected_429"`
	Shed     int `json:"shed_503"`
	Other    int `json:"other_status"`
	Errors   int `json:"errors"`
	// P50, P90, P99 of the successful requests due in this second, ms.
	P50 float64 `json:"p50_ms"`
	P90 float64 `json:"p90_ms"`
	P99 float64 `json:"p99_ms"`
}

// AdminSample is one reading of a sluice admin port.
type AdminSample struct {
	T        float64 `json:"t"`
	Limit    int     `json:"limit"`
	Inflight int     `json:"inflight"`
	Queue    int     `json:"queue"`
}

// Histogram bounds: 1 µs to 10 minutes, in microseconds.
const (
	histMin = 1
	histMax = int64(10 * time.Minute / time.Microsecond)
)

func newHist(digits int) *hdrhistogram.Histogram { return hdrhistogram.New(histMin, histMax, digits) }

func record(h *hdrhistogram.Histogram, d time.Duration) {
	_ = h.RecordValue(min(histMax, max(histMin, d.Microseconds()))) // clamped: cannot fail
}

func ms(us int64) float64 { return float64(us) / 1000 }

func percentiles(h *hdrhistogram.Histogram) Percentiles {
	if h.TotalCount() == 0 {
		return Percentiles{}
	}
	return Percentiles{
		Mean: h.Mean() / 1000,
		P50:  ms(h.ValueAtQuantile(50)),
		P90:  ms(h.ValueAtQuantile(90)),
		P99:  ms(h.ValueAtQuantile(99)),
		P999: ms(h.ValueAtQuantile(99.9)),
		Max:  ms(h.Max()),
	}
}

// Rejected is how many requests were refused with 429 or 503.
func (s *Summary) Rejected() int { return s.Status["429"] + s.Status["503"] }

// FailedStatus reports a status that is neither a success nor a
// throttling answer (429, 503).
func FailedStatus(code int) bool { return code >= 400 && code != 429 && code != 503 }

// CountStatus counts the responses whose status satisfies pred.
func (s *Summary) CountStatus(pred func(code int) bool) int {
	n := 0
	for code, k := range s.Status {
		if c, err := strconv.Atoi(code); err == nil && pred(c) {
			n += k
		}
	}
	return n
}

// ErrorRate is the fraction of requests that got no response or a failed
// status (see FailedStatus).
func (s *Summary) ErrorRate() float64 {
	if s.Requests == 0 {
		return 0
	}
	return float64(s.Errors+s.CountStatus(FailedStatus)) / float64(s.Requests)
}

// WriteText prints the end-of-run summary.
func (s *Summary) WriteText(w io.Writer) {
	fmt.Fprintf(w, "target     %s\n", s.Target)
	fmt.Fprintf(w, "schedule   %s at %g/s for %gs: %d requests (%.1f/s offered)\n", s.Profile, s.Rate, s.DurationS, s.Requests, s.OfferedRPS)
	fmt.Fprintf(w, "goodput    %.1f/s (%d ok, %.1f%%)\n", s.GoodputRPS, s.OK, pct(s.OK, s.Requests))
	codes := make([]string, 0, len(s.Status))
	for c := range s.Status {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	fmt.Fprintf(w, "status    ")
	for _, c := range codes {
		fmt.Fprintf(w, " %s:%d", c, s.Status[c])
	}
	fmt.Fprintf(w, "  errors:%d\n", s.Errors)
	if s.Errors > 0 {
		fmt.Fprintf(w, "errors     %v (first: %s)\n", s.ErrorKinds, s.FirstError)
	}
	l := s.OKLatency
	fmt.Fprintf(w, "latency ok mean %s  p50 %s  p90 %s  p99 %s  p99.9 %s  max %s (from the scheduled send time)\n",
		fmtMS(l.Mean), fmtMS(l.P50), fmtMS(l.P90), fmtMS(l.P99), fmtMS(l.P999), fmtMS(l.Max))
	l = s.Latency
	fmt.Fprintf(w, "latency all mean %s  p50 %s  p90 %s  p99 %s  max %s\n", fmtMS(l.Mean), fmtMS(l.P50), fmtMS(l.P90), fmtMS(l.P99), fmtMS(l.Max))
	if n := len(s.Admin); n > 0 {
		lo, hi, q := s.Admin[0].Limit, s.Admin[0].Limit, 0
		for _, a := range s.Admin {
			lo, hi, q = min(lo, a.Limit), max(hi, a.Limit), max(q, a.Queue)
		}
		fmt.Fprintf(w, "sluice     adaptive limit %d..%d (last %d), longest queue %d, %d samples\n", lo, hi, s.Admin[n-1].Limit, q, n)
	}
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func fmtMS(v float64) string {
	return (time.Duration(v * float64(time.Millisecond))).Round(10 * time.Microsecond).String()
}
