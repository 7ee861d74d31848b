package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/static"
)

// TestBadFixtures: every file in testdata/bad is rejected with an error that
// names the file and contains the text of its first line ("# want: ...").
func TestBadFixtures(t *testing.T) {
	files, _ := filepath.Glob("testdata/bad/*.yaml")
	if len(files) < 15 {
		t.Fatalf("only %d fixtures", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, _ := os.ReadFile(f)
			first, _, _ := strings.Cut(string(data), "\n")
			want := strings.TrimPrefix(first, "# want: ")
			_, err := config.Load(f)
			if err == nil {
				t.Fatalf("accepted; want an error containing %q", want)
			}
			if !strings.HasPrefix(err.Error(), f+": ") || !strings.Contains(err.Error(), want) {
				t.Errorf("error %q\n\twant it to start with the file and contain %q", err, want)
			}
		})
	}
}

func TestExampleAndDefaults(t *testing.T) {
	c, err := config.Load("../examples/basic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Rules) != 2 || c.Rules[1].Mode != "hard" || *c.Rules[1].SoftPercent != 10 {
		t.Errorf("rules: %+v", c.Rules)
	}
	p, err := c.Rules[1].Policy()
	if err != nil || p.Window != time.Minute || p.Algorithm != static.SlidingWindow || p.Limit != 50 {
		t.Errorf("policy %+v, %v", p, err)
	}
	if c.Store.Memory.MaxKeys != static.DefaultMaxKeys || c.Queue.MaxWait.D() != 500*time.Millisecond || c.Queue.ClosedLoopMaxWait.D() != time.Second || c.Adaptive.ElasticHeadroom != 0.8 {
		t.Errorf("defaults not filled: %+v", c)
	}
}

func TestJSONAndSeconds(t *testing.T) {
	c, err := config.Parse("c.json", []byte(`{"upstream": "http://127.0.0.1:1", "queue": {"max_wait": 0.25, "max_size": 0, "closed_loop_max_wait": 0},
		"rules": [{"rule_id": "j", "identifier_type": "header:X-Tenant", "algorithm": "gcra", "limit": 5, "window": "2s", "burst": 3}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Queue.MaxWait.D() != 250*time.Millisecond || *c.Queue.MaxSize != 0 || c.Queue.ClosedLoopMaxWait.D() != 0 {
		t.Errorf("queue %+v", c.Queue)
	}
	if p, _ := c.Rules[0].Policy(); p.Window != 2*time.Second || p.Burst != 3 {
		t.Errorf("policy %+v", p)
	}
}

// FuzzParse: any input is rejected with an error or accepted as a config
// whose every rule yields a valid policy; never a panic.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/bad/*.yaml")
	seeds = append(seeds, "../examples/basic.yaml")
	for _, s := range seeds {
		data, _ := os.ReadFile(s)
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Parse("fuzz.yaml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.yaml: ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for _, r := range c.Rules {
			p, err := r.Policy()
			if err != nil || p.Validate() != nil {
				t.Fatalf("accepted rule %q with a bad policy: %v", r.RuleID, err)
			}
		}
	})
}

// ParseRule takes one rule as a znode holds it, strictly.
func TestParseRule(t *testing.T) {
	r, err := config.ParseRule("znode a", []byte(`{"rule_id":"a","identifier_type":"global","algorithm":"gcra","limit":5,"window":"2s"}`))
	if err != nil || r.RuleID != "a" || *r.Limit != 5 || r.Window.D() != 2*time.Second {
		t.Fatalf("%+v %v", r, err)
	}
	for _, bad := range []string{``, `{"rule_id":"a","unknown":1}`, `{"rule_id":"a","limit":"x"}`, `[1,2]`, "rule_id: a\n---\nrule_id: b\n", `{"rule_id":`} {
		if _, err := config.ParseRule("znode a", []byte(bad)); err == nil || !strings.HasPrefix(err.Error(), "znode a: ") {
			t.Errorf("%q: %v, want an error naming the znode", bad, err)
		}
	}
}

// FuzzParseRule: any bytes in a znode give a rule or an error, never a
// panic; a rule that parses validates or is refused by WithRules.
func FuzzParseRule(f *testing.F) {
	f.Add([]byte(`{"rule_id":"a","identifier_type":"global","algorithm":"gcra","limit":5,"window":"2s"}`))
	f.Add([]byte(`{"rule_id":"b","identifier_type":["user_id","ip_address"],"algorithm":"sliding_log","limit":1,"window_size_seconds":0.5,"match":{"path_pattern":"/a/**"}}`))
	f.Add([]byte("rule_id: c\nlimit: -1\n"))
	f.Add([]byte(`{"rule_id":"d","identifier_type":"api_key","algorithm":"token_bucket","limit":100,"window":"1m","cost_from":{"json":"usage.total_tokens"},"cost_estimate":"mean","cost_default":3}`))
	f.Add([]byte("rule_id: e\nidentifier_type: global\nalgorithm: fixed_window\nlimit: 9\nwindow: 1s\ncost_from: {header: X-Cost}\n"))
	base := &config.Config{}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := config.ParseRule("znode", data)
		if err != nil {
			return
		}
		_, _ = base.WithRules([]config.Rule{r})
	})
}

// cost_from in each of its forms, with its defaults: the header name kept
// canonical, cost_default 1, cost_estimate none.
func TestCostFrom(t *testing.T) {
	c, err := config.Parse("c.yaml", []byte(`rules:
  - {rule_id: h, identifier_type: api_key, algorithm: token_bucket, limit: 1000, window: 1m, cost_from: {header: x-tokens-used}}
  - {rule_id: j, identifier_type: api_key, algorithm: fixed_window, limit: 1000, window: 1m, cost_from: {json: usage.total_tokens}, cost_default: 50, cost_estimate: mean}
  - {rule_id: u, identifier_type: api_key, algorithm: gcra, limit: 1000, window: 1m, cost_from: upstream_ms, cost_estimate: 20}
  - {rule_id: b, identifier_type: api_key, algorithm: sliding_window, limit: 1000, window: 1m, cost_from: response_bytes, cost_default: 0}
  - {rule_id: d, algorithm: fixed_window, limit: 1000, window: 1m, descriptor: {domain: d, entries: [{key: k}]}, cost_from: hits_addend}
  - {rule_id: n, identifier_type: api_key, algorithm: fixed_window, limit: 10, window: 1m}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		from     string
		def      int64
		estimate string
	}{
		{"header:X-Tokens-Used", 1, "none"}, {"json:usage.total_tokens", 50, "mean"}, {"upstream_ms", 1, "20"},
		{"response_bytes", 0, "none"}, {"hits_addend", 1, "none"},
	}
	for i, w := range want {
		r := c.Rules[i]
		if r.CostFrom == nil || r.CostFrom.String() != w.from || *r.CostDefault != w.def || r.CostEstimate.String() != w.estimate {
			t.Errorf("rule %s: cost_from %v, default %v, estimate %v; want %+v", r.RuleID, r.CostFrom, r.CostDefault, r.CostEstimate, w)
		}
	}
	if n := c.Rules[5]; n.CostFrom != nil || n.CostDefault != nil {
		t.Errorf("a rule without cost_from: %+v", n)
	}
}

// TestInitialLimitWithinBounds: an unset initial_limit is 20 brought
// within the bounds the config sets, not an error about a value the user
// never wrote.
func TestInitialLimitWithinBounds(t *testing.T) {
	for yaml, want := range map[string]int{
		"adaptive: {max_limit: 16}":                    16,
		"adaptive: {min_limit: 50}":                    50,
		"adaptive: {}":                                 20,
		"adaptive: {initial_limit: 5, max_limit: 16}":  5,
		"adaptive: {min_limit: 2, max_limit: 1000000}": 20,
	} {
		c, err := config.Parse("c.yaml", []byte(yaml))
		if err != nil {
			t.Errorf("%s: %v", yaml, err)
			continue
		}
		if c.Adaptive.InitialLimit != want {
			t.Errorf("%s: initial_limit %d, want %d", yaml, c.Adaptive.InitialLimit, want)
		}
	}
}
