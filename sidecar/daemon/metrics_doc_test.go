package daemon_test

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/zktest"
	"github.com/sluicehq/sluice/sidecar"
	"github.com/sluicehq/sluice/sidecar/daemon"
)

// The README's metrics table names exactly the sluice_* metrics the daemon
// exposes, with their labels.
func TestREADMEMetricsTable(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(sluice_[a-z_]+)` \\| [a-z]+ \\| ([^|]*)\\|")
	documented := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		labels := strings.Split(strings.Join(strings.Fields(strings.ReplaceAll(m[2], "`", "")), ""), ",")
		sort.Strings(labels)
		documented[m[1]] = strings.Join(labels, ",")
	}
	// Every part that has metrics: classes, Redis (exact with its deny
	// cache, and eventual), regions, a cost read from responses.
	srv := redistest.Start(t)
	yaml := strings.Replace(twoPerMinute, "algorithm: off", "algorithm: gradient2, classes: [{name: main, share: 1}]", 1)
	yaml = strings.Replace(yaml, "window: 1m}", "window: 1m, scope: global}", 1)
	yaml += fmt.Sprintf("  - {rule_id: ev, identifier_type: ip_address, algorithm: fixed_window, limit: 2, window: 1m, consistency: eventual}\n"+
		"  - {rule_id: tokens, identifier_type: api_key, algorithm: fixed_window, limit: 100, window: 1m, cost_from: {header: X-Tokens-Used}}\n"+
		"store:\n  type: redis\n  redis: {region: eu, regions: {eu: {addrs: [%q]}}}\n", srv.Addr())
	cfg, err := config.Parse("t.yaml", []byte("upstream: http://127.0.0.1:1\n"+yaml))
	if err != nil {
		t.Fatal(err)
	}
	s, err := daemon.New(cfg, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Engine.Close()
	h := sidecar.Middleware(s.Engine, ok)
	for range 3 {
		do(h, "GET", "/")
	}
	mfs, err := s.Engine.Metrics().Gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// And the rules source's, from a sidecar whose rules are in ZooKeeper.
	zk := zktest.Start(t)
	zcfg, err := config.Parse("z.yaml", []byte(fmt.Sprintf("upstream: http://127.0.0.1:1\nrules_source:\n  zookeeper: {servers: [%q]}\n", zk.Addr())))
	if err != nil {
		t.Fatal(err)
	}
	zs, err := daemon.New(zcfg, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	zmfs, err := zs.Engine.Metrics().Gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	_ = zs.Engine.Close()
	mfs = append(mfs, zmfs...)
	exposed := map[string]string{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "sluice_") {
			continue
		}
		var labels []string
		if ms := mf.GetMetric(); len(ms) > 0 {
			for _, l := range ms[0].GetLabel() {
				labels = append(labels, l.GetName())
			}
		}
		sort.Strings(labels)
		exposed[mf.GetName()] = strings.Join(labels, ",")
	}
	for name, labels := range exposed {
		doc, ok := documented[name]
		if !ok {
			t.Errorf("%s is exposed but not in the README's metrics table", name)
			continue
		}
		if doc != labels {
			t.Errorf("%s: README labels %q, exposed %q", name, doc, labels)
		}
	}
	for name := range documented {
		if _, ok := exposed[name]; !ok {
			t.Errorf("README documents %s, which /metrics does not expose", name)
		}
	}
}
