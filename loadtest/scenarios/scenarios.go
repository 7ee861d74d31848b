// Package scenarios is the acceptance suite of sluice's adaptive limit, over
// real HTTP: `sluice loadtest scenarios`. It starts the simulated backend
// (loadtest/backend) on a loopback port, puts each contender in front of it
// (nothing; a static concurrency cap at the backend's true slots; sluice
// with each adaptive algorithm at its defaults), drives each scenario's
// open-loop load through it while the backend changes as the scenario says
// (overload, capacity or service time changing, a heavy tail, a hang, a
// flash crowd, a fast idle service, clients sending malformed bodies), and
// scores every run against the scenario's goal: goodput as a share of the
// backend's capacity, p99 of successes, rejections, seconds to recover.
//
// The contenders run as separate processes of the real binary (a Starter
// given by the caller), so that what is measured is what users run.
package scenarios

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"gopkg.in/yaml.v3"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/sluicehq/sluice/loadtest"
	"github.com/sluicehq/sluice/loadtest/backend"
)

// The backend every scenario starts from: 10 slots, 20 ms lognormal service
// (sigma 0.25), 10% slower per waiting request per slot: 500 requests/s.
const (
	baseSlots   = 10
	baseService = 20 * time.Millisecond
)

func baseModel() backend.Model {
	return backend.Model{Slots: baseSlots, ServiceTime: baseService, Sigma: 0.25, Degrade: 0.1}
}

// capacity is m's requests per second (0 while hung).
func capacity(m backend.Model) float64 {
	if m.Hung || m.ServiceTime <= 0 {
		return 0
	}
	return float64(m.Slots) / m.MeanService().Seconds()
}

// Event changes the backend at a time into the scenario.
type Event struct {
	At     time.Duration
	Change func(*backend.Model)
}

// Scenario is one situation and its goal.
type Scenario struct {
	Name string
	// Goal says, in words, what a contender must achieve.
	Goal     string
	Duration time.Duration
	// Model is the backend at the start; Events change it.
	Model  backend.Model
	Events []Event
	// Load is the arrival rate at t, as a multiple of the starting
	// capacity.
	Load func(t time.Duration) float64
	// Clients, when > 0, replaces Load with a closed loop: that many
	// connections, each sending its next request as soon as the last is
	// answered (wrk's and hey's model). Such a scenario is also run with
	// the Unlimited contender, whose goodput its Score reads as
	// Run.Reference.
	Clients int
	// Faulty, when > 0, is a rate (per second) of extra clients that send a
	// malformed chunked body.
	Faulty float64
	// Streams, when set, replace Load: several kinds of clients (priority
	// classes, tenants), each with its own headers and rate, sent at once.
	Streams []Stream
	// Config is YAML merged into every sluice contender's configuration
	// (classes, fairness, rules the scenario is about).
	Config string
	// Score judges a run.
	Score func(r *Run) Verdict
}

// Stream is one kind of client in a scenario with several.
type Stream struct {
	Name string
	// Header is sent with every request of the stream.
	Header http.Header
	// Load is the stream's arrival rate at t, as a multiple of the
	// starting capacity.
	Load func(t time.Duration) float64
	// Client, when set, makes the stream's clients' transport from the
	// base one, afresh for each run (clients that retry, or that back
	// off: clientlimit).
	Client func(base http.RoundTripper) http.RoundTripper
}

// Verdict is a run's score against its scenario's goal.
type Verdict struct {
	Met bool
	// Figure is the measured value the goal is about, in words.
	Figure string
}

// Run is what one contender did in one scenario.
type Run struct {
	Scenario  string
	Goal      string
	Contender string
	Summary   *loadtest.Summary
	// Capacity is the backend's capacity in each second (requests/s).
	Capacity []float64
	// Arrived is how many requests reached the backend in each second.
	Arrived []int64
	// RefP99 is the backend's own p99 at half load, ms (the yardstick of
	// the overload goals).
	RefP99 float64
	// Reference is, for a closed-loop scenario, the goodput per second
	// (seconds 1 to the end) of the same cell through the Unlimited
	// contender: what the proxy serves without an adaptive limit.
	Reference float64
	Verdict   Verdict
	// Streams are the streams' own summaries, in the scenario's order
	// (Summary adds them up).
	Streams []StreamRun `json:",omitempty"`
}

// StreamRun is what one stream of a run got.
type StreamRun struct {
	Name    string
	Summary *loadtest.Summary
}

// Stream returns the summary of the stream named name, or nil.
func (r *Run) Stream(name string) *loadtest.Summary {
	for _, s := range r.Streams {
		if s.Name == name {
			return s.Summary
		}
	}
	return nil
}

// Good is the goodput of second i: requests answered 2xx within the
// client's timeout.
func (r *Run) Good(i int) float64 {
	if i < 0 || i >= len(r.Summary.Seconds) {
		return 0
	}
	return float64(r.Summary.Seconds[i].OK)
}

// Goodput is the mean goodput per second over seconds [from, to).
func (r *Run) Goodput(from, to int) float64 {
	good, n := 0.0, 0
	for i := max(0, from); i < to && i < len(r.Summary.Seconds); i++ {
		good += r.Good(i)
		n++
	}
	if n == 0 {
		return 0
	}
	return good / float64(n)
}

// Share is goodput over capacity in seconds [from, to).
func (r *Run) Share(from, to int) float64 {
	good, capSum := 0.0, 0.0
	for i := from; i < to && i < len(r.Capacity); i++ {
		good += r.Good(i)
		capSum += r.Capacity[i]
	}
	if capSum == 0 {
		return 0
	}
	return good / capSum
}

// Wasted is the share of the requests that reached the service in seconds
// [from, to) whose answers were no goodput (too late for their client, or
// failed): work spent for no one.
func (r *Run) Wasted(from, to int) float64 {
	var arrived int64
	good := 0.0
	for i := from; i < to && i < len(r.Arrived); i++ {
		arrived += r.Arrived[i]
		good += r.Good(i)
	}
	if arrived == 0 {
		return 0
	}
	return max(0, 1-good/float64(arrived))
}

// Refused counts 429 and 503 answers in seconds [from, to).
func (r *Run) Refused(from, to int) int {
	n := 0
	for i := from; i < to && i < len(r.Summary.Seconds); i++ {
		n += r.Summary.Seconds[i].Rejected + r.Summary.Seconds[i].Shed
	}
	return n
}

// RefusedShare is the share of the requests due in seconds [from, to) that
// were refused.
func (r *Run) RefusedShare(from, to int) float64 {
	return float64(r.Refused(from, to)) / float64(max(1, r.Offered(from, to)))
}

// Offered counts requests due in seconds [from, to).
func (r *Run) Offered(from, to int) int {
	n := 0
	for i := from; i < to && i < len(r.Summary.Seconds); i++ {
		n += r.Summary.Seconds[i].Offered
	}
	return n
}

// Recovered returns the seconds after event from which goodput holds 90% of
// capacity until the end (over every two seconds: one second's count of a
// few hundred requests is too noisy to judge alone), or -1.
func (r *Run) Recovered(event int) int {
	end := min(len(r.Capacity), len(r.Summary.Seconds))
	for i := event; i < end; i++ {
		ok := true
		for j := i; j < end && ok; j += 2 {
			ok = r.Share(j, min(j+2, end)) >= 0.9
		}
		if ok {
			return i - event
		}
	}
	return -1
}

// Contender is what stands between the load and the backend.
type Contender struct {
	Name string
	// Config is the sluice configuration (YAML) it runs with; empty for
	// none (the load goes straight to the backend).
	Config string
}

// Unlimited is sluice with its adaptive limit off: the proxy's own cost
// and nothing refused, the yardstick of the closed-loop scenarios.
func Unlimited() Contender {
	return Contender{Name: "off", Config: "adaptive: {algorithm: \"off\"}\n"}
}

// Contenders returns the standard ones: none, a static cap at the true
// slots, sluice with each of its algorithms at their defaults, and sluice
// running each go-concurrency-limits algorithm.
func Contenders() []Contender {
	cs := []Contender{
		{Name: "none"},
		{Name: "static-cap", Config: fmt.Sprintf("adaptive: {algorithm: fixed, initial_limit: %d, min_limit: %d, max_limit: %d}\n", baseSlots, baseSlots, baseSlots)},
	}
	for _, alg := range []string{"gradient2", "vegas", "aimd", "gcl-gradient2", "gcl-vegas", "gcl-gradient", "gcl-aimd"} {
		cs = append(cs, Contender{Name: alg, Config: "adaptive: {algorithm: " + alg + "}\n"})
	}
	return cs
}

// Starter starts sluice with config in front of upstream and returns its
// proxy and admin addresses and how to stop it.
type Starter func(ctx context.Context, config, upstream string) (proxy, admin string, stop func(), err error)

// Options configure a suite run.
type Options struct {
	// Scenarios and Contenders to run; default all.
	Scenarios  []Scenario
	Contenders []Contender
	// Start starts a sluice contender. Required when a contender has a
	// Config.
	Start Starter
	// Timeout is the client's timeout: a later answer is no goodput;
	// default 2 s.
	Timeout time.Duration
	// Progress receives a line per run (nil: none).
	Progress io.Writer
}

// RunAll runs every scenario with every contender, one after the other,
// and returns the runs in that order.
func RunAll(ctx context.Context, o Options) ([]*Run, error) {
	if o.Scenarios == nil {
		o.Scenarios = All()
	}
	if o.Contenders == nil {
		o.Contenders = Contenders()
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	ref, err := referenceP99(ctx, o.Timeout)
	if err != nil {
		return nil, fmt.Errorf("reference run: %w", err)
	}
	var runs []*Run
	for _, s := range o.Scenarios {
		// A closed loop is scored against the proxy without a limit, and
		// each is run closedRounds times, interleaved, the better run of
		// each counting (see closedRounds).
		rounds, reference := 1, 0.0
		if s.Clients > 0 {
			rounds = closedRounds
		}
		good := func(r *Run) float64 { return r.Goodput(1, len(r.Summary.Seconds)) }
		best := make([]*Run, len(o.Contenders))
		for range rounds {
			if s.Clients > 0 {
				r, err := runOne(ctx, s, Unlimited(), o)
				if err != nil {
					return runs, fmt.Errorf("%s with %s: %w", s.Name, Unlimited().Name, err)
				}
				reference = max(reference, good(r))
			}
			for i, c := range o.Contenders {
				if err := ctx.Err(); err != nil {
					return runs, err
				}
				r, err := runOne(ctx, s, c, o)
				if err != nil {
					return runs, fmt.Errorf("%s with %s: %w", s.Name, c.Name, err)
				}
				if best[i] == nil || good(r) > good(best[i]) {
					best[i] = r
				}
			}
		}
		for i, c := range o.Contenders {
			r := best[i]
			r.RefP99, r.Reference = ref, reference
			r.Verdict = s.Score(r)
			runs = append(runs, r)
			if o.Progress != nil {
				fmt.Fprintf(o.Progress, "%-18s %-12s %s %s\n", s.Name, c.Name, mark(r.Verdict.Met), r.Verdict.Figure)
			}
		}
	}
	return runs, nil
}

// closedRounds is how many times a closed-loop scenario runs, each
// contender after the proxy without a limit, the better run of each
// counting. A closed loop's goodput is what the machine gives its clients,
// and a machine shared with other work only ever gives less: in one round,
// a limit that never bound (16 clients under the initial 20, nothing
// refused) read 0.83 and 0.97 of the unlimited proxy in two sweeps.
const closedRounds = 2

func mark(ok bool) string {
	if ok {
		return "met   "
	}
	return "missed"
}

// referenceP99 measures the backend's own p99 at half load, ms.
func referenceP99(ctx context.Context, timeout time.Duration) (float64, error) {
	_, url, stop, err := serveBackend(baseModel())
	if err != nil {
		return 0, err
	}
	defer stop()
	sum, err := load(ctx, url, loadtest.Profile{Kind: "constant", Rate: capacity(baseModel()) / 2}, 4*time.Second, timeout, "", nil, nil)
	if err != nil {
		return 0, err
	}
	return sum.OKLatency.P99, nil
}

// serveBackend serves a backend with model m on a free loopback port.
func serveBackend(m backend.Model) (*backend.Backend, string, func(), error) {
	b, err := backend.New(m, 7)
	if err != nil {
		return nil, "", nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", nil, err
	}
	srv := &http.Server{Handler: b, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(l) }()
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
	}
	return b, "http://" + l.Addr().String(), stop, nil
}

// load drives the profile at url+"/work", with header on every request,
// through the transport client makes (nil: the plain one).
func load(ctx context.Context, url string, p loadtest.Profile, d, timeout time.Duration, admin string, header http.Header,
	client func(http.RoundTripper) http.RoundTripper) (*loadtest.Summary, error) {
	return loadtest.Run(ctx, loadtest.Options{
		Targets: []vegeta.Target{{Method: "GET", URL: url + "/work", Header: header}},
		Profile: p, Duration: d, Timeout: timeout, Admin: admin, Wrap: client,
		// Bounded so that 10x into a collapsed service (both ends of each
		// connection in this process when there is no sluice) stays within
		// the open-files limit; latency still counts from the due time.
		MaxWorkers: 5000,
	})
}

func runOne(ctx context.Context, s Scenario, c Contender, o Options) (*Run, error) {
	b, upstream, stopBackend, err := serveBackend(s.Model)
	if err != nil {
		return nil, err
	}
	defer stopBackend()
	target, admin := upstream, ""
	if c.Config != "" {
		if o.Start == nil {
			return nil, errors.New("no way to start sluice (Options.Start)")
		}
		config, err := mergeConfig(c.Config, s.Config)
		if err != nil {
			return nil, err
		}
		proxy, adm, stop, err := o.Start(ctx, config, upstream)
		if err != nil {
			return nil, err
		}
		defer stop()
		target, admin = "http://"+proxy, adm
	}
	seconds := int(s.Duration / time.Second)
	r := &Run{Scenario: s.Name, Goal: s.Goal, Contender: c.Name, Capacity: make([]float64, seconds), Arrived: make([]int64, seconds)}
	// The model's capacity in each second, from its events.
	for i := range r.Capacity {
		r.Capacity[i] = capacity(modelAt(s, time.Duration(i)*time.Second+time.Second/2))
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	wg.Add(1)
	go func() { // the scenario's events and the backend's arrivals per second
		defer wg.Done()
		events := s.sortedEvents()
		m := s.Model
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		lastSec, lastArrived := 0, int64(0)
		for {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
			}
			el := time.Since(start)
			for len(events) > 0 && events[0].At <= el {
				events[0].Change(&m)
				_ = b.SetModel(m)
				events = events[1:]
			}
			if sec := int(el / time.Second); sec > lastSec && lastSec < len(r.Arrived) {
				a := b.Stats().Arrived
				r.Arrived[lastSec] = a - lastArrived
				lastSec, lastArrived = sec, a
			}
		}
	}()
	if s.Faulty > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); sendFaulty(runCtx, strings.TrimPrefix(target, "http://"), s.Faulty) }()
	}
	var sum *loadtest.Summary
	switch {
	case s.Clients > 0:
		var cs loadtest.ClosedSummary
		cs, err = loadtest.RunClosed(ctx, loadtest.ClosedOptions{Target: vegeta.Target{Method: "GET", URL: target + "/work"},
			Clients: s.Clients, Duration: s.Duration, Timeout: o.Timeout, Admin: admin})
		sum = cs.Summary()
	case len(s.Streams) == 0:
		prof := loadtest.Profile{Kind: "function", Func: func(t time.Duration) float64 { return s.Load(t) * capacity(s.Model) }}
		sum, err = load(ctx, target, prof, s.Duration, o.Timeout, admin, nil, nil)
	default:
		r.Streams, err = loadStreams(ctx, s, target, o.Timeout)
		if err == nil {
			sum = mergeSummaries(r.Streams)
		}
	}
	cancel()
	wg.Wait()
	// Let the hung requests go before the server stops.
	m := s.Model
	m.Hung = false
	_ = b.SetModel(m)
	if err != nil {
		return nil, err
	}
	r.Summary = sum
	return r, nil
}

// loadStreams drives every stream of s at target at once.
func loadStreams(ctx context.Context, s Scenario, target string, timeout time.Duration) ([]StreamRun, error) {
	out := make([]StreamRun, len(s.Streams))
	errs := make([]error, len(s.Streams))
	var wg sync.WaitGroup
	for i, st := range s.Streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prof := loadtest.Profile{Kind: "function", Func: func(t time.Duration) float64 { return st.Load(t) * capacity(s.Model) }}
			sum, err := load(ctx, target, prof, s.Duration, timeout, "", st.Header, st.Client)
			out[i], errs[i] = StreamRun{Name: st.Name, Summary: sum}, err
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// mergeSummaries adds up the streams' counts, second by second; latency
// percentiles are the worst stream's (an upper bound of the whole's).
func mergeSummaries(streams []StreamRun) *loadtest.Summary {
	m := &loadtest.Summary{Target: "streams", Profile: "streams", Status: map[string]int{}}
	for _, st := range streams {
		s := st.Summary
		m.DurationS = max(m.DurationS, s.DurationS)
		m.Requests += s.Requests
		m.OK += s.OK
		m.Errors += s.Errors
		m.OfferedRPS += s.OfferedRPS
		m.GoodputRPS += s.GoodputRPS
		for k, v := range s.Status {
			m.Status[k] += v
		}
		m.Latency.P99 = max(m.Latency.P99, s.Latency.P99)
		m.OKLatency.P99 = max(m.OKLatency.P99, s.OKLatency.P99)
		m.OKLatency.Max = max(m.OKLatency.Max, s.OKLatency.Max)
		for i, sec := range s.Seconds {
			for len(m.Seconds) <= i {
				m.Seconds = append(m.Seconds, loadtest.Second{T: len(m.Seconds)})
			}
			d := &m.Seconds[i]
			d.Offered += sec.Offered
			d.OK += sec.OK
			d.Rejected += sec.Rejected
			d.Shed += sec.Shed
			d.Other += sec.Other
			d.Errors += sec.Errors
			d.P99 = max(d.P99, sec.P99)
		}
	}
	return m
}

// mergeConfig merges the YAML extra into the YAML base, maps key by key
// (extra wins on anything else), and returns the result as YAML.
func mergeConfig(base, extra string) (string, error) {
	if extra == "" {
		return base, nil
	}
	var b, e map[string]any
	if err := yaml.Unmarshal([]byte(base), &b); err != nil {
		return "", fmt.Errorf("contender configuration: %w", err)
	}
	if err := yaml.Unmarshal([]byte(extra), &e); err != nil {
		return "", fmt.Errorf("scenario configuration: %w", err)
	}
	out, err := yaml.Marshal(mergeMaps(b, e))
	return string(out), err
}

func mergeMaps(base, extra map[string]any) map[string]any {
	if base == nil {
		base = map[string]any{}
	}
	for k, v := range extra {
		bm, ok1 := base[k].(map[string]any)
		em, ok2 := v.(map[string]any)
		if ok1 && ok2 {
			base[k] = mergeMaps(bm, em)
		} else {
			base[k] = v
		}
	}
	return base
}

// sortedEvents returns a copy of the scenario's events in time order.
func (s Scenario) sortedEvents() []Event {
	events := append([]Event(nil), s.Events...)
	sort.Slice(events, func(i, j int) bool { return events[i].At < events[j].At })
	return events
}

// modelAt is the scenario's model at time t.
func modelAt(s Scenario, t time.Duration) backend.Model {
	m := s.Model
	for _, e := range s.sortedEvents() {
		if e.At <= t {
			e.Change(&m)
		}
	}
	return m
}

// sendFaulty sends malformed chunked requests at rate per second until ctx
// ends: clients at fault, which must not read as an overloaded service.
func sendFaulty(ctx context.Context, addr string, rate float64) {
	t := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			fmt.Fprintf(c, "POST /work HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nnot hex\r\n0\r\n\r\n")
			_, _ = http.ReadResponse(bufio.NewReader(c), nil)
		}()
	}
}

// Table formats runs as a Markdown table.
func Table(runs []*Run) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| scenario | contender | goal | goodput / capacity | p99 ok (ms) | refused | recovered after | met |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		s := r.Summary
		refused := 0
		for _, sec := range s.Seconds {
			refused += sec.Rejected + sec.Shed
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.0f%% | %.0f | %.1f%% | %s | %s |\n", r.Scenario, r.Contender, r.Goal,
			100*r.Share(0, len(r.Capacity)), s.OKLatency.P99, 100*float64(refused)/math.Max(1, float64(s.Requests)),
			r.Verdict.Figure, map[bool]string{true: "yes", false: "no"}[r.Verdict.Met])
	}
	return b.String()
}
