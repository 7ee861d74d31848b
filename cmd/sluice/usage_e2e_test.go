package main_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestE2EUsage: help is asked for, not an error, on every command; each
// command's help shows its own flags only; the overview names the flags
// and commands users reach for (issue 25 item 18).
func TestE2EUsage(t *testing.T) {
	out, err := exec.Command(binary, "import", "envoy-ratelimit", "-h").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "sluice import envoy-ratelimit [-merge-domains] FILE") {
		t.Errorf("import envoy-ratelimit -h: %v\n%s", err, out)
	}
	out, _ = exec.Command(binary, "rules", "list", "-h").CombinedOutput()
	if strings.Contains(string(out), "dry-run") || strings.Contains(string(out), "readers-auth-file") || !strings.Contains(string(out), "-auth-file") {
		t.Errorf("rules list -h shows push's flags or lacks its own:\n%s", out)
	}
	out, _ = exec.Command(binary, "--help").CombinedOutput()
	for _, want := range []string{"-cpuprofile", "-log-format", "-auth-file", "loadtest scenarios", "-sweep"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("sluice --help does not mention %s:\n%s", want, out)
		}
	}
}
