package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/loadtest/tune"
)

func cmdTune(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tune", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o tune.Options
	fs.StringVar(&o.Target, "target", "", "the service's URL, direct (not through sluice)")
	fs.StringVar(&o.Method, "method", "GET", "request method")
	var hdr headerFlags
	fs.Var(&hdr, "header", "\"Name: value\" added to every request (repeatable)")
	fs.DurationVar(&o.SLOP99, "slo-p99", 0, "latency objective: p99 of successful requests (required)")
	fs.Float64Var(&o.StartRate, "start-rate", 10, "first step's rate, requests/s")
	fs.Float64Var(&o.Growth, "growth", 1.5, "each step's rate is the last one's times this")
	fs.Float64Var(&o.MaxRate, "max-rate", 100000, "highest rate tried")
	fs.DurationVar(&o.Step, "step", 4*time.Second, "length of a step")
	fs.DurationVar(&o.Budget, "budget", 110*time.Second, "bound on the whole session")
	fs.DurationVar(&o.Verify, "verify", 10*time.Second, "length of the verification run")
	fs.BoolVar(&o.NoVerify, "no-verify", false, "skip the verification through sluice at 3x the knee")
	cfgOut := fs.String("config-out", "sluice.recommended.yaml", "where to write the recommended configuration")
	out := fs.String("out", "sluice-tune", "directory for tune.json, report.html and charts")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.Target == "" {
		fmt.Fprintln(stderr, "sluice tune: -target URL is required")
		return 2
	}
	o.Header = hdr.h
	o.Progress = stdout
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := tune.Run(ctx, o)
	if res == nil {
		fmt.Fprintln(stderr, "sluice tune:", strings.TrimPrefix(err.Error(), "tune: "))
		return 1
	}
	if werr := os.WriteFile(*cfgOut, []byte(res.Recommendation.YAML), 0o644); werr != nil {
		fmt.Fprintln(stderr, "sluice tune:", werr)
		return 1
	}
	if werr := tune.WriteReport(*out, res); werr != nil {
		fmt.Fprintln(stderr, "sluice tune: report:", werr)
		return 1
	}
	fmt.Fprintf(stdout, "knee       %.1f/s (p99 %.1fms, goodput %.1f/s); no-load latency %.1fms; concurrency %d\n",
		res.Knee.Rate, res.Knee.P99MS, res.Knee.Goodput, res.NoLoadMS, res.Concurrency)
	fmt.Fprintf(stdout, "config     %s\nreport     %s\n", *cfgOut, filepath.Join(*out, "report.html"))
	if err != nil {
		fmt.Fprintln(stderr, "sluice tune:", strings.TrimPrefix(err.Error(), "tune: "))
		return 1
	}
	if v := res.Verification; v != nil && !v.MeetsSLO {
		fmt.Fprintln(stderr, "sluice tune: the verification run missed the objective:", v.Why)
		return 1
	}
	return 0
}
