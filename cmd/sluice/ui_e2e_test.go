package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// chromium runs headless Chromium (the OS package) on url for ms
// milliseconds of the page's virtual time (its timers run ahead; its
// requests to the admin port are real), then writes a screenshot to png
// (when not "") or returns the DOM.
func chromium(t *testing.T, url string, ms int, png string) string {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium not found (make deps installs it): %v", err)
	}
	args := []string{"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir(), "--window-size=1280,880", "--virtual-time-budget=" + strconv.Itoa(ms)}
	if png != "" {
		args = append(args, "--screenshot="+png)
	} else {
		args = append(args, "--dump-dom")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	return stdout.String()
}

var bodyRE = regexp.MustCompile(`<body data-frames="(\d+)" data-errors="(\d+)" data-resources="([^"]*)"`)

// The live page on the admin port: it loads in headless Chromium with no
// error, asks nothing of any other origin (its CSP forbids it; the
// browser's resource list shows it), draws its charts, and the charts
// change while load runs (two screenshots differ).
func TestE2ELivePage(t *testing.T) {
	up := upstreamServer(t)
	s := start(t, up.URL, `adaptive:
  algorithm: gradient2
  classes:
    - {name: critical, share: 0.5, match: {required_headers: {X-Priority: critical}}}
    - {name: bulk, share: 0.5}
rules:
  - {rule_id: per_ip, identifier_type: ip_address, algorithm: token_bucket, limit: 100000, window: 1s}
`)
	resp, err := http.Get("http://" + s.admn + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := readAll(resp)
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "connect-src 'self'") ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /ui: %d %v", resp.StatusCode, resp.Header)
	}
	if len(page) > 32<<10 || regexp.MustCompile(`(?i)(src|href)="(https?:)?//`).MatchString(page) {
		t.Fatalf("the page is %d bytes or refers elsewhere", len(page))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 5 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", "http://"+s.proxy+"/", nil)
				if i == 0 {
					req.Header.Set("X-Priority", "critical")
				}
				if resp, err := client.Do(req); err == nil {
					resp.Body.Close()
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	// Chromium's virtual time runs the page's one-second timers ahead, so
	// its polls are only milliseconds apart in real time, and a series
	// that did not move between them is left out of the legend: a few
	// fresh loads give every counter the chance to move.
	url := "http://" + s.admn + "/ui"
	var dom string
	var m []string
	for try := 0; try < 4; try++ {
		dom = chromium(t, url, 4000, "")
		m = bodyRE.FindStringSubmatch(dom)
		if m == nil {
			t.Fatalf("no page state in the DOM:\n%.2000s", dom)
		}
		if strings.Contains(dom, "per_ip allowed") && strings.Contains(dom, "critical admitted") {
			break
		}
	}
	if frames, _ := strconv.Atoi(m[1]); frames < 2 {
		t.Errorf("%s frames drawn in 4 s of the page's time, want several", m[1])
	}
	if m[2] != "0" {
		t.Errorf("%s errors in the page", m[2])
	}
	for _, r := range strings.Fields(m[3]) {
		if !strings.HasPrefix(r, "http://"+s.admn+"/") {
			t.Errorf("the page asked %s, outside the admin port", r)
		}
	}
	if !strings.Contains(dom, "per_ip allowed") || !strings.Contains(dom, "critical admitted") {
		legends := dom
		if i := strings.Index(dom, "<main>"); i >= 0 {
			legends = dom[i:]
		}
		t.Errorf("legends lack the rule or the class after 4 loads:\n%.3000s", legends)
	}
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.png"), filepath.Join(dir, "b.png")
	chromium(t, url, 3000, a)
	chromium(t, url, 5000, b)
	pa, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(pa) < 5000 || bytes.Equal(pa, pb) {
		t.Errorf("screenshots of %d and %d bytes: want two different drawings while load runs", len(pa), len(pb))
	}
}

func readAll(resp *http.Response) (string, error) {
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err := b.ReadFrom(resp.Body)
	return b.String(), err
}

// The page opened after the traffic shows it: the server keeps the last
// five minutes (/v1/history) and the page draws them before its first poll
// (issue 25, item 21: "no rule decided anything yet" after 80 decisions).
func TestE2ELivePageShowsTheLastMinutes(t *testing.T) {
	up := upstreamServer(t)
	s := start(t, up.URL, "rules:\n  - {rule_id: g, identifier_type: global, algorithm: fixed_window, limit: 40, window: 1h}\n")
	type point struct {
		Rules []struct {
			RuleID  string `json:"rule_id"`
			Allowed uint64 `json:"allowed"`
			Denied  uint64 `json:"denied"`
		} `json:"rules"`
	}
	history := func() []point {
		t.Helper()
		_, body := get(t, "http://"+s.admn+"/v1/history")
		var h struct{ Points []point }
		if err := json.Unmarshal([]byte(body), &h); err != nil {
			t.Fatalf("history: %v\n%s", err, body)
		}
		return h.Points
	}
	for range 80 {
		get(t, "http://"+s.proxy+"/")
	}
	// Until a point after the traffic is kept (one a second).
	var points []point
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		points = history()
		if n := len(points); n >= 2 && len(points[n-1].Rules) == 1 && points[n-1].Rules[0].Allowed+points[n-1].Rules[0].Denied == 80 {
			break
		}
	}
	last := points[len(points)-1]
	if len(last.Rules) != 1 || last.Rules[0].Allowed != 40 || last.Rules[0].Denied != 40 {
		t.Fatalf("history's last point %+v, want 40 allowed and 40 denied", last)
	}
	// One poll's worth of the page's time: what it shows came from the
	// history.
	dom := chromium(t, "http://"+s.admn+"/ui", 200, "")
	m := regexp.MustCompile(`id="l-rules">(.*?)</div>`).FindStringSubmatch(dom)
	if m == nil || !strings.Contains(m[1], "g allowed") || !strings.Contains(m[1], "g denied") {
		t.Errorf("the page opened after the traffic does not show it: rules legend %q", m)
	}
}
