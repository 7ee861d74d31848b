package loadtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// ClosedOptions configure a closed-loop run: Clients connections, each
// sending its next request as soon as the last one is answered (wrk's and
// hey's model, most benchmarks'), for Duration; the requests sent are then
// answered (each within Timeout) before the run ends.
type ClosedOptions struct {
	Target   vegeta.Target
	Clients  int
	Duration time.Duration
	// Timeout bounds each request (default 10s).
	Timeout time.Duration
	// Admin is a sluice admin address (host:port) to sample each second;
	// "": none.
	Admin string
}

// ClosedSummary is what a closed-loop run saw.
type ClosedSummary struct {
	Clients int `json:"clients"`
	// OK counts 2xx answers; Refused 429 and 503 (a limiter's answers);
	// Failed everything else (other statuses, transport errors).
	OK      int `json:"ok"`
	Refused int `json:"refused"`
	Failed  int `json:"failed"`
	// Sending is how long the clients sent (Duration, or less if the run
	// was stopped); Elapsed how long the run took: that, then the answers
	// to what was sent. GoodputRPS is OK per second of sending.
	Sending    time.Duration `json:"sending_ns"`
	Elapsed    time.Duration `json:"elapsed_ns"`
	GoodputRPS float64       `json:"goodput_rps"`
	// OKLatency is of the 2xx answers.
	OKLatency Percentiles `json:"ok_latency_ms"`
	// Seconds is the per-second series, by the second a request was sent:
	// Offered counts the requests sent in it.
	Seconds []Second `json:"seconds"`
	// Admin is the sluice admin port sampled once a second (ClosedOptions.Admin).
	Admin []AdminSample `json:"admin,omitempty"`
}

// Summary returns s in the open-loop runs' form (their reports and scores
// read it): Requests are the requests sent, Status counts 200 for the 2xx
// answers, 503 for the refusals and 500 for the failures.
func (s ClosedSummary) Summary() *Summary {
	n := s.OK + s.Refused + s.Failed
	out := &Summary{Target: "closed loop", Profile: fmt.Sprintf("closed loop of %d clients", s.Clients),
		DurationS: s.Sending.Seconds(), Requests: n, OK: s.OK,
		Status:     map[string]int{"200": s.OK, "503": s.Refused, "500": s.Failed},
		GoodputRPS: s.GoodputRPS, OKLatency: s.OKLatency, Latency: s.OKLatency, Seconds: s.Seconds, Admin: s.Admin}
	if sec := s.Sending.Seconds(); sec > 0 {
		out.OfferedRPS = float64(n) / sec
	}
	return out
}

// closedSeconds is a closed loop's per-second series as it runs.
type closedSeconds struct {
	start time.Time
	mu    sync.Mutex
	secs  []Second
	hists []*hdrhistogram.Histogram
	all   *hdrhistogram.Histogram
}

func newClosedSeconds(start time.Time, d time.Duration) *closedSeconds {
	n := int((d + time.Second - 1) / time.Second)
	c := &closedSeconds{start: start, secs: make([]Second, n), hists: make([]*hdrhistogram.Histogram, n), all: newHist(3)}
	for i := range c.secs {
		c.secs[i].T = i
		c.hists[i] = newHist(2)
	}
	return c
}

// add counts a request sent at sent, answered with status code (0: no
// answer) after lat.
func (c *closedSeconds) add(sent time.Time, code int, lat time.Duration) {
	i := min(len(c.secs)-1, max(0, int(sent.Sub(c.start)/time.Second)))
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &c.secs[i]
	s.Offered++
	switch {
	case code == 0:
		s.Errors++
	case code >= 200 && code < 300:
		s.OK++
		record(c.hists[i], lat)
		record(c.all, lat)
	case code == http.StatusTooManyRequests:
		s.Rejected++
	case code == http.StatusServiceUnavailable:
		s.Shed++
	default:
		s.Other++
	}
}

func (c *closedSeconds) done() (Percentiles, []Second) {
	for i := range c.secs {
		p := percentiles(c.hists[i])
		c.secs[i].P50, c.secs[i].P90, c.secs[i].P99 = p.P50, p.P90, p.P99
	}
	return percentiles(c.all), c.secs
}

// RunClosed runs a closed loop. It is hand-written (a loop per client over
// one http.Client) because vegeta, which drives the open-loop runs, only
// paces by rate.
func RunClosed(ctx context.Context, o ClosedOptions) (ClosedSummary, error) {
	if o.Clients <= 0 || o.Duration <= 0 {
		return ClosedSummary{}, errors.New("loadtest: a closed loop needs clients and a duration")
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: o.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: o.Clients, MaxConnsPerHost: o.Clients,
		IdleConnTimeout: 90 * time.Second, DisableCompression: true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Timeout: o.Timeout, Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	// Clients send for Duration, and the requests they sent are then
	// answered (each within Timeout), as each second of the series counts
	// the requests sent in it: cancelled at the end, the last second would
	// lose the answers still to come, and more of them the longer they
	// wait (a limiter's queue against a service that fails fast: a fourth
	// of the scored seconds of a 5 s run).
	sending, stop := context.WithTimeout(ctx, o.Duration)
	defer stop()
	var ok, refused, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	secs := newClosedSeconds(start, o.Duration)
	var admin []AdminSample // appended by the sampler alone, read after wg.Wait
	if o.Admin != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sampleAdmin(sending, o.Admin, start, func(a AdminSample) { admin = append(admin, a) })
		}()
	}
	for range o.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sending.Err() == nil {
				req, err := http.NewRequestWithContext(ctx, o.Target.Method, o.Target.URL, bytes.NewReader(o.Target.Body))
				if err != nil {
					failed.Add(1)
					return
				}
				req.Header = o.Target.Header.Clone()
				sent := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						failed.Add(1)
						secs.add(sent, 0, 0)
						time.Sleep(time.Millisecond) // a refused connection must not spin
					}
					continue
				}
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
				resp.Body.Close()
				secs.add(sent, resp.StatusCode, time.Since(sent))
				switch {
				case resp.StatusCode >= 200 && resp.StatusCode < 300:
					ok.Add(1)
				case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
					refused.Add(1)
				default:
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	// The clients sent for Duration, or until ctx ended (which ends the
	// requests too: the run ends with it) or every client gave up.
	elapsed := time.Since(start)
	s := ClosedSummary{Clients: o.Clients, OK: int(ok.Load()), Refused: int(refused.Load()), Failed: int(failed.Load()),
		Sending: min(elapsed, o.Duration), Elapsed: elapsed, Admin: admin}
	// Per second of sending: the answers after it were sent within it.
	s.GoodputRPS = float64(s.OK) / max(s.Sending, time.Millisecond).Seconds()
	s.OKLatency, s.Seconds = secs.done()
	return s, nil
}
