package tune

import (
	"bytes"
	"math"
	"net/url"
	"strconv"
	"text/template"
	"time"
)

// Recommendation is the configuration a session recommends, with the
// measurements each value came from in YAML's comments.
type Recommendation struct {
	Algorithm    string  `json:"algorithm"`
	InitialLimit int     `json:"initial_limit"`
	MinLimit     int     `json:"min_limit"`
	MaxLimit     int     `json:"max_limit"`
	QueueSize    int     `json:"queue_max_size"`
	QueueWaitMS  float64 `json:"queue_max_wait_ms"`
	StaticCap    int     `json:"static_concurrency_cap"`
	// YAML is sluice.recommended.yaml.
	YAML string `json:"yaml"`
}

// recommend derives the configuration from the measurements.
func recommend(res *Result, o Options) Recommendation {
	c := res.Concurrency
	wait := math.Max(1, math.Min(res.SLOMS-res.Knee.P99MS, res.SLOMS/2))
	wait = math.Round(wait)
	r := Recommendation{
		Algorithm:    "gradient2",
		InitialLimit: c,
		MinLimit:     1,
		MaxLimit:     max(2*c, c+2),
		QueueSize:    max(1, int(math.Ceil(res.PeakGoodput*wait/1000))),
		QueueWaitMS:  wait,
	}
	// The fallback caps where the adaptive limit and its queue may reach: a
	// request holds its slot of the static rule while it waits in the
	// queue, so a lower cap would answer overload with 429 before the
	// queue does. The two are separate counters: a request the queue has
	// just refused or timed out, or one whose answer has just handed its
	// slot on, still holds its static slot for a moment, so the cap leaves
	// headroom for those (a tenth, at least 2) or a full queue would
	// answer some arrivals with 429 instead of 503.
	r.StaticCap = staticCap(r.MaxLimit, r.QueueSize)
	upstream := o.Target
	if u, err := url.Parse(o.Target); err == nil {
		upstream = (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
	}
	var b bytes.Buffer
	_ = yamlTmpl.Execute(&b, struct {
		R        Recommendation
		Res      *Result
		Upstream string
		When     string
	}{r, res, upstream, time.Now().UTC().Format(time.RFC3339)}) // fields are numbers and a parsed URL
	r.YAML = b.String()
	return r
}

var yamlTmpl = template.Must(template.New("yaml").Funcs(template.FuncMap{
	"f1": func(v float64) string { return trim(v, 1) },
}).Parse(`# sluice.recommended.yaml, written by sluice tune at {{.When}}
# against {{.Res.Target}} with a p99 objective of {{f1 .Res.SLOMS}}ms.
# The ramp: {{len .Res.Steps}} steps; the knee (highest rate within the SLO with
# goodput keeping up): {{f1 .Res.Knee.Rate}}/s at p99 {{f1 .Res.Knee.P99MS}}ms.
# Peak goodput {{f1 .Res.PeakGoodput}}/s; no-load latency {{f1 .Res.NoLoadMS}}ms (mean at the lowest step).
listen: 127.0.0.1:8080
upstream: {{.Upstream}}
admin: 127.0.0.1:9901
adaptive:
  # Gradient2 follows latency: it lowers the limit as the RTT rises above the
  # no-load RTT ({{f1 .Res.NoLoadMS}}ms here) and raises it while the RTT holds.
  # Chosen because it is the one that met the goals of sluice's overload
  # scenarios (sluice loadtest scenarios): overload, capacity and service
  # time changes, a heavy tail, a hang, a flash crowd, light load. It tells a
  # slower service from a queue by probing at half the limit now and then.
  algorithm: {{.R.Algorithm}}
  # The concurrency the service sustains, by Little's law: peak goodput
  # {{f1 .Res.PeakGoodput}}/s x no-load latency {{f1 .Res.NoLoadMS}}ms = {{.Res.Concurrency}}.
  initial_limit: {{.R.InitialLimit}}
  # 1: a hung service gets one request at a time. No higher floor is needed
  # against a service that merely got slower: the probes tell that apart.
  min_limit: {{.R.MinLimit}}
  # Twice it: room to grow when the service gets faster or scales out.
  max_limit: {{.R.MaxLimit}}
queue:
  # The SLO ({{f1 .Res.SLOMS}}ms) minus the p99 at the knee ({{f1 .Res.Knee.P99MS}}ms), at most half
  # the SLO: a request that waited longer would miss the objective anyway.
  max_wait: {{f1 .R.QueueWaitMS}}ms
  # What arrives at the peak goodput during one max_wait ({{f1 .Res.PeakGoodput}}/s x {{f1 .R.QueueWaitMS}}ms).
  max_size: {{.R.QueueSize}}
  # A closed loop (clients that send again only once answered, as a
  # benchmark's connections do) is held in order rather than shed, up to
  # this many: more would wait past max_wait at the peak goodput anyway.
  closed_loop_max_size: {{.R.QueueSize}}
  # Held, its clients still wait no longer than max_wait: past the SLO an
  # answer is as good as none.
  closed_loop_max_wait: {{f1 .R.QueueWaitMS}}ms
  order: adaptive_lifo
rules:
  # A fallback if the adaptive limit is turned off (algorithm: off) or
  # misbehaves: max_limit ({{.R.MaxLimit}}) in flight plus max_size ({{.R.QueueSize}}) waiting at most, and a
  # tenth more (at least 2) for requests leaving the queue that still hold
  # their slot here for a moment. A request holds its slot here while it
  # waits in the queue, so a lower cap would answer overload with 429 before
  # the queue does.
  - rule_id: concurrency_fallback
    description: static concurrency cap recommended by sluice tune
    identifier_type: global
    algorithm: concurrency
    limit: {{.R.StaticCap}}
`))

// staticCap is the fallback concurrency cap over an adaptive limit of at
// most maxLimit and a queue of at most queueSize: both, and headroom for
// the requests between the two counters (a tenth, at least 2).
func staticCap(maxLimit, queueSize int) int {
	n := maxLimit + queueSize
	return n + max(2, (n+9)/10)
}

// trim formats v with at most digits decimals.
func trim(v float64, digits int) string {
	p := math.Pow(10, float64(digits))
	return strconv.FormatFloat(math.Round(v*p)/p, 'f', -1, 64)
}
