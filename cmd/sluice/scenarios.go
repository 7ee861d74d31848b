package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/loadtest/report"
	"github.com/sluicehq/sluice/loadtest/scenarios"
)

func cmdScenarios(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loadtest scenarios", flag.ContinueOnError)
	fs.SetOutput(stderr)
	only := fs.String("scenario", "", "comma-separated scenarios to run (default: all)")
	contenders := fs.String("contenders", "", "comma-separated contenders (default: none, static-cap, gradient2, vegas, aimd, gcl-gradient2, gcl-vegas, gcl-gradient, gcl-aimd; also: off)")
	out := fs.String("out", "sluice-scenarios", "directory for the report (table.md, runs.json, report.html, PNGs)")
	timeout := fs.Duration("timeout", 2*time.Second, "client timeout: a later answer is no goodput")
	sweep := fs.Bool("sweep", false, "run the robustness sweep: service shapes no scenario is tuned for x open-loop loads and closed loops (with -scenario: those too)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	raiseFileLimit()
	var o scenarios.Options
	o.Timeout = *timeout
	if *only != "" {
		s, err := scenarios.Named(strings.Split(*only, ","))
		if err != nil {
			fmt.Fprintln(stderr, "sluice loadtest scenarios:", err)
			return 2
		}
		o.Scenarios = s
	}
	if *sweep {
		o.Scenarios = append(o.Scenarios, scenarios.Sweep()...)
	}
	if *contenders != "" {
		for _, name := range strings.Split(*contenders, ",") {
			found := false
			for _, c := range append(scenarios.Contenders(), scenarios.Unlimited()) {
				if c.Name == name {
					o.Contenders, found = append(o.Contenders, c), true
				}
			}
			if !found {
				fmt.Fprintf(stderr, "sluice loadtest scenarios: unknown contender %q\n", name)
				return 2
			}
		}
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "sluice loadtest scenarios:", err)
		return 1
	}
	tmp, err := os.MkdirTemp("", "sluice-scenarios")
	if err != nil {
		fmt.Fprintln(stderr, "sluice loadtest scenarios:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	o.Start = func(ctx context.Context, config, upstream string) (string, string, func(), error) {
		return startSluice(ctx, self, tmp, config, upstream)
	}
	o.Progress = stdout
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	runs, err := scenarios.RunAll(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "sluice loadtest scenarios:", err)
	}
	if len(runs) == 0 {
		return 1
	}
	table := scenarios.Table(runs)
	if sum := scenarios.SweepSummary(runs); len(scenarios.SweepGrids(runs)) > 0 {
		table += "\nRobustness sweep:\n\n" + sum
	}
	fmt.Fprintln(stdout)
	fmt.Fprint(stdout, table)
	if werr := writeScenarioReport(*out, runs, table); werr != nil {
		fmt.Fprintln(stderr, "sluice loadtest scenarios: report:", werr)
		return 1
	}
	fmt.Fprintf(stdout, "\nreport: %s\n", filepath.Join(*out, "report.html"))
	if err != nil {
		return 1
	}
	return 0
}

// raiseFileLimit lifts the soft limit on open files to the hard one: an
// open-loop load at 10x a hung service holds thousands of connections.
func raiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

var servingLine = regexp.MustCompile(`listen=(\S+) upstream=\S+ admin=(\S+)`)

// startSluice runs `sluice run` (this binary) with config in front of
// upstream on free loopback ports, and waits until it is ready.
func startSluice(ctx context.Context, self, dir, config, upstream string) (string, string, func(), error) {
	f, err := os.CreateTemp(dir, "sluice-*.yaml")
	if err != nil {
		return "", "", nil, err
	}
	if _, err := f.WriteString(config); err != nil {
		f.Close()
		return "", "", nil, err
	}
	f.Close()
	cmd := exec.Command(self, "run", "-config", f.Name(), "-upstream", upstream, "-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0")
	logs := &lockedLog{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		return "", "", nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if m := servingLine.FindStringSubmatch(logs.String()); m != nil {
			resp, err := http.Get("http://" + m[2] + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return m[1], m[2], stop, nil
				}
			}
		}
		select {
		case <-done:
			return "", "", nil, fmt.Errorf("sluice exited:\n%s", logs.String())
		case <-ctx.Done():
			stop()
			return "", "", nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return "", "", nil, fmt.Errorf("sluice not ready after 20 s:\n%s", logs.String())
		}
	}
}

type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<20 {
		return len(p), nil // keep the start; drop the rest
	}
	return l.b.Write(p)
}

func (l *lockedLog) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// writeScenarioReport writes table.md, runs.json and report.html with, per
// scenario, goodput per second of every contender against capacity, and
// the adaptive limit of every sluice contender.
// fileSafe turns a scenario's name into a file name.
var fileSafe = strings.NewReplacer("/", "_", "@", "_", "\\", "_")

func writeScenarioReport(dir string, runs []*scenarios.Run, table string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "table.md"), []byte(table), 0o644); err != nil {
		return err
	}
	if err := report.WriteJSON(dir, "runs.json", runs); err != nil {
		return err
	}
	page := report.Page{Title: "sluice overload scenarios", Notes: []string{
		"Each scenario drives open-loop load through each contender at the simulated backend (10 slots, 20 ms lognormal). Goodput counts 2xx answers within the client timeout.",
	}}
	var order []string
	byScenario := map[string][]*scenarios.Run{}
	for _, r := range runs {
		if _, ok := byScenario[r.Scenario]; !ok {
			order = append(order, r.Scenario)
		}
		byScenario[r.Scenario] = append(byScenario[r.Scenario], r)
	}
	for _, name := range order {
		rs := byScenario[name]
		file := fileSafe.Replace(name) // sweep cells are named shape@load under sweep/
		good := report.Chart{File: file + "-goodput.png", Title: name + ": goodput per second", XLabel: "s", YLabel: "requests/s"}
		limit := report.Chart{File: file + "-limit.png", Title: name + ": adaptive limit", XLabel: "s", YLabel: "limit"}
		var capX, capY []float64
		for i, c := range rs[0].Capacity {
			capX, capY = append(capX, float64(i)), append(capY, c)
		}
		good.Series = append(good.Series, report.Series{Name: "capacity", X: capX, Y: capY, Dashed: true})
		for _, r := range rs {
			var x, y []float64
			for i := range r.Capacity {
				x, y = append(x, float64(i)), append(y, r.Good(i))
			}
			good.Series = append(good.Series, report.Series{Name: r.Contender, X: x, Y: y})
			if len(r.Summary.Admin) > 0 {
				var lx, ly []float64
				for _, a := range r.Summary.Admin {
					lx, ly = append(lx, a.T), append(ly, float64(a.Limit))
				}
				limit.Series = append(limit.Series, report.Series{Name: r.Contender, X: lx, Y: ly})
			}
		}
		page.Charts = append(page.Charts, good)
		if len(limit.Series) > 0 {
			page.Charts = append(page.Charts, limit)
		}
	}
	page.Grids = scenarios.SweepGrids(runs)
	for _, r := range runs {
		met := "missed"
		if r.Verdict.Met {
			met = "met"
		}
		page.Facts = append(page.Facts, [2]string{r.Scenario + " / " + r.Contender, met + ": " + r.Verdict.Figure})
	}
	return report.Write(dir, page)
}
