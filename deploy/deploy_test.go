// Package deploy_test checks what operators deploy (deploy/) with the real
// tools: promtool for the Prometheus rules, systemd-analyze for the unit.
package deploy_test

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	built     string
	buildErr  error
)

// staticBinary builds sluice once for the package's tests, with the
// image's flags (CGO_ENABLED=0 -trimpath -ldflags "-s -w -X ...").
func staticBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sluice-deploy")
		if err != nil {
			buildErr = err
			return
		}
		built = filepath.Join(dir, "sluice")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version=v0.0.0-test", "-o", built, "../cmd/sluice")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// tool finds a binary the test needs; make test installs it (no skipping).
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found (make deps installs it): %v", name, err)
	}
	return p
}

// The Prometheus rules load, and their unit tests (alerts firing and not
// firing on given series) pass.
func TestPrometheusRules(t *testing.T) {
	promtool := tool(t, "promtool")
	for _, args := range [][]string{
		{"check", "rules", "prometheus/sluice-rules.yml"},
		{"test", "rules", "prometheus/sluice-rules.test.yml"},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// The systemd unit passes systemd-analyze verify with no complaint (an
// unknown or misspelt directive is a warning there; here it fails), its
// ExecStart pointed at a freshly built binary.
func TestSystemdUnit(t *testing.T) {
	analyze := tool(t, "systemd-analyze")
	dir := t.TempDir()
	bin := staticBinary(t)
	unit, err := os.ReadFile("systemd/sluice.service")
	if err != nil {
		t.Fatal(err)
	}
	text := string(unit)
	for _, want := range []string{"ExecReload=/bin/kill -HUP $MAINPID", "KillSignal=SIGTERM", "NoNewPrivileges=yes", "DynamicUser=yes"} {
		if !strings.Contains(text, want) {
			t.Errorf("unit lacks %q", want)
		}
	}
	path := filepath.Join(dir, "sluice.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(text, "/usr/local/bin/sluice", bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	// And the command line it runs is one sluice accepts: a bad flag exits 2.
	cmd := strings.Fields(strings.TrimPrefix(lineWith(text, "ExecStart="), "ExecStart="))
	cmd[0] = bin
	cfg := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfg, []byte("upstream: http://127.0.0.1:1\nlisten: 127.0.0.1:0\nadmin: 127.0.0.1:0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, a := range cmd {
		if a == "/etc/sluice/sluice.yaml" {
			cmd[i] = cfg
		}
	}
	check := exec.Command(bin, "check", "-config", cfg)
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("check: %v\n%s", err, out)
	}
	if out, err := exec.Command(cmd[0], append(cmd[1:], "-help")...).CombinedOutput(); strings.Contains(string(out), "flag provided but not defined") {
		t.Errorf("ExecStart's flags: %v\n%s", err, out)
	}
}

func lineWith(text, prefix string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// The image's build flags (the Dockerfile's, which make static shares)
// make a static binary that runs from an empty directory with an empty
// environment, as on distroless: no dynamic loader, no libc.
func TestStaticBinary(t *testing.T) {
	docker, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	line := lineWith(string(docker), "RUN CGO_ENABLED=0 go build")
	if !strings.Contains(line, `-trimpath -ldflags "-s -w -X main.version=${VERSION}"`) {
		t.Fatalf("Dockerfile build line %q lacks the static flags", line)
	}
	empty := t.TempDir()
	bin := staticBinary(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary asks for a dynamic loader: not static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary links %v", libs)
	}
	run := exec.Command(bin, "version")
	run.Dir, run.Env = empty, []string{}
	out, err := run.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "sluice v0.0.0-test" {
		t.Errorf("sluice version from an empty directory: %v %q", err, out)
	}
	// The image's default configuration is valid.
	if out, err := exec.Command(bin, "check", "-config", "sluice.yaml").CombinedOutput(); err != nil {
		t.Errorf("deploy/sluice.yaml: %v\n%s", err, out)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built != "" {
		os.RemoveAll(filepath.Dir(built))
	}
	os.Exit(code)
}
