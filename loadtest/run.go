// Package loadtest drives open-loop HTTP load at a target and measures what
// comes back: `sluice loadtest`. Requests leave on a fixed schedule (a
// Profile) that does not slow down when the target does, and each latency
// is measured from the time the schedule said the request was due, so a
// slow target shows as queueing delay instead of being hidden by fewer
// requests (no coordinated omission). github.com/tsenart/vegeta/v12 sends
// the requests; HdrHistogram holds the latencies.
package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Options configure a run.
type Options struct {
	// Targets are the requests, sent in turn.
	Targets []vegeta.Target
	// Profile shapes the arrival rate over Duration.
	Profile  Profile
	Duration time.Duration
	// Timeout bounds each request; default 30s.
	Timeout time.Duration
	// Wrap, when set, wraps the transport the requests go through (a
	// client that retries, or clientlimit's): what it does inside one
	// request (retries, a local refusal) counts as that request's result.
	Wrap func(http.RoundTripper) http.RoundTripper
	// MaxWorkers bounds the requests in flight; 0: as many as the schedule
	// needs (true open loop).
	MaxWorkers uint64
	// Admin is a sluice admin address (host:port) to sample each second.
	Admin string
	// Progress receives a progress line each second (nil: none); Live
	// rewrites one line (for a terminal) instead of printing new ones.
	Progress io.Writer
	Live     bool
}

// Run sends the schedule's requests and returns what it measured. It stops
// early, with what it has, when ctx ends.
func Run(ctx context.Context, o Options) (*Summary, error) {
	if len(o.Targets) == 0 {
		return nil, errors.New("no targets")
	}
	if err := o.Profile.Validate(o.Duration); err != nil {
		return nil, err
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sched := newSchedule(o.Profile, o.Duration)
	rec := newRecorder(sched)
	var base http.RoundTripper = &http.Transport{
		DialContext:         (&net.Dialer{Timeout: o.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 10000,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	if o.Wrap != nil {
		base = o.Wrap(base)
	}
	client := &http.Client{
		Timeout:       o.Timeout,
		Transport:     ctxTransport{ctx: ctx, next: base},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	defer client.CloseIdleConnections() // through ctxTransport: the base's, below
	defer func() {
		if c, ok := base.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
	}()
	opts := []func(*vegeta.Attacker){vegeta.Client(client), vegeta.MaxBody(0)}
	if o.MaxWorkers > 0 {
		opts = append(opts, vegeta.Workers(min(o.MaxWorkers, vegeta.DefaultWorkers)), vegeta.MaxWorkers(o.MaxWorkers))
	}
	atk := vegeta.NewAttacker(opts...)
	// Set before any goroutine that reads it starts.
	rec.began = time.Now()
	var wg sync.WaitGroup
	if o.Admin != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sampleAdmin(ctx, o.Admin, rec.began, func(a AdminSample) {
				rec.mu.Lock()
				rec.admin = append(rec.admin, a)
				rec.mu.Unlock()
			})
		}()
	}
	if o.Progress != nil {
		wg.Add(1)
		go func() { defer wg.Done(); rec.progress(ctx, o.Progress, o.Live) }()
	}
	go func() {
		<-ctx.Done()
		atk.Stop()
	}()
	// No duration for vegeta: the schedule stops after its last request,
	// so requests that fell behind (with -max-workers) are still sent.
	for res := range atk.Attack(vegeta.NewStaticTargeter(o.Targets...), sched, 0, "sluice") {
		rec.add(res)
	}
	cancel()
	wg.Wait()
	if o.Progress != nil && o.Live {
		fmt.Fprintln(o.Progress)
	}
	s := rec.summary()
	s.Target = o.Targets[0].URL
	if len(o.Targets) > 1 {
		s.Target += fmt.Sprintf(" (+%d more)", len(o.Targets)-1)
	}
	return s, nil
}

// ctxTransport ties every request to the run's context, so that stopping a
// run also abandons the requests in flight.
type ctxTransport struct {
	ctx  context.Context
	next http.RoundTripper
}

func (t ctxTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return t.next.RoundTrip(r.WithContext(t.ctx))
}

// recorder accumulates results by the second they were due.
type recorder struct {
	sched *schedule
	began time.Time

	mu       sync.Mutex
	secs     []second
	all, ok  *hdrhistogram.Histogram
	recent   *hdrhistogram.Histogram // ok latencies since the last progress line
	status   map[int]int
	errs     map[string]int
	firstErr string
	sent     int
	nOK      int
	nErr     int
	admin    []AdminSample
}

type second struct {
	Second
	hist *hdrhistogram.Histogram
}

func newRecorder(s *schedule) *recorder {
	n := int((s.duration + time.Second - 1) / time.Second)
	r := &recorder{sched: s, secs: make([]second, n), all: newHist(3), ok: newHist(3), recent: newHist(2),
		status: map[int]int{}, errs: map[string]int{}}
	for i := range r.secs {
		r.secs[i].T = i
	}
	return r
}

// add records one result. Its latency runs from when the schedule said it
// was due to when its response ended.
func (r *recorder) add(res *vegeta.Result) {
	due, _ := r.sched.due(res.Seq)
	lat := res.End().Sub(r.began.Add(due))
	lat = max(lat, res.Latency)
	r.mu.Lock()
	defer r.mu.Unlock()
	i := min(int(due/time.Second), len(r.secs)-1)
	s := &r.secs[i]
	s.Offered++
	r.sent++
	code := int(res.Code)
	switch {
	case code == 0:
		s.Errors++
		r.nErr++
		kind := errorKind(res.Error)
		r.errs[kind]++
		if r.firstErr == "" {
			r.firstErr = res.Error
		}
		if kind == "timeout" {
			record(r.all, lat)
		}
		return
	case code < 400:
		s.OK++
		r.nOK++
		if s.hist == nil {
			s.hist = newHist(2)
		}
		record(s.hist, lat)
		record(r.ok, lat)
		record(r.recent, lat)
	case code == 429:
		s.Rejected++
	case code == 503:
		s.Shed++
	default:
		s.Other++
	}
	r.status[code]++
	record(r.all, lat)
}

func errorKind(msg string) string {
	switch {
	case strings.Contains(msg, "Client.Timeout") || strings.Contains(msg, "deadline exceeded") || strings.Contains(msg, "timeout"):
		return "timeout"
	case strings.Contains(msg, "connection refused"):
		return "connection refused"
	case strings.Contains(msg, "connection reset") || strings.Contains(msg, "EOF"):
		return "connection reset"
	case strings.Contains(msg, "context canceled"):
		return "cancelled"
	default:
		return "other"
	}
}

func (r *recorder) summary() *Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.sched.profile
	s := &Summary{
		Profile: p.Kind, Rate: p.Rate, DurationS: r.sched.duration.Seconds(),
		Requests: r.sent, OK: r.nOK, Errors: r.nErr, FirstError: r.firstErr,
		Status: map[string]int{}, Latency: percentiles(r.all), OKLatency: percentiles(r.ok),
		Admin: r.admin,
	}
	for c, n := range r.status {
		s.Status[strconv.Itoa(c)] = n
	}
	if len(r.errs) > 0 {
		s.ErrorKinds = r.errs
	}
	if d := s.DurationS; d > 0 {
		s.OfferedRPS = float64(s.Requests) / d
		s.GoodputRPS = float64(s.OK) / d
	}
	s.Seconds = make([]Second, len(r.secs))
	for i, x := range r.secs {
		s.Seconds[i] = x.Second
		if x.hist != nil {
			s.Seconds[i].P50 = ms(x.hist.ValueAtQuantile(50))
			s.Seconds[i].P90 = ms(x.hist.ValueAtQuantile(90))
			s.Seconds[i].P99 = ms(x.hist.ValueAtQuantile(99))
		}
	}
	return s
}

// progress writes a line a second until ctx ends.
func (r *recorder) progress(ctx context.Context, w io.Writer, live bool) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.mu.Lock()
		line := fmt.Sprintf("[%4.0fs] sent %d  ok %d  429 %d  503 %d  errors %d  p99 %s",
			time.Since(r.began).Seconds(), r.sent, r.nOK, r.status[429], r.status[503], r.nErr+r.otherStatus(),
			fmtMS(ms(r.recent.ValueAtQuantile(99))))
		if n := len(r.admin); n > 0 {
			a := r.admin[n-1]
			line += fmt.Sprintf("  limit %d  inflight %d  queue %d", a.Limit, a.Inflight, a.Queue)
		}
		r.recent.Reset()
		r.mu.Unlock()
		if live {
			fmt.Fprintf(w, "\r%s\x1b[K", line)
		} else {
			fmt.Fprintln(w, line)
		}
	}
}

func (r *recorder) otherStatus() int {
	n := 0
	for c, k := range r.status {
		if FailedStatus(c) {
			n += k
		}
	}
	return n
}

// sampleAdmin reads a sluice admin port's /v1/state once a second until
// ctx ends, handing each reading, timed from began, to add.
func sampleAdmin(ctx context.Context, addr string, began time.Time, add func(AdminSample)) {
	url := "http://" + strings.TrimPrefix(addr, "http://") + "/v1/state"
	client := &http.Client{Timeout: 500 * time.Millisecond}
	defer client.CloseIdleConnections()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if sample, err := readAdmin(ctx, client, url); err == nil { // a missed sample is a gap in the chart
			sample.T = time.Since(began).Seconds()
			add(sample)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func readAdmin(ctx context.Context, c *http.Client, url string) (AdminSample, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return AdminSample{}, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return AdminSample{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return AdminSample{}, fmt.Errorf("%s: %s", url, resp.Status)
	}
	var st struct {
		Adaptive struct {
			Limit    int `json:"limit"`
			Inflight int `json:"inflight"`
		} `json:"adaptive"`
		Queue struct {
			Length int `json:"length"`
		} `json:"queue"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&st); err != nil {
		return AdminSample{}, fmt.Errorf("%s: %w", url, err)
	}
	return AdminSample{Limit: st.Adaptive.Limit, Inflight: st.Adaptive.Inflight, Queue: st.Queue.Length}, nil
}
