package main_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/redistest"
)

// The sequences of envoyproxy/ratelimit's own integration tests
// (test/integration) and docker-compose scripts (integration-test/scripts),
// replayed on `sluice run` with the peer's kind of configuration: its
// runtime folder in rls.envoy_configs, its Redis, its settings. Every step
// is one ShouldRateLimit call whose whole answer is compared as the peer's
// tests compare it (proto equality, duration_until_reset taken from the
// answer after checking it is whole seconds within the unit): decision,
// each status's code, limit and remaining, no headers, and the dynamic
// metadata where the peer's compose setup turns it on. The steps encode
// the peer's documented behaviour in this project's own words and
// configuration files; none of its code or files is used.

// peerDomains are the peer's integration runtime files, as this test
// writes them (their content described, not copied: the same descriptors
// and limits).
var peerDomains = map[string]string{
	"basic.yaml": `domain: basic
descriptors:
  - {key: key1, rate_limit: {unit: second, requests_per_unit: 50}}
  - {key: one_per_minute, rate_limit: {unit: minute, requests_per_unit: 1}}
`,
	"another.yaml": `domain: another
descriptors:
  - {key: key2, rate_limit: {unit: minute, requests_per_unit: 20}}
  - {key: key3, rate_limit: {unit: hour, requests_per_unit: 10}}
  - {key: key4, rate_limit: {unit: day, requests_per_unit: 20}}
`,
	"share_threshold.yaml": `domain: share-threshold-test
descriptors:
  - {key: files, value: "files/*", share_threshold: true, rate_limit: {unit: hour, requests_per_unit: 10}}
  - {key: files_no_share, value: "files_no_share/*", rate_limit: {unit: hour, requests_per_unit: 10}}
`,
}

// peerReload is the file the peer's reload test drops into the folder.
const peerReload = `domain: reload
descriptors:
  - {key: key1, rate_limit: {unit: second, requests_per_unit: 50}}
  - {key: block, rate_limit: {unit: second, requests_per_unit: 0}}
  - {key: one_per_minute, rate_limit: {unit: minute, requests_per_unit: 1}}
`

// peerExample is the descriptor tree of the peer's docker-compose example
// (examples/ratelimit/config/example.yaml), under the domain named.
func peerExample(domain string) string {
	return `domain: ` + domain + `
descriptors:
  - key: category
    value: account
    rate_limit: {unit: minute, requests_per_unit: 4, replaces: [{name: bkthomps}, {name: fake_name}]}
  - key: source_cluster
    value: proxy
    descriptors:
      - {key: destination_cluster, value: bkthomps, rate_limit: {unit: minute, requests_per_unit: 2, replaces: [{name: bkthomps}]}}
      - {key: destination_cluster, value: mock, rate_limit: {unit: minute, requests_per_unit: 1}}
      - {key: destination_cluster, value: override, rate_limit: {unit: minute, requests_per_unit: 2, replaces: [{name: banned_limit}]}}
      - {key: destination_cluster, value: fake, rate_limit: {name: fake_name, unit: minute, requests_per_unit: 2}}
  - key: foo
    rate_limit: {unit: minute, requests_per_unit: 2}
    descriptors:
      - {key: bar, rate_limit: {unit: minute, requests_per_unit: 3}}
      - {key: bar, value: bkthomps, rate_limit: {name: bkthomps, unit: minute, requests_per_unit: 1}}
      - {key: bar, value: banned, rate_limit: {name: banned_limit, unit: minute, requests_per_unit: 0}}
      - {key: baz, rate_limit: {unit: second, requests_per_unit: 1}}
      - {key: baz, value: not-so-shady, rate_limit: {unit: minute, requests_per_unit: 3}}
      - {key: baz, value: shady, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 3}}
      - {key: bay, rate_limit: {unlimited: true}}
  - key: unspec
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - {key: qux, rate_limit: {unlimited: true}}
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata: {service_with_quota: {name: service_1}}
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
    metadata: {service_with_quota: {name: service_2}}
`
}

// pd is one descriptor of a step: its entries and, when hits is not
// negative, its own hits_addend.
type pd struct {
	kv   []string
	hits int64
}

func e(kv ...string) pd { return pd{kv: kv, hits: -1} }

func (d pd) h(n int64) pd { d.hits = n; return d }

// ps is a descriptor's status as the peer answers it: code, the limit
// (rpu 0: none), what remains.
type ps struct {
	over      bool
	rpu       uint32
	unit      rlsv3.RateLimitResponse_RateLimit_Unit
	remaining uint32
	name      string
}

const (
	sec    = rlsv3.RateLimitResponse_RateLimit_SECOND
	minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
	day    = rlsv3.RateLimitResponse_RateLimit_DAY
)

func ok(rpu uint32, u rlsv3.RateLimitResponse_RateLimit_Unit, rem uint32) ps {
	return ps{rpu: rpu, unit: u, remaining: rem}
}
func over(rpu uint32, u rlsv3.RateLimitResponse_RateLimit_Unit) ps {
	return ps{over: true, rpu: rpu, unit: u}
}
func named(s ps, name string) ps { s.name = name; return s }

// noLimit is a descriptor no rule matched; unlimited one that matched an
// unlimited rule (remaining is the largest uint32, as the peer answers).
var (
	noLimit   = ps{}
	unlimited = ps{remaining: math.MaxUint32}
)

// pstep is one call and the whole answer the peer gives to it.
type pstep struct {
	what    string
	domain  string
	descs   []pd
	reqHits uint32
	over    bool
	st      []ps
	// meta is the merged metadata's service_with_quota name of the
	// descriptors that passed ("" none), checked when metadata is on.
	meta string
}

// peerRLS is a sluice serving the peer's configuration, and a client.
type peerRLS struct {
	s        *sluice
	c        rlsv3.RateLimitServiceClient
	metadata bool // rls.response_dynamic_metadata is on
	steps    int  // steps replayed
}

func (p *peerRLS) call(t *testing.T, st pstep) *rlsv3.RateLimitResponse {
	t.Helper()
	req := &rlsv3.RateLimitRequest{Domain: st.domain, HitsAddend: st.reqHits}
	for _, d := range st.descs {
		rd := &commonv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(d.kv); i += 2 {
			rd.Entries = append(rd.Entries, &commonv3.RateLimitDescriptor_Entry{Key: d.kv[i], Value: d.kv[i+1]})
		}
		if d.hits >= 0 {
			rd.HitsAddend = wrapperspb.UInt64(uint64(d.hits))
		}
		req.Descriptors = append(req.Descriptors, rd)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := p.c.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", st.what, err)
	}
	return resp
}

// roomInMinute waits, if the current minute has less than 15 s left, for
// the next one, so that a sequence on minute windows runs inside one
// window, as the peer's tests (on fresh random values each run) assume.
func (p *peerRLS) roomInMinute(t *testing.T) {
	t.Helper()
	resp := p.call(t, pstep{what: "the minute's end", domain: "basic", descs: []pd{e("one_per_minute", "clock")}, reqHits: 1})
	left := resp.GetStatuses()[0].GetDurationUntilReset().AsDuration()
	if left <= 0 || left > time.Minute {
		t.Fatalf("duration_until_reset of a minute window: %v", left)
	}
	if left < 15*time.Second {
		// The binary counts on the wall clock: nothing to advance but time.
		time.Sleep(left + 100*time.Millisecond)
	}
}

// run replays steps and reports every answer that differs from the
// peer's; it returns false if one did.
func (p *peerRLS) run(t *testing.T, steps []pstep) bool {
	t.Helper()
	same := true
	for _, st := range steps {
		p.steps++
		resp := p.call(t, st)
		if diff := p.compare(st, resp); diff != "" {
			t.Errorf("%s: %s\n got %v", st.what, diff, resp)
			same = false
		}
	}
	return same
}

// compare builds the peer's answer to st, borrowing only the answer's
// duration_until_reset (after checking it as the peer computes it), and
// says how resp differs from it.
func (p *peerRLS) compare(st pstep, resp *rlsv3.RateLimitResponse) string {
	want := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	if st.over {
		want.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if len(resp.GetStatuses()) != len(st.st) {
		return fmt.Sprintf("%d statuses, want %d", len(resp.GetStatuses()), len(st.st))
	}
	for i, w := range st.st {
		ws := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: w.remaining}
		if w.over {
			ws.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if w.rpu > 0 || w.over {
			ws.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: w.name, RequestsPerUnit: w.rpu, Unit: w.unit}
			dur := resp.Statuses[i].GetDurationUntilReset()
			unit := map[rlsv3.RateLimitResponse_RateLimit_Unit]int64{sec: 1, minute: 60, hour: 3600, day: 86400}[w.unit]
			if dur.GetNanos() != 0 || dur.GetSeconds() < 1 || dur.GetSeconds() > unit {
				return fmt.Sprintf("status %d: duration_until_reset %v, want whole seconds in [1, %d]", i, dur.AsDuration(), unit)
			}
			ws.DurationUntilReset = durationpb.New(dur.AsDuration())
		}
		want.Statuses = append(want.Statuses, ws)
	}
	if p.metadata {
		want.DynamicMetadata = peerMetadata(st)
	}
	if !proto.Equal(want, resp) {
		return fmt.Sprintf("differs from the peer's\nwant %v", want)
	}
	return ""
}

// peerMetadata is the dynamic metadata the peer answers st with.
func peerMetadata(st pstep) *structpb.Struct {
	var descs []any
	for _, d := range st.descs {
		var entries []any
		for i := 0; i+1 < len(d.kv); i += 2 {
			entries = append(entries, d.kv[i]+"="+d.kv[i+1])
		}
		m := map[string]any{"entries": entries}
		if d.hits >= 0 {
			m["hitsAddend"] = float64(d.hits)
		}
		descs = append(descs, m)
	}
	m := map[string]any{"domain": st.domain, "descriptors": descs}
	if st.reqHits != 0 {
		m["hitsAddend"] = float64(st.reqHits)
	}
	if st.meta != "" {
		m["metadata"] = map[string]any{"service_with_quota": map[string]any{"name": st.meta}}
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		panic(err)
	}
	return s
}

// startPeerRLS runs sluice on store with the peer's runtime folder and
// the compose example under the domains named.
func startPeerRLS(t *testing.T, store string, metadata bool, exampleDomains ...string) (*peerRLS, string) {
	t.Helper()
	folder := filepath.Join(t.TempDir(), "config")
	if err := os.Mkdir(folder, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, text := range peerDomains {
		writeFile(t, folder, name, text)
	}
	for _, d := range exampleDomains {
		writeFile(t, folder, d+".yaml", peerExample(d))
	}
	s := start(t, upstreamServer(t).URL, fmt.Sprintf(`adaptive: {algorithm: off}
%s
rls: {listen: "127.0.0.1:0", response_dynamic_metadata: %v, envoy_configs: [%s]}
`, store, metadata, filepath.ToSlash(folder)))
	return &peerRLS{s: s, c: rlsClient(t, s), metadata: metadata}, folder
}

// peerStores are the peer's Redis setups: one node and a Cluster.
func peerStores(t *testing.T) map[string]func(t *testing.T) string {
	return map[string]func(t *testing.T) string{
		"redis": func(t *testing.T) string {
			return fmt.Sprintf("store: {type: redis, redis: {addrs: [%q]}}", redistest.Start(t).Addr())
		},
		"cluster": func(t *testing.T) string {
			cl := redistest.StartCluster(t)
			return `store: {type: redis, redis: {addrs: ["` + strings.Join(cl.Addrs(), `", "`) + `"]}}`
		},
	}
}

// TestE2EPeerIntegrationSequences replays the peer's test/integration
// sequences: its basic test (an unknown domain, a per-second key, 25 hits
// on 20 a minute with the over_limit count, two keys in one call, the
// reset time counting down), its share_threshold test and its reload test.
func TestE2EPeerIntegrationSequences(t *testing.T) {
	for name, store := range peerStores(t) {
		t.Run(name, func(t *testing.T) {
			p, folder := startPeerRLS(t, store(t), false)
			p.roomInMinute(t)
			p.run(t, peerBasic())
			if got := metric(t, p.s, `ratelimit_service_rate_limit_over_limit{domain="another",key1="key2",key2=""}`); got != "5" {
				t.Errorf("over_limit of another.key2 = %q, want 5 (the 21st to 25th hits)", got)
			}
			// The reset time counts down: the same key asked again later
			// answers a shorter duration_until_reset (the peer waits 2 s;
			// here the second call is repeated until a second has turned).
			first := p.call(t, pstep{what: "key4 first", domain: "another", descs: []pd{e("key4", "durTest")}, reqHits: 1})
			waitFor(t, func() bool {
				p.steps++
				later := p.call(t, pstep{what: "key4 later", domain: "another", descs: []pd{e("key4", "durTest")}, reqHits: 1})
				return later.Statuses[0].GetDurationUntilReset().GetSeconds() < first.Statuses[0].GetDurationUntilReset().GetSeconds()
			})
			p.run(t, peerShareThreshold())
			// Reload: a file dropped into the folder is loaded; removed, it
			// is gone.
			p.run(t, []pstep{{what: "reload.block before the file", domain: "reload", descs: []pd{e("block", "foo")}, reqHits: 1, st: []ps{noLimit}}})
			writeFile(t, folder, "reload.yaml", peerReload)
			waitFor(t, func() bool {
				return p.call(t, pstep{domain: "reload", descs: []pd{e("block", "foo")}, reqHits: 1}).OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT
			})
			p.run(t, []pstep{{what: "reload.key1 after the file", domain: "reload", descs: []pd{e("key1", "foo")}, reqHits: 1, st: []ps{ok(50, sec, 49)}}})
			if err := os.Remove(filepath.Join(folder, "reload.yaml")); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool {
				return p.call(t, pstep{domain: "reload", descs: []pd{e("block", "foo")}, reqHits: 1}).OverallCode == rlsv3.RateLimitResponse_OK
			})
			t.Logf("%s: %d steps replayed", name, p.steps)
		})
	}
}

// peerBasic is the peer's basic integration sequence.
func peerBasic() []pstep {
	const v = ""
	steps := []pstep{
		{what: "unknown domain", domain: "foo", descs: []pd{e("hello", "world")}, reqHits: 1, st: []ps{noLimit}},
		{what: "basic.key1", domain: "basic", descs: []pd{e("key1", "foo"+v)}, reqHits: 1, st: []ps{ok(50, sec, 49)}},
	}
	for i := range 25 {
		st := pstep{what: fmt.Sprintf("another.key2 hit %d", i+1), domain: "another", descs: []pd{e("key2", "r1-"+v)}, reqHits: 1,
			st: []ps{ok(20, minute, uint32(19-i))}}
		if i >= 20 {
			st.over, st.st = true, []ps{over(20, minute)}
		}
		steps = append(steps, st)
	}
	for i := range 15 {
		st := pstep{what: fmt.Sprintf("another.key2+key3 hit %d", i+1), domain: "another",
			descs: []pd{e("key2", "r2-"+v), e("key3", "r2-"+v)}, reqHits: 1,
			st: []ps{ok(20, minute, uint32(19-i)), ok(10, hour, uint32(max(9-i, 0)))}}
		if i >= 10 {
			// key3 is over; key2 is still counted, as the peer's Redis
			// counts every descriptor of a call.
			st.over, st.st[1] = true, over(10, hour)
		}
		steps = append(steps, st)
	}
	return steps
}

// peerShareThreshold is the peer's share_threshold sequence: values of a
// shared pattern use one counter, those of an ordinary pattern their own.
func peerShareThreshold() []pstep {
	var steps []pstep
	for i := range 10 {
		steps = append(steps, pstep{what: fmt.Sprintf("files/a.pdf %d", i+1), domain: "share-threshold-test",
			descs: []pd{e("files", "files/a.pdf")}, reqHits: 1, st: []ps{ok(10, hour, uint32(9-i))}})
	}
	steps = append(steps, pstep{what: "files/b.csv shares the threshold", domain: "share-threshold-test",
		descs: []pd{e("files", "files/b.csv")}, reqHits: 1, over: true, st: []ps{over(10, hour)}})
	for i := range 10 {
		steps = append(steps, pstep{what: fmt.Sprintf("files_no_share value %d", i), domain: "share-threshold-test",
			descs: []pd{e("files_no_share", fmt.Sprintf("files_no_share/%d", i))}, reqHits: 1, st: []ps{ok(10, hour, 9)}})
	}
	return steps
}

// The descriptors Envoy sends for the compose example's routes
// (examples/envoy/proxy.yaml): one per rate_limits entry whose request
// headers are all present, in route order.
func twoheader(foo, bar, baz string) []pd {
	var ds []pd
	if bar != "" {
		ds = append(ds, e("foo", foo, "bar", bar))
	}
	if baz != "" {
		ds = append(ds, e("foo", foo, "baz", baz))
	}
	return ds
}

func fourheader(foo, bar, dst string) []pd {
	return []pd{e("foo", foo, "bar", bar), e("source_cluster", "proxy", "destination_cluster", dst)}
}

func fiveheader(foo, bar, dst, category string) []pd {
	return append(fourheader(foo, bar, dst), e("category", category))
}

// TestE2EPeerComposeSequences replays the peer's docker-compose scripts
// (integration-test/scripts) as the calls its Envoy makes for each curl,
// with RESPONSE_DYNAMIC_METADATA on as in its compose file: quota mode
// and the token-quota pattern (hits_addend 0 before, 1 at the stream's
// end), routing by the metadata of the descriptors that passed, replaces,
// shadow mode, a plain limit and a detailed metric. The scripts that share
// the quota counters and wait a minute for them run on a domain each (the
// same tree), so that one wait serves all three.
func TestE2EPeerComposeSequences(t *testing.T) {
	for name, store := range peerStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // the minute's wait, once for both stores
			p, _ := startPeerRLS(t, store(t), true, "rl", "rl_quota", "rl_token")
			p.roomInMinute(t)
			start := time.Now()
			p.run(t, composeMultiservice())
			p.run(t, composeQuota())
			p.run(t, composeTokenQuota())
			p.run(t, composeReplaces())
			p.run(t, composeTriggerAndShadow())
			p.run(t, composeUnspec())
			if got := metric(t, p.s, `ratelimit_service_rate_limit_over_limit{domain="rl",key1="unspec_unspecified_value",key2=""}`); got != "1" {
				t.Errorf("over_limit of unspec_unspecified_value = %q, want 1 (the script's statsd check)", got)
			}
			// "Waiting 1 minute for quota buckets to be refreshed": the
			// minute the scripts ran in ends (the binary counts on the
			// wall clock).
			reset := start.Truncate(time.Minute).Add(time.Minute)
			time.Sleep(time.Until(reset) + 100*time.Millisecond)
			p.run(t, composeAfterTheMinute())
			t.Logf("%s: %d steps replayed", name, p.steps)
		})
	}
}

// composeMultiservice: Envoy asks service_1 and service_2 with hits 0,
// routes to the service whose quota passed (the first, when both did),
// and charges that service 1 at the stream's end.
func composeMultiservice() []pstep {
	check := func(what string, over bool, s1, s2 ps, meta string) pstep {
		return pstep{what: "multiservice " + what, domain: "rl", descs: []pd{e("service", "service_1").h(0), e("service", "service_2").h(0)},
			over: over, st: []ps{s1, s2}, meta: meta}
	}
	done := func(what, svc string, over bool, s ps) pstep {
		meta := svc
		if over {
			meta = ""
		}
		return pstep{what: "multiservice " + what + " done", domain: "rl", descs: []pd{e("service", svc).h(1)}, over: over, st: []ps{s}, meta: meta}
	}
	return []pstep{
		check("request 1", false, ok(1, minute, 1), ok(2, minute, 2), "service_1"),
		done("request 1", "service_1", false, ok(1, minute, 0)),
		check("request 2", false, ok(1, minute, 0), ok(2, minute, 2), "service_1"),
		done("request 2", "service_1", true, over(1, minute)),
		check("request 3", false, over(1, minute), ok(2, minute, 2), "service_2"),
		done("request 3", "service_2", false, ok(2, minute, 1)),
		check("request 4", false, over(1, minute), ok(2, minute, 1), "service_2"),
		done("request 4", "service_2", false, ok(2, minute, 0)),
		check("request 5", false, over(1, minute), ok(2, minute, 0), "service_2"),
		done("request 5", "service_2", true, over(2, minute)),
		check("request 6 (refused)", true, over(1, minute), over(2, minute), ""),
	}
}

// composeQuota: /quota asks both services with one hit each; the call is
// refused only when every quota-mode descriptor is over.
func composeQuota() []pstep {
	q := func(what string, over bool, s1, s2 ps, meta string) pstep {
		return pstep{what: "quota " + what, domain: "rl_quota", descs: []pd{e("service", "service_1"), e("service", "service_2")},
			over: over, st: []ps{s1, s2}, meta: meta}
	}
	return []pstep{
		q("request 1", false, ok(1, minute, 0), ok(2, minute, 1), "service_1"),
		q("request 2", false, over(1, minute), ok(2, minute, 0), "service_2"),
		q("request 3 (refused)", true, over(1, minute), over(2, minute), ""),
	}
}

// composeTokenQuota: hits 0 before the request, 1 at its end; the fourth
// request finds the quota spent.
func composeTokenQuota() []pstep {
	check := func(what string, over bool, s ps, meta string) pstep {
		return pstep{what: "token-quota " + what, domain: "rl_token", descs: []pd{e("service", "service_2").h(0)}, over: over, st: []ps{s}, meta: meta}
	}
	done := func(what string, over bool, s ps, meta string) pstep {
		return pstep{what: "token-quota " + what + " done", domain: "rl_token", descs: []pd{e("service", "service_2").h(1)}, over: over, st: []ps{s}, meta: meta}
	}
	return []pstep{
		check("request 1", false, ok(2, minute, 2), "service_2"),
		done("request 1", false, ok(2, minute, 1), "service_2"),
		check("request 2", false, ok(2, minute, 1), "service_2"),
		done("request 2", false, ok(2, minute, 0), "service_2"),
		check("request 3", false, ok(2, minute, 0), "service_2"),
		done("request 3", true, over(2, minute), ""),
		check("request 4 (refused)", true, over(2, minute), ""),
	}
}

// composeReplaces is replaces.sh: a named limit replaced by the limit of
// another descriptor of the call is neither counted nor reported.
func composeReplaces() []pstep {
	r := func(what string, ds []pd, over bool, st ...ps) pstep {
		return pstep{what: "replaces " + what, domain: "rl", descs: ds, over: over, st: st}
	}
	banned := named(over(0, minute), "banned_limit")
	return []pstep{
		r("1 banned", twoheader("bkthomps", "banned", ""), true, banned),
		r("2 banned beside mock", fourheader("bkthomps", "banned", "mock"), true, banned, ok(1, minute, 0)),
		r("3 override replaces banned", fourheader("bkthomps", "banned", "override"), false, noLimit, ok(2, minute, 1)),
		r("4", fourheader("bkthomps", "banned", "override"), false, noLimit, ok(2, minute, 0)),
		r("5", fourheader("bkthomps", "banned", "override"), true, noLimit, over(2, minute)),
		r("6 bkthomps replaced", fourheader("my_foo", "bkthomps", "bkthomps"), false, noLimit, ok(2, minute, 1)),
		r("7", fourheader("my_foo", "bkthomps", "bkthomps"), false, noLimit, ok(2, minute, 0)),
		r("8", fourheader("my_foo", "bkthomps", "bkthomps"), true, noLimit, over(2, minute)),
		r("9 not replaced", fourheader("my_foo", "bkthomps", "not_bkthomps"), false, named(ok(1, minute, 0), "bkthomps"), noLimit),
		r("10", fourheader("my_foo", "bkthomps", "not_bkthomps"), true, named(over(1, minute), "bkthomps"), noLimit),
		r("11", fourheader("my_foo", "bkthomps", "bkthomps"), true, noLimit, over(2, minute)),
		r("12 account replaces two", fiveheader("my_foo", "bkthomps", "fake", "account"), false, noLimit, noLimit, ok(4, minute, 3)),
		r("13", fiveheader("my_foo", "bkthomps", "fake", "account"), false, noLimit, noLimit, ok(4, minute, 2)),
		r("14", fiveheader("my_foo", "bkthomps", "fake", "account"), false, noLimit, noLimit, ok(4, minute, 1)),
		r("15", fiveheader("my_foo", "bkthomps", "fake", "account"), false, noLimit, noLimit, ok(4, minute, 0)),
		r("16", fiveheader("my_foo", "bkthomps", "fake", "account"), true, noLimit, noLimit, over(4, minute)),
		r("17 foo_2", twoheader("foo_2", "bkthomps", ""), false, named(ok(1, minute, 0), "bkthomps")),
		r("18", twoheader("foo_2", "bkthomps", ""), true, named(over(1, minute), "bkthomps")),
		r("19 foo_3", fourheader("foo_3", "bar_3", "fake"), false, ok(3, minute, 2), named(ok(2, minute, 1), "fake_name")),
		r("20", fourheader("foo_3", "bar_3", "fake"), false, ok(3, minute, 1), named(ok(2, minute, 0), "fake_name")),
		r("21", fourheader("foo_3", "bar_3", "fake"), true, ok(3, minute, 0), named(over(2, minute), "fake_name")),
		r("22", fiveheader("my_foo", "bkthomps", "fake", "account"), true, noLimit, noLimit, over(4, minute)),
	}
}

// composeTriggerAndShadow is simple-get.sh, the unlimited descriptors,
// trigger-ratelimit.sh and
// trigger-shadow-mode-key.sh: 3 a minute refuses the fourth; in shadow
// mode the fourth and later are OK with nothing left.
func composeTriggerAndShadow() []pstep {
	steps := []pstep{
		{what: "simple-get", domain: "rl", descs: twoheader("test", "", "shady"), st: []ps{ok(3, minute, 2)}},
		// Not in a script: the example's unlimited descriptors, as the peer
		// answers them (OK, the largest remaining, no limit).
		{what: "unlimited qux and foo.bay", domain: "rl", descs: []pd{e("qux", "any"), e("foo", "x", "bay", "y")}, st: []ps{unlimited, unlimited}},
	}
	for i := range 5 {
		st := pstep{what: fmt.Sprintf("trigger-ratelimit %d", i+1), domain: "rl", descs: twoheader("pelle", "", "not-so-shady"), st: []ps{ok(3, minute, uint32(max(2-i, 0)))}}
		if i >= 3 {
			st.over, st.st = true, []ps{over(3, minute)}
		}
		steps = append(steps, st)
	}
	for i := range 6 {
		steps = append(steps, pstep{what: fmt.Sprintf("shadow mode %d", i+1), domain: "rl", descs: twoheader("pelle", "", "shady"),
			st: []ps{ok(3, minute, uint32(max(2-i, 0)))}})
	}
	return steps
}

// composeUnspec is value-included-in-stats-key-when-unspecified.sh.
func composeUnspec() []pstep {
	u := pstep{domain: "rl", descs: []pd{e("unspec", "unspecified_value")}}
	a, b, c := u, u, u
	a.what, a.st = "unspec 1", []ps{ok(2, minute, 1)}
	b.what, b.st = "unspec 2", []ps{ok(2, minute, 0)}
	c.what, c.over, c.st = "unspec 3", true, []ps{over(2, minute)}
	return []pstep{a, b, c}
}

// composeAfterTheMinute are the scripts' last steps, after their wait:
// the quotas are whole again.
func composeAfterTheMinute() []pstep {
	return []pstep{
		{what: "multiservice request 7", domain: "rl", descs: []pd{e("service", "service_1").h(0), e("service", "service_2").h(0)},
			st: []ps{ok(1, minute, 1), ok(2, minute, 2)}, meta: "service_1"},
		{what: "multiservice request 7 done", domain: "rl", descs: []pd{e("service", "service_1").h(1)}, st: []ps{ok(1, minute, 0)}, meta: "service_1"},
		{what: "quota after the minute", domain: "rl_quota", descs: []pd{e("service", "service_1"), e("service", "service_2")},
			st: []ps{ok(1, minute, 0), ok(2, minute, 1)}, meta: "service_1"},
		{what: "token-quota request 5", domain: "rl_token", descs: []pd{e("service", "service_2").h(0)}, st: []ps{ok(2, minute, 2)}, meta: "service_2"},
	}
}
