package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/replay"
	"github.com/sluicehq/sluice/replay/logfmt"
)

// mapFlags collects -map field=key.
type mapFlags []string

func (m *mapFlags) String() string     { return strings.Join(*m, ",") }
func (m *mapFlags) Set(s string) error { *m = append(*m, s); return nil }

func cmdReplay(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "the rules to replay (required)")
	compare := fs.String("compare", "", "another configuration, replayed beside -config and compared with it")
	format := fs.String("format", "auto", "the logs' format: auto, nginx, clf, nginx-json, envoy, envoy-json, alb, sluice")
	var maps mapFlags
	fs.Var(&maps, "map", "field=key: the JSON key holding a field (client_ip, user, api_key, method, path, request, time, status, upstream_time, upstream_ms, header:<Name>); repeatable")
	model := fs.String("service-model", "none", "replay the adaptive limit and its queue: none, auto (the service's slots from the log's upstream times), or a number of slots")
	speed := fs.Float64("speed", 0, "replay at this many times the log's pace (0: as fast as the CPU allows)")
	out := fs.String("out", "", "directory for report.html, charts, replay.json and suggested.yaml")
	asJSON := fs.Bool("json", false, "print the results as JSON instead of tables")
	decisions := fs.String("decisions", "", "write each request's answer to this file: \"<log>:<line> <status> <rule>\"")
	suggest := fs.Float64("suggest-keys", 99.9, "the share of keys, in percent, a suggested limit would never have limited")
	top := fs.Int("top", 10, "keys listed per rule")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "sluice replay:", err)
		return 1
	}
	if *cfgPath == "" {
		fmt.Fprintln(stderr, "sluice replay: -config FILE is required")
		return 2
	}
	f, err := logfmt.ParseFormat(*format)
	if err != nil {
		return fail(err)
	}
	m, err := logfmt.ParseMapping(maps)
	if err != nil {
		return fail(err)
	}
	o := replay.Options{Format: f, Mapping: m, Speed: *speed, TopKeys: *top, SuggestKeys: *suggest / 100}
	if *suggest <= 0 || *suggest > 100 {
		return fail(fmt.Errorf("-suggest-keys %v: want a percentage in (0, 100]", *suggest))
	}
	var cfgs []*config.Config
	for _, p := range []string{*cfgPath, *compare} {
		if p == "" {
			continue
		}
		c, err := config.Load(p)
		if err != nil {
			return fail(err)
		}
		cfgs = append(cfgs, c)
	}
	logs := fs.Args()
	if len(logs) == 0 {
		logs = []string{"-"}
	}
	switch *model {
	case "none":
	case "auto":
		if o.Slots, err = estimate(logs, o); err != nil {
			return fail(err)
		}
		if o.Slots == 0 {
			return fail(fmt.Errorf("-service-model auto: the logs carry no upstream times (use a number of slots, or none)"))
		}
		fmt.Fprintf(stderr, "service model: %d slots (the requests in the upstream at once, on average over a second, in the busiest 0.1%% of the log's seconds)\n", o.Slots)
	default:
		if o.Slots, err = strconv.Atoi(*model); err != nil || o.Slots <= 0 {
			return fail(fmt.Errorf("-service-model %q: want none, auto or a number of slots", *model))
		}
	}
	var sources []replay.Source
	var total int64
	for _, p := range logs {
		src, c, err := replay.Open(p)
		if err != nil {
			return fail(err)
		}
		defer c.Close()
		sources = append(sources, src)
		if st, err := os.Stat(p); err == nil && p != "-" {
			total += st.Size()
		}
	}
	if isTerminal(stderr) {
		o.Progress = progress(stderr, total, time.Now())
	}
	if *decisions != "" {
		df, err := os.Create(*decisions)
		if err != nil {
			return fail(err)
		}
		defer df.Close()
		o.Decisions = df
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := replay.Run(ctx, cfgs, sources, o)
	if o.Progress != nil {
		fmt.Fprint(stderr, "\r\033[K")
	}
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return fail(err)
		}
	} else {
		replay.Summary(stdout, res)
	}
	if *out != "" {
		if err := replay.WriteReport(*out, res); err != nil {
			return fail(fmt.Errorf("report: %w", err))
		}
		src, err := os.ReadFile(*cfgPath)
		if err != nil {
			return fail(err)
		}
		sug, err := replay.SuggestedConfig(src, res[0])
		if err != nil {
			return fail(fmt.Errorf("suggested configuration: %w", err))
		}
		if err := os.WriteFile(filepath.Join(*out, "suggested.yaml"), sug, 0o644); err != nil {
			return fail(err)
		}
		if !*asJSON {
			fmt.Fprintf(stdout, "\nreport: %s; suggested limits: %s\n", filepath.Join(*out, "report.html"), filepath.Join(*out, "suggested.yaml"))
		}
	}
	return 0
}

// estimate reads the logs once for the service model's slots.
func estimate(logs []string, o replay.Options) (int, error) {
	var sources []replay.Source
	for _, p := range logs {
		if p == "-" {
			return 0, fmt.Errorf("-service-model auto reads the logs twice: give files, not standard input")
		}
		src, c, err := replay.Open(p)
		if err != nil {
			return 0, err
		}
		defer c.Close()
		sources = append(sources, src)
	}
	return replay.EstimateSlots(sources, o)
}

// progress draws a bar of bytes read out of total (when known) with the
// lines read and their pace.
func progress(w io.Writer, total int64, start time.Time) func(lines, bytes int64) {
	return func(lines, bytes int64) {
		rate := float64(lines) / max(time.Since(start).Seconds(), 1e-9)
		if total > 0 {
			done := min(1, float64(bytes)/float64(total))
			bar := strings.Repeat("#", int(done*30)) + strings.Repeat(".", 30-int(done*30))
			fmt.Fprintf(w, "\r[%s] %3.0f%% %d lines, %.0f lines/s", bar, 100*done, lines, rate)
			return
		}
		fmt.Fprintf(w, "\r%d lines, %.0f lines/s", lines, rate)
	}
}
