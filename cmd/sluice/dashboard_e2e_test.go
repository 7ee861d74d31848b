package main_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/promtest"
)

// The Grafana dashboard works on a real Prometheus scraping a real sluice
// under a short load: every panel's queries parse and return data.
func TestE2EGrafanaDashboard(t *testing.T) {
	data, err := os.ReadFile("../../deploy/grafana/sluice.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct{ List []struct{ Name string } }
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	if len(dash.Panels) < 8 {
		t.Fatalf("%d panels", len(dash.Panels))
	}
	// Slow enough that requests overlap: the limit of 2 fills, the queue
	// fills, some are shed; a rule denies some.
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { time.Sleep(20 * time.Millisecond) })
	up := upstreamHandler(t, slow)
	s := start(t, up, `adaptive:
  algorithm: fixed
  initial_limit: 2
  min_limit: 2
  max_limit: 2
  classes:
    - {name: critical, share: 0.5, match: {required_headers: {X-Priority: critical}}}
    - {name: bulk, share: 0.5}
queue: {max_size: 2, max_wait: 50ms}
rules:
  - {rule_id: per_ip, identifier_type: ip_address, algorithm: sliding_window, limit: 40, window: 10s}
  - {rule_id: global, identifier_type: global, algorithm: token_bucket, limit: 1000, window: 1s}
`)
	prom := promtest.Start(t, s.admn)
	// Load for a few seconds, so that Prometheus scrapes it several times.
	stop := time.Now().Add(5 * time.Second)
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 5 * time.Second}
			for time.Now().Before(stop) {
				req, _ := http.NewRequest("GET", "http://"+s.proxy+"/", nil)
				if i%2 == 0 {
					req.Header.Set("X-Priority", "critical")
				}
				if resp, err := client.Do(req); err == nil {
					resp.Body.Close()
				}
			}
		}()
	}
	wg.Wait()
	// The reload counter gets a sample too.
	http.Post("http://"+s.admn+"/v1/reload", "application/json", strings.NewReader("{}"))
	// Ask until every query has data (Prometheus scrapes every second),
	// for at most 30 s; then report what is still missing.
	var failures []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		failures = failures[:0]
		for _, p := range dash.Panels {
			for _, target := range p.Targets {
				q := strings.NewReplacer(`$__rate_interval`, "30s", `$instance`, ".*", `${datasource}`, "").Replace(target.Expr)
				r := prom.Query(t, q)
				switch {
				case r.Status != "success":
					failures = append(failures, "panel "+p.Title+": "+q+": "+r.Error)
				case len(r.Data.Result) == 0:
					failures = append(failures, "panel "+p.Title+": "+q+" returned no data")
				}
			}
		}
		if len(failures) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, f := range failures {
		t.Error(f)
	}
}

// upstreamHandler serves h on a loopback port and returns its URL.
func upstreamHandler(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
