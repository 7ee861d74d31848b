// Package tune runs a tuning session (`sluice tune`): it ramps open-loop
// load against a service in steps, finds the knee of its latency-throughput
// curve (the highest rate whose p99 stays within the SLO and whose goodput
// keeps up with the offered rate), estimates the service's no-load latency
// and the concurrency it sustains (Little's law), recommends a sluice
// configuration from them, and verifies it: sluice in process in front of
// the service, driven at three times the knee.
package tune

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/loadtest"
	"github.com/sluicehq/sluice/sidecar/daemon"
)

// Options configure a session.
type Options struct {
	// Target is the service's URL (direct, not through sluice); Method and
	// Header shape the requests.
	Target string
	Method string
	Header http.Header
	// SLOP99 is the latency objective: p99 of successful requests.
	SLOP99 time.Duration
	// StartRate is the first step's rate (default 10/s); each step
	// multiplies it by Growth (default 1.5) up to MaxRate (default 100000).
	StartRate, Growth, MaxRate float64
	// Step is how long each step lasts (default 4s).
	Step time.Duration
	// Budget bounds the whole session, verification included (default
	// 110s). The ramp stops early when the budget would be exceeded.
	Budget time.Duration
	// Verify is how long the verification run lasts (default 10s); NoVerify
	// skips it.
	Verify   time.Duration
	NoVerify bool
	// Progress receives a line per step (nil: none).
	Progress io.Writer
}

func (o *Options) defaults() error {
	if o.Method == "" {
		o.Method = http.MethodGet
	}
	if o.SLOP99 <= 0 {
		return errors.New("-slo-p99: a positive latency objective is required (e.g. 200ms)")
	}
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.StartRate, 10)
	def(&o.Growth, 1.5)
	def(&o.MaxRate, 100000)
	switch {
	case !(o.StartRate > 0) || math.IsInf(o.StartRate, 0):
		return fmt.Errorf("-start-rate: %v must be positive", o.StartRate)
	case !(o.Growth > 1.05 && o.Growth <= 10):
		return fmt.Errorf("-growth: %v must be in (1.05, 10]", o.Growth)
	case !(o.MaxRate >= o.StartRate):
		return fmt.Errorf("-max-rate: %v is below -start-rate", o.MaxRate)
	}
	if o.Step <= 0 {
		o.Step = 4 * time.Second
	}
	if o.Budget <= 0 {
		o.Budget = 110 * time.Second
	}
	if o.Verify <= 0 {
		o.Verify = 10 * time.Second
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return nil
}

// Step is what one step of the ramp measured.
type Step struct {
	Rate    float64 `json:"rate"`
	Goodput float64 `json:"goodput"`
	// Latencies of successful requests, ms, from the scheduled send time.
	MeanMS float64 `json:"mean_ms"`
	P50MS  float64 `json:"p50_ms"`
	P99MS  float64 `json:"p99_ms"`
	// FailRate is the fraction of requests that failed (no response but
	// timeouts, or statuses that are not overload signals).
	FailRate float64 `json:"fail_rate"`
	// TimeoutRate is the fraction that timed out.
	TimeoutRate float64 `json:"timeout_rate"`
	// Within: p99 within the SLO and goodput at least 95% of the offered
	// rate and at most 1% failures. Why says what failed otherwise.
	Within bool   `json:"within_slo"`
	Why    string `json:"why,omitempty"`
}

// Result is a whole session.
type Result struct {
	Target string  `json:"target"`
	SLOMS  float64 `json:"slo_p99_ms"`
	Steps  []Step  `json:"steps"`
	// Knee is the step at the knee.
	Knee Step `json:"knee"`
	// NoLoadMS is the mean latency at the lowest step; PeakGoodput the most
	// successful requests per second any step saw; Concurrency their
	// product (Little's law: the requests the service holds at once when
	// it is saturated).
	NoLoadMS    float64 `json:"no_load_ms"`
	PeakGoodput float64 `json:"peak_goodput"`
	Concurrency int     `json:"concurrency"`
	// Stopped says why the ramp ended.
	Stopped        string         `json:"stopped"`
	Recommendation Recommendation `json:"recommendation"`
	Verification   *Verification  `json:"verification,omitempty"`
	verifyRun      *loadtest.Summary
}

// VerifySummary is the verification run's full summary (nil without one).
func (r *Result) VerifySummary() *loadtest.Summary { return r.verifyRun }

// closedLoop runs the verification's closed-loop phase: the same clients
// for a fifth of the verification each (at least 2 s), directly against
// the service, then through sluice (t).
func closedLoop(ctx context.Context, res *Result, o Options, through vegeta.Target, timeout time.Duration) (*ClosedLoop, error) {
	direct, err := loadtest.Target(o.Method, o.Target, o.Header, nil)
	if err != nil {
		return nil, err
	}
	clients, d := closedLoopClients(res.Recommendation), max(o.Verify/5, 2*time.Second)
	fmt.Fprintf(o.Progress, "verify   a closed loop of %d clients, %v directly, then %v through sluice\n", clients, d, d)
	a, err := loadtest.RunClosed(ctx, loadtest.ClosedOptions{Target: direct, Clients: clients, Duration: d, Timeout: timeout})
	if err != nil {
		return nil, err
	}
	b, err := loadtest.RunClosed(ctx, loadtest.ClosedOptions{Target: through, Clients: clients, Duration: d, Timeout: timeout})
	if err != nil {
		return nil, err
	}
	cl := &ClosedLoop{Clients: clients, Direct: a.GoodputRPS, Through: b.GoodputRPS, Refused: b.Refused}
	if a.GoodputRPS > 0 {
		cl.Ratio = b.GoodputRPS / a.GoodputRPS
	}
	fmt.Fprintf(o.Progress, "verify   closed loop: %.1f/s direct, %.1f/s through sluice (%.0f%%), %d refused\n",
		cl.Direct, cl.Through, 100*cl.Ratio, cl.Refused)
	return cl, ctx.Err()
}

// Verification is the check of the recommendation at three times the knee.
type Verification struct {
	Rate     float64 `json:"rate"`
	Goodput  float64 `json:"goodput"`
	P99MS    float64 `json:"p99_ms"`
	Rejected int     `json:"rejected"`
	// Quota counts the rejections answered 429 (by the static fallback
	// rule): overload is the queue's to answer, with 503, so this should be
	// 0.
	Quota int `json:"rejected_429"`
	// MeetsSLO: p99 within the SLO and goodput at least 80% of the knee's;
	// with a latency shift (and a run of 8 s or more), goodput after it at
	// least 80% of half the knee's.
	MeetsSLO bool   `json:"meets_slo"`
	Why      string `json:"why,omitempty"`
	// Shifted says whether the run doubled the service time half-way (only
	// possible against sluice's simulated backend, through its /control);
	// ShiftGoodput is the goodput in the second half.
	Shifted      bool    `json:"latency_shift"`
	ShiftGoodput float64 `json:"goodput_after_shift,omitempty"`
	// ClosedLoop is the closed-loop phase: clients that each send again
	// when answered (a benchmark's model), as many as the recommendation
	// serves within the objective (the limit plus half the queue, whose
	// wait fits in max_wait), directly against the service and then through
	// sluice. The recommendation must not cost them goodput: through sluice
	// at least 80% of direct (nil with a run under 4 s).
	ClosedLoop *ClosedLoop `json:"closed_loop,omitempty"`
}

// ClosedLoop is the verification's closed-loop phase.
type ClosedLoop struct {
	Clients int `json:"clients"`
	// Direct and Through are the good (2xx) requests per second without
	// and with sluice; Ratio is Through / Direct.
	Direct  float64 `json:"direct_goodput"`
	Through float64 `json:"through_goodput"`
	Ratio   float64 `json:"ratio"`
	// Refused counts the 429 and 503 answers through sluice.
	Refused int `json:"refused"`
}

// closedLoopClients is how many clients the closed-loop phase runs: the
// initial limit plus half the queue (more would wait past max_wait, and be
// refused by design), at least 2 and at most 1,024.
func closedLoopClients(r Recommendation) int { return min(max(r.InitialLimit+r.QueueSize/2, 2), 1024) }

// Run runs a session. It fails with a clear message when the target is
// down or fails at the lowest rate.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	target, err := loadtest.Target(o.Method, o.Target, o.Header, nil)
	if err != nil {
		return nil, err
	}
	if err := probe(ctx, target); err != nil {
		return nil, err
	}
	began := time.Now()
	reserve := o.Verify
	if o.Verify >= 4*time.Second {
		reserve += 2 * max(o.Verify/5, 2*time.Second) // the closed-loop phase
	}
	if o.NoVerify {
		reserve = 0
	}
	timeout := min(30*time.Second, max(250*time.Millisecond, 3*o.SLOP99))
	res := &Result{Target: o.Target, SLOMS: ms(o.SLOP99)}
	fits := func() bool { return time.Since(began)+o.Step+timeout+reserve <= o.Budget }
	step := func(rate float64) (Step, error) {
		s, err := loadtest.Run(ctx, loadtest.Options{
			Targets: []vegeta.Target{target}, Profile: loadtest.Profile{Kind: "constant", Rate: rate},
			Duration: o.Step, Timeout: timeout,
		})
		if err != nil {
			return Step{}, err
		}
		st := measure(s, rate, o.SLOP99)
		fmt.Fprintf(o.Progress, "step %2d  %8.1f/s  goodput %8.1f/s  p99 %8.1fms  failed %5.1f%%  %s\n",
			len(res.Steps)+1, rate, st.Goodput, st.P99MS, 100*st.FailRate, verdict(st))
		res.Steps = append(res.Steps, st)
		if err := ctx.Err(); err != nil {
			return st, err
		}
		if st.FailRate > 0.5 {
			return st, fmt.Errorf("the target failed %.0f%% of requests at %g/s (first error: %s)", 100*st.FailRate, rate, firstFailure(s))
		}
		return st, nil
	}
	// Ramp until a step misses the SLO.
	var good, bad *Step
	for rate := o.StartRate; rate <= o.MaxRate; rate *= o.Growth {
		if !fits() {
			res.Stopped = "the time budget ran out before the service missed the SLO; it sustains at least the knee rate"
			break
		}
		st, err := step(rate)
		if err != nil {
			if good == nil {
				return nil, fmt.Errorf("tune: %w", err)
			}
			res.Stopped = err.Error()
			break
		}
		if !st.Within {
			if good == nil {
				return nil, fmt.Errorf("tune: at %g/s, the lowest rate, the target already misses the SLO (%s); lower -start-rate or raise -slo-p99", rate, st.Why)
			}
			bad = &st
			res.Stopped = fmt.Sprintf("%g/s missed the SLO: %s", rate, st.Why)
			break
		}
		good = &st
		pause(ctx, timeout)
	}
	if good == nil {
		return nil, errors.New("tune: no step ran; raise -budget or lower -step")
	}
	// Refine between the last good and the first bad rate.
	for i := 0; i < 2 && bad != nil && bad.Rate/good.Rate > 1.12 && fits(); i++ {
		pause(ctx, timeout)
		st, err := step(math.Sqrt(good.Rate * bad.Rate))
		if err != nil {
			break
		}
		if st.Within {
			good = &st
		} else {
			bad = &st
		}
	}
	res.Knee = *good
	res.NoLoadMS = res.Steps[0].MeanMS
	for _, s := range res.Steps {
		res.PeakGoodput = max(res.PeakGoodput, s.Goodput)
		if s.Within && s.MeanMS > 0 {
			res.NoLoadMS = min(res.NoLoadMS, s.MeanMS)
		}
	}
	res.Concurrency = max(1, int(math.Round(res.PeakGoodput*res.NoLoadMS/1000)))
	res.Recommendation = recommend(res, o)
	if o.NoVerify {
		return res, nil
	}
	pause(ctx, timeout)
	if err := verify(ctx, res, o, timeout); err != nil {
		return res, fmt.Errorf("tune: verification: %w", err)
	}
	return res, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pause lets the target drain between steps.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(min(d, time.Second))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func verdict(s Step) string {
	if s.Within {
		return "within SLO"
	}
	return "missed: " + s.Why
}

// measure turns a step's summary into a Step.
func measure(s *loadtest.Summary, rate float64, slo time.Duration) Step {
	st := Step{Rate: rate, Goodput: s.GoodputRPS, MeanMS: s.OKLatency.Mean, P50MS: s.OKLatency.P50, P99MS: s.OKLatency.P99}
	if s.Requests > 0 {
		timeouts := s.ErrorKinds["timeout"]
		fails := s.Errors - timeouts + s.CountStatus(failed)
		st.FailRate = float64(fails) / float64(s.Requests)
		st.TimeoutRate = float64(timeouts) / float64(s.Requests)
	}
	var why []string
	if s.OK == 0 {
		why = append(why, "no request succeeded")
	} else if st.P99MS > ms(slo) {
		why = append(why, fmt.Sprintf("p99 %.1fms > %.1fms", st.P99MS, ms(slo)))
	}
	if st.Goodput < 0.95*s.OfferedRPS {
		why = append(why, fmt.Sprintf("goodput %.1f/s < 95%% of %.1f/s offered", st.Goodput, s.OfferedRPS))
	}
	if st.FailRate > 0.01 {
		why = append(why, fmt.Sprintf("%.1f%% failed", 100*st.FailRate))
	}
	st.Within = len(why) == 0
	st.Why = strings.Join(why, "; ")
	return st
}

// failed is a status that says the target is broken rather than
// overloaded: a gateway timeout (504) is overload, like 429 and 503.
func failed(code int) bool { return loadtest.FailedStatus(code) && code != http.StatusGatewayTimeout }

func firstFailure(s *loadtest.Summary) string {
	if s.FirstError != "" {
		return s.FirstError
	}
	for code := range s.Status {
		if c, _ := strconv.Atoi(code); failed(c) {
			return "HTTP " + code
		}
	}
	return "none recorded"
}

// probe sends one request, so a target that is down or broken fails the
// session at once with a clear message.
func probe(ctx context.Context, t vegeta.Target) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := t.Request()
	if err != nil {
		return fmt.Errorf("tune: %w", err)
	}
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("tune: the target %s is not reachable: %w", t.URL, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 400 {
		return fmt.Errorf("tune: the target %s answered %s to %s; tune needs an endpoint that succeeds", t.URL, resp.Status, t.Method)
	}
	return nil
}

// controlURL is the /control endpoint of the target's host (sluice's
// simulated backend has one).
func controlURL(target string) string {
	u, err := url.Parse(target)
	if err != nil {
		return ""
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/control"}).String()
}

// serviceMS reads the simulated backend's service time; ok is false for
// any other target.
func serviceMS(ctx context.Context, control string) (float64, bool) {
	req, err := http.NewRequestWithContext(ctx, "GET", control, nil)
	if err != nil {
		return 0, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var m struct {
		ServiceMS *float64 `json:"service_ms"`
	}
	if resp.StatusCode != 200 || json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&m) != nil || m.ServiceMS == nil || *m.ServiceMS <= 0 {
		return 0, false
	}
	return *m.ServiceMS, true
}

func setServiceMS(ctx context.Context, control string, ms float64) {
	req, err := http.NewRequestWithContext(ctx, "POST", control, strings.NewReader(fmt.Sprintf(`{"service_ms": %g}`, ms)))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

// verify runs sluice in process with the recommended configuration in
// front of the target and drives three times the knee rate through it;
// against sluice's simulated backend the service time also doubles
// half-way.
func verify(ctx context.Context, res *Result, o Options, timeout time.Duration) error {
	cfg, err := config.Parse("sluice.recommended.yaml", []byte(res.Recommendation.YAML))
	if err != nil {
		return fmt.Errorf("the recommended configuration does not parse: %w", err)
	}
	cfg.Listen, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0"
	srv, err := daemon.New(cfg, "", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	defer func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	proxy, admin := srv.Addrs()
	u, _ := url.Parse(o.Target) // parsed by loadtest.Target already
	u.Scheme, u.Host = "http", proxy
	t, err := loadtest.Target(o.Method, u.String(), o.Header, nil)
	if err != nil {
		return err
	}
	rate := 3 * res.Knee.Rate
	fmt.Fprintf(o.Progress, "verify   %8.1f/s (3x the knee) through sluice for %v\n", rate, o.Verify)
	// Against sluice's simulated backend, the service time also doubles
	// half-way: the recommendation must hold when the service's own
	// latency shifts, not only under load.
	control := controlURL(o.Target)
	service, canShift := serviceMS(ctx, control)
	if canShift {
		fmt.Fprintf(o.Progress, "verify   the service time doubles (%.1fms -> %.1fms) half-way\n", service, 2*service)
		shiftCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-shiftCtx.Done():
			case <-time.After(o.Verify / 2):
				setServiceMS(shiftCtx, control, 2*service)
			}
		}()
		defer setServiceMS(context.WithoutCancel(ctx), control, service)
	}
	s, err := loadtest.Run(ctx, loadtest.Options{
		Targets: []vegeta.Target{t}, Profile: loadtest.Profile{Kind: "constant", Rate: rate},
		Duration: o.Verify, Timeout: timeout, Admin: admin,
	})
	if err != nil {
		return err
	}
	if canShift {
		setServiceMS(ctx, control, service)
	}
	v := &Verification{Rate: rate, Goodput: s.GoodputRPS, P99MS: s.OKLatency.P99, Rejected: s.Rejected(), Quota: s.Status["429"], Shifted: canShift}
	var why []string
	if s.OK == 0 {
		why = append(why, "no request succeeded")
	} else if v.P99MS > res.SLOMS {
		why = append(why, fmt.Sprintf("p99 %.1fms > %.1fms", v.P99MS, res.SLOMS))
	}
	if canShift {
		// The second half, after the first second of it.
		half, n := len(s.Seconds)/2+1, 0
		for _, sec := range s.Seconds[min(half, len(s.Seconds)):] {
			v.ShiftGoodput += float64(sec.OK)
			n++
		}
		v.ShiftGoodput /= float64(max(1, n))
		// Judged only when the run is long enough for the limit to adapt
		// (a slow service closes few sample windows a second).
		if o.Verify >= 8*time.Second && v.ShiftGoodput < 0.8*res.Knee.Goodput/2 {
			why = append(why, fmt.Sprintf("goodput after the latency shift %.1f/s < 80%% of half the knee's %.1f/s", v.ShiftGoodput, res.Knee.Goodput))
		}
	} else if v.Goodput < 0.8*res.Knee.Goodput {
		why = append(why, fmt.Sprintf("goodput %.1f/s < 80%% of the knee's %.1f/s", v.Goodput, res.Knee.Goodput))
	}
	if o.Verify >= 4*time.Second {
		cl, err := closedLoop(ctx, res, o, t, timeout)
		if err != nil {
			return err
		}
		v.ClosedLoop = cl
		if cl.Ratio < 0.8 {
			why = append(why, fmt.Sprintf("a closed loop of %d clients got %.1f/s through sluice, %.0f%% of the %.1f/s it gets directly",
				cl.Clients, cl.Through, 100*cl.Ratio, cl.Direct))
		}
	}
	v.MeetsSLO = len(why) == 0
	v.Why = strings.Join(why, "; ")
	res.Verification, res.verifyRun = v, s
	verdict := "meets the SLO"
	if !v.MeetsSLO {
		verdict = "MISSES the SLO: " + v.Why
	}
	fmt.Fprintf(o.Progress, "verify   goodput %.1f/s  p99 %.1fms  rejected %d  %s\n", v.Goodput, v.P99MS, v.Rejected, verdict)
	return ctx.Err()
}
