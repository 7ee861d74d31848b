package replay_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/replay"
	"github.com/sluicehq/sluice/replay/logfmt/logfmttest"
)

// tenRules are ten memory-store rules of every kind of identity and
// match, as BENCHMARKS.md's replay figures use.
const tenRules = `rules:
  - {rule_id: ip_tb,    identifier_type: ip_address, algorithm: token_bucket,   limit: 600,   window: 1m, burst: 100}
  - {rule_id: ip_sw,    identifier_type: ip_address, algorithm: sliding_window, limit: 1000,  window: 1m}
  - {rule_id: user_fw,  identifier_type: user_id,    algorithm: fixed_window,   limit: 5000,  window: 1h}
  - {rule_id: user_gc,  identifier_type: user_id,    algorithm: gcra,           limit: 100,   window: 1s, burst: 50}
  - {rule_id: key_tb,   identifier_type: api_key,    algorithm: token_bucket,   limit: 2000,  window: 1m}
  - {rule_id: orders,   identifier_type: user_id,    algorithm: sliding_window, limit: 300,   window: 1m, match: {path_pattern: /api/orders/*, methods: [GET]}}
  - {rule_id: api,      identifier_type: ip_address, algorithm: fixed_window,   limit: 1000,  window: 1m, match: {path_pattern: /api/**}}
  - {rule_id: login,    identifier_type: ip_address, algorithm: fixed_window,   limit: 10,    window: 1m, match: {path_pattern: /login, methods: [POST]}}
  - {rule_id: writes,   identifier_type: user_id,    algorithm: leaky_bucket,   limit: 60,    window: 1m, burst: 20, nodelay: true, match: {methods: [POST, PUT]}}
  - {rule_id: global,   identifier_type: global,     algorithm: token_bucket,   limit: 100000, window: 1s}
`

// BenchmarkReplay replays an nginx log of 100,000 lines (2,000 clients at
// 200 requests a second) through ten rules: lines per second is the
// figure (b.SetBytes counts lines, not bytes, so MB/s reads as millions of
// lines a second).
func BenchmarkReplay(b *testing.B) {
	cfg, err := config.Parse("ten.yaml", []byte(tenRules))
	if err != nil {
		b.Fatal(err)
	}
	entries := logfmttest.Traffic(5, 100_000, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), 200, 2000)
	log, _ := logfmttest.Log("nginx", entries, 0)
	data := []byte(log)
	b.SetBytes(int64(len(entries)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := replay.Run(context.Background(), []*config.Config{cfg}, []replay.Source{{Name: "bench", R: bytes.NewReader(data)}}, replay.Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
