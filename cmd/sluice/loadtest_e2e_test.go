package main_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/loadtest"
)

// startBackend runs `sluice loadtest backend` on a free loopback port and
// returns its address.
func startBackend(t *testing.T, args ...string) string {
	t.Helper()
	logs := &syncBuffer{}
	cmd := exec.Command(binary, append([]string{"loadtest", "backend", "-listen", "127.0.0.1:0"}, args...)...)
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	re := regexp.MustCompile(`listen=(\S+)`)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(logs.String()); m != nil {
			return m[1]
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("backend exited: %v\n%s", err, logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("backend did not start:\n%s", logs.String())
	return ""
}

// TestE2ELoadtest: the simulated backend behind `sluice run`, loaded by
// `sluice loadtest` with the admin port sampled: the run exits 0, prints
// the summary, and writes the report with the sluice chart.
func TestE2ELoadtest(t *testing.T) {
	be := startBackend(t, "-slots", "4", "-service", "10ms")
	s := start(t, "http://"+be, "adaptive: {algorithm: gradient2, initial_limit: 8}\nrules:\n  - {rule_id: all, identifier_type: global, algorithm: token_bucket, limit: 1000, window: 1s}\n")
	out := filepath.Join(t.TempDir(), "report")
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(binary, "loadtest", "-target", "http://"+s.proxy+"/x", "-rate", "40", "-duration", "2s",
		"-admin", s.admn, "-out", out)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("loadtest: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	for _, want := range []string{"sent ", "goodput", "latency ok", "adaptive limit", "report.html"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
	b, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sum loadtest.Summary
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Requests != 80 || sum.OK != 80 || len(sum.Admin) == 0 || sum.Admin[0].Limit == 0 {
		t.Fatalf("summary: %d requests, %d ok, %d admin samples %+v", sum.Requests, sum.OK, len(sum.Admin), sum.Admin)
	}
	for _, f := range []string{"report.html", "throughput.png", "latency.png", "sluice.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	// The requests went through sluice: its metrics counted them.
	if got := metric(t, s, `sluice_requests_total{decision="allowed",rule="all"}`); got != "80" {
		t.Errorf("sluice counted %s requests, want 80", got)
	}
}

// TestE2ELoadtestFlags: bad flags exit 2 with a message naming the flag.
func TestE2ELoadtestFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"loadtest"}, "-target URL or -targets FILE"},
		{[]string{"loadtest", "-target", "localhost:80"}, "-target"},
		{[]string{"loadtest", "-target", "http://127.0.0.1:1/", "-profile", "zigzag"}, "zigzag"},
		{[]string{"loadtest", "-target", "http://127.0.0.1:1/", "-header", "nocolon"}, "Name: value"},
		{[]string{"loadtest", "backend", "-slots", "0"}, "slots"},
		{[]string{"tune", "-target", "http://127.0.0.1:1/"}, "-slo-p99"},
	} {
		out, err := exec.Command(binary, c.args...).CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() == 0 || !strings.Contains(string(out), c.want) {
			t.Errorf("%v: %v %s; want a failure naming %q", c.args, err, out, c.want)
		}
	}
}

// TestE2ETuneTargetDown: `sluice tune` against nothing fails with a clear
// message and writes no configuration.
func TestE2ETuneTargetDown(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(binary, "tune", "-target", "http://127.0.0.1:1/", "-slo-p99", "100ms")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "not reachable") {
		t.Fatalf("%v %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "sluice.recommended.yaml")); !os.IsNotExist(err) {
		t.Fatalf("a configuration was written for a target that is down: %v", err)
	}
}
