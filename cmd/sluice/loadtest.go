package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/sluicehq/sluice/loadtest"
	"github.com/sluicehq/sluice/loadtest/backend"
	"github.com/sluicehq/sluice/loadtest/report"
)

// headerFlags collects repeated -header flags.
type headerFlags struct{ h http.Header }

func (f *headerFlags) String() string { return "" }
func (f *headerFlags) Set(s string) error {
	if f.h == nil {
		f.h = http.Header{}
	}
	return loadtest.ParseHeader(f.h, s)
}

func cmdLoadtest(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "backend" {
		return cmdBackend(args[1:], stderr)
	}
	if len(args) > 0 && args[0] == "scenarios" {
		return cmdScenarios(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := fs.String("target", "", "URL to load (or -targets)")
	targets := fs.String("targets", "", "file of targets: vegeta's HTTP format or JSON lines")
	method := fs.String("method", "GET", "method for -target")
	var hdr headerFlags
	fs.Var(&hdr, "header", "\"Name: value\" added to every request (repeatable)")
	var p loadtest.Profile
	fs.StringVar(&p.Kind, "profile", "constant", "arrival shape: "+strings.Join(loadtest.Profiles, ", "))
	fs.Float64Var(&p.Rate, "rate", 50, "requests per second (constant; first step; ramp start; spike base; sine mean)")
	fs.Float64Var(&p.StepRate, "step-rate", 50, "step: requests per second added each -step-every")
	fs.DurationVar(&p.StepEvery, "step-every", 5*time.Second, "step: length of a step")
	fs.Float64Var(&p.ToRate, "to-rate", 500, "ramp: rate at the end")
	fs.Float64Var(&p.SpikeRate, "spike-rate", 500, "spike: rate during the spike")
	fs.DurationVar(&p.SpikeAt, "spike-at", 5*time.Second, "spike: when it starts")
	fs.DurationVar(&p.SpikeFor, "spike-for", 5*time.Second, "spike: how long it lasts")
	fs.Float64Var(&p.Amplitude, "amplitude", 25, "sine: amplitude around -rate")
	fs.DurationVar(&p.Period, "period", 10*time.Second, "sine: period")
	duration := fs.Duration("duration", 10*time.Second, "length of the run")
	timeout := fs.Duration("timeout", 30*time.Second, "per-request timeout")
	maxWorkers := fs.Uint64("max-workers", 0, "bound on requests in flight (0: as the schedule needs)")
	admin := fs.String("admin", "", "sluice admin address (host:port) to sample each second")
	out := fs.String("out", "sluice-loadtest", "directory for summary.json, report.html and PNG charts")
	clients := fs.Int("clients", 0, "a closed loop instead of -profile: this many clients, each sending its next request as soon as the last is answered (as wrk -c does); prints a summary only")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	tgts, err := loadTargets(*target, *targets, *method, hdr.h)
	if err != nil {
		fmt.Fprintln(stderr, "sluice loadtest:", err)
		return 2
	}
	if *clients != 0 {
		return closedLoop(tgts, *clients, *duration, *timeout, *admin, stdout, stderr)
	}
	if err := p.Validate(*duration); err != nil {
		fmt.Fprintln(stderr, "sluice loadtest:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := loadtest.Run(ctx, loadtest.Options{
		Targets: tgts, Profile: p, Duration: *duration, Timeout: *timeout, MaxWorkers: *maxWorkers,
		Admin: *admin, Progress: stdout, Live: isTerminal(stdout),
	})
	if err != nil {
		fmt.Fprintln(stderr, "sluice loadtest:", err)
		return 1
	}
	s.WriteText(stdout)
	if err := report.WriteRun(*out, s); err != nil {
		fmt.Fprintln(stderr, "sluice loadtest: report:", err)
		return 1
	}
	fmt.Fprintf(stdout, "report     %s/report.html (summary.json, PNG charts beside it)\n", strings.TrimSuffix(*out, "/"))
	if s.Requests > 0 && s.OK == 0 {
		fmt.Fprintln(stderr, "sluice loadtest: no request succeeded")
		return 1
	}
	return 0
}

// closedLoop runs `sluice loadtest -clients N`: a closed loop against the
// first target, summarised on stdout (and as JSON on its last line).
func closedLoop(tgts []vegeta.Target, clients int, duration, timeout time.Duration, admin string, stdout, stderr io.Writer) int {
	if clients < 0 || duration <= 0 {
		fmt.Fprintln(stderr, "sluice loadtest: -clients and -duration must be positive")
		return 2
	}
	if len(tgts) > 1 {
		fmt.Fprintln(stderr, "sluice loadtest: -clients loads one target (-target)")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := loadtest.RunClosed(ctx, loadtest.ClosedOptions{Target: tgts[0], Clients: clients, Duration: duration, Timeout: timeout, Admin: admin})
	if err != nil {
		fmt.Fprintln(stderr, "sluice loadtest:", err)
		return 1
	}
	fmt.Fprintf(stdout, "closed loop  %d clients for %v (the last answer at %v): %d ok (%.1f/s), %d refused (429, 503), %d failed\n",
		s.Clients, s.Sending.Round(time.Millisecond), s.Elapsed.Round(time.Millisecond), s.OK, s.GoodputRPS, s.Refused, s.Failed)
	b, _ := json.Marshal(s) // numbers only
	fmt.Fprintf(stdout, "%s\n", b)
	if s.OK == 0 {
		fmt.Fprintln(stderr, "sluice loadtest: no request succeeded")
		return 1
	}
	return 0
}

func loadTargets(target, file, method string, h http.Header) ([]vegeta.Target, error) {
	switch {
	case target != "" && file != "":
		return nil, errors.New("-target and -targets: give one")
	case target != "":
		t, err := loadtest.Target(method, target, h, nil)
		if err != nil {
			return nil, err
		}
		return []vegeta.Target{t}, nil
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return loadtest.ReadTargets(f, h)
	}
	return nil, errors.New("-target URL or -targets FILE is required")
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func cmdBackend(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("loadtest backend", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:9000", "address to serve on")
	var m backend.Model
	fs.IntVar(&m.Slots, "slots", 10, "requests served at once (C)")
	fs.DurationVar(&m.ServiceTime, "service", 20*time.Millisecond, "mean service time without contention")
	fs.Float64Var(&m.Sigma, "sigma", 0.25, "lognormal shape of service times (0: constant)")
	fs.Float64Var(&m.Degrade, "degrade", 0.1, "slowdown per waiting request per slot (contention)")
	fs.BoolVar(&m.CPU, "cpu", false, "burn the service time on a CPU instead of waiting (a CPU-bound service)")
	fs.Float64Var(&m.SlowShare, "slow-share", 0, "share of requests that take -slow-factor times as long (a bimodal service)")
	fs.Float64Var(&m.SlowFactor, "slow-factor", 10, "how many times slower the -slow-share requests are")
	fs.IntVar(&m.MaxQueue, "max-queue", 0, "fail fast: answer 503 at once while this many wait for a slot (0: wait without bound)")
	seed := fs.Uint64("seed", 1, "random seed")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	b, err := backend.New(m, *seed)
	if err != nil {
		fmt.Fprintln(stderr, "sluice loadtest backend:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(stderr, "sluice loadtest backend:", err)
		return 1
	}
	srv := &http.Server{Handler: b, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Info("simulated backend", "listen", l.Addr().String(), "slots", m.Slots, "service", m.ServiceTime,
		"slow_share", m.SlowShare, "slow_factor", m.SlowFactor, "max_queue", m.MaxQueue,
		"capacity_rps", float64(m.Slots)/max(m.MeanService().Seconds(), 1e-9), "control", "http://"+l.Addr().String()+"/control")
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(stderr, "sluice loadtest backend:", err)
		return 1
	}
	return 0
}
