// Package redisstore runs sluice's static algorithms on Redis, so that many
// sidecars share one quota. It answers the conformance tables of
// static/statictest exactly as the in-memory store does.
//
// Design. Every algorithm is a Lua script (check.lua), a port of
// static/algorithm.go in microseconds. One script call checks all the limits
// of a request whose keys share a hash slot, atomically and all-or-nothing.
// When all those limits use a common algorithm (GCRA, a token bucket without
// warm-up, the leaky bucket, fixed and sliding windows), a leaner script
// (fast.lua) makes the same decisions with about 60% of Redis's CPU: one
// key and two arguments per limit, figures derived from the policy once by
// the client. All scripts read and write one state format, so a rule may
// move between them.
// Keys are "<prefix>:<Limit.Key>"; callers put the identifier in braces
// ("{user42}:orders") so that all rules on one identifier share a slot. On a
// Cluster, limits in several slots become one script call per slot, sent in
// one pipeline: one round trip. When one slot denies while another committed,
// a refund script (undo.lua) gives the other's quota back, so a denied request
// consumes nothing. Time comes from the server (redis.call('TIME')) so every
// sidecar shares one clock, unless Options.Clock says otherwise. Every key
// outlives its state by a second; on the server's clock fast.lua sets a
// key's expiry only when its life must grow (with room to spare) and
// otherwise keeps it, from a note in the state of when the key expires
// (see fast.lua).
//
// Failures are fast: every round trip has a short deadline, and a circuit
// breaker (github.com/sony/gobreaker/v2) stops calling a Redis that keeps
// failing and probes it again shortly after. Check then returns an error;
// static.Failover turns errors into each rule's failure policy.
package redisstore

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/static"
)

//go:embed state.lua
var stateSource string

//go:embed check.lua
var checkSource string

//go:embed giveback.lua
var givebackSource string

//go:embed undo.lua
var undoSource string

//go:embed charge.lua
var chargeSource string

//go:embed fast.lua
var fastSource string

// stride is how many ARGV a limit takes in check.lua and undo.lua;
// replyStride how many reply integers a limit gets back from check.lua;
// fastStride and fastReplyStride the same for fast.lua.
const (
	stride          = 12
	replyStride     = 7
	fastStride      = 2
	fastReplyStride = 5
)

// Defaults.
const (
	DefaultPrefix   = "sluice"
	DefaultTimeout  = 50 * time.Millisecond
	DefaultLeaseTTL = time.Minute
	// pollInterval is how often a caller waiting for a concurrency slot in
	// Redis asks again.
	pollInterval = 10 * time.Millisecond
)

// ErrBadReply is wrapped by errors about replies the scripts should never
// give (a version mismatch, or data not written by sluice).
var ErrBadReply = errors.New("redisstore: unexpected reply")

// Store is a static.Store on Redis. It is safe for concurrent use.
type Store struct {
	client   redis.UniversalClient
	cluster  bool
	prefix   string
	clock    sluice.Clock // nil: the server's TIME
	timeout  time.Duration
	leaseTTL time.Duration
	check    *redis.Script
	fast     *redis.Script
	undo     *redis.Script
	charge   *redis.Script
	breaker  *gobreaker.CircuitBreaker[[]redis.Cmder]
	log      *slog.Logger // nil: no lines of its own
	leaseID  string
	fastOff  bool // tests: check.lua for every limit
	leaseSeq atomic.Uint64
	policies sync.Map     // *static.Policy -> *policyArgs
	nPolicy  atomic.Int64 // entries in policies, bounded by maxCachedPolicies

	roundTrips atomic.Uint64
	errs       atomic.Uint64
	refunds    atomic.Uint64
}

var _ static.Store = (*Store)(nil)

// Options configure a Store; the zero value is the default.
type Options struct {
	// Prefix starts every key (default DefaultPrefix, "sluice").
	Prefix string
	// Clock, when set, makes the scripts use its time instead of the
	// server's TIME. Tests use it to drive Redis with a fake clock; in
	// production, leave the server's clock, which every sidecar shares.
	Clock sluice.Clock
	// Timeout bounds each round trip (default DefaultTimeout, 50 ms).
	Timeout time.Duration
	// LeaseTTL is how long a concurrency slot is held in Redis without
	// being released (default one minute). A sidecar that dies leaks its
	// slots for at most this long; a request that runs longer loses its
	// slot.
	LeaseTTL time.Duration
	// Logger, when set, logs once each when Redis stops answering (the
	// breaker opens: checks follow the failure policy) and when it
	// answers again.
	Logger *slog.Logger
	// Breaker, when set, replaces the circuit breaker's settings. The
	// default trips after 5 consecutive failed round trips and probes
	// again after 250 ms.
	Breaker *gobreaker.Settings

	noFast bool // tests: check.lua for every limit
}

// logState logs the breaker's moves between working and not: open from
// closed, and closed again (half-open in between is a probe, not news).
func (s *Store) logState(_ string, from, to gobreaker.State) {
	if s.log == nil {
		return
	}
	switch {
	case from == gobreaker.StateClosed && to == gobreaker.StateOpen:
		s.log.Warn("redis is not answering: checks follow the failure policy (on_error) until it does; retrying every 250 ms",
			"errors", s.errs.Load())
	case to == gobreaker.StateClosed:
		s.log.Info("redis answers again: checks go to redis")
	}
}

// Config describes how to reach Redis; NewClient turns it into a client.
type Config struct {
	// Addrs: one address for a single node; several for a Cluster; with
	// MasterName, the Sentinels' addresses. Required.
	Addrs []string
	// MasterName selects Sentinel: the name the Sentinels monitor.
	MasterName string
	// Username and Password authenticate, if set.
	Username, Password string
	// DB selects the database on a single node or Sentinel master.
	DB int
	// Timeout bounds dialling, reading and writing (default 50 ms).
	Timeout time.Duration
	// PoolSize is the connection pool size per node (default go-redis's).
	PoolSize int
	// TLS, when set, connects over TLS (every node, and the Sentinels);
	// see TLSConfig.
	TLS *tls.Config
}

// tlsIdleConns is how many connections per node a TLS client keeps open.
const tlsIdleConns = 4

// TLSFiles names what a TLS connection to Redis needs: the CA the servers'
// certificates chain to (empty: the system's roots), the client's
// certificate and key for servers that require one (both or neither), and
// the name to verify when not the host dialled.
type TLSFiles struct {
	CAFile, CertFile, KeyFile, ServerName string
}

// TLSConfig reads f into a client TLS configuration (TLS 1.2 at least),
// or says which file it could not use.
func TLSConfig(f TLSFiles) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file: %s holds no PEM certificate", f.CAFile)
		}
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, errors.New("cert_file and key_file go together")
	}
	if f.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("cert_file, key_file: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// NewClient returns a go-redis UniversalClient for cfg: a Sentinel-backed
// failover client when MasterName is set, a Cluster client for several
// addresses, a single-node client otherwise. Timeouts are short and retries
// off: sluice prefers a fast failure policy to a slow answer.
func NewClient(cfg Config) (redis.UniversalClient, error) {
	if len(cfg.Addrs) == 0 {
		return nil, errors.New("redisstore: addrs: at least one address is required")
	}
	t := cfg.Timeout
	if t <= 0 {
		t = DefaultTimeout
	}
	opts := &redis.UniversalOptions{
		Addrs: cfg.Addrs, MasterName: cfg.MasterName, Username: cfg.Username, Password: cfg.Password,
		DB: cfg.DB, DialTimeout: t, ReadTimeout: t, WriteTimeout: t, PoolTimeout: t,
		PoolSize: cfg.PoolSize, MaxRetries: -1, ContextTimeoutEnabled: true, TLSConfig: cfg.TLS,
	}
	if cfg.TLS != nil {
		// A new connection's handshake counts against the round trip's
		// timeout, and Redis shakes hands on its one main thread: keep a
		// few connections open ahead of demand so that a burst of checks
		// does not wait for a queue of handshakes.
		opts.MinIdleConns = tlsIdleConns
	}
	if cfg.MasterName == "" && len(cfg.Addrs) > 1 {
		return redis.NewClusterClient(opts.Cluster()), nil
	}
	return redis.NewUniversalClient(opts), nil
}

// New returns a Store on client. It does not talk to Redis; call Load to
// preload the scripts (Check loads them on demand too).
func New(client redis.UniversalClient, o Options) *Store {
	var id [8]byte
	_, _ = rand.Read(id[:])
	s := &Store{
		client: client, prefix: DefaultPrefix, timeout: DefaultTimeout, leaseTTL: DefaultLeaseTTL,
		check: redis.NewScript(stateSource + checkSource), fast: redis.NewScript(fastSource),
		undo:    redis.NewScript(stateSource + givebackSource + undoSource),
		charge:  redis.NewScript(stateSource + givebackSource + chargeSource),
		leaseID: hex.EncodeToString(id[:]),
	}
	_, s.cluster = client.(*redis.ClusterClient)
	s.breaker = gobreaker.NewCircuitBreaker[[]redis.Cmder](gobreaker.Settings{
		Name:          "redis",
		MaxRequests:   1,
		Timeout:       250 * time.Millisecond,
		ReadyToTrip:   func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 5 },
		OnStateChange: s.logState,
	})
	if o.Prefix != "" {
		s.prefix = o.Prefix
	}
	if o.Timeout > 0 {
		s.timeout = o.Timeout
	}
	if o.LeaseTTL > 0 {
		s.leaseTTL = o.LeaseTTL
	}
	if o.Breaker != nil {
		s.breaker = gobreaker.NewCircuitBreaker[[]redis.Cmder](*o.Breaker)
	}
	s.clock, s.log, s.fastOff = o.Clock, o.Logger, o.noFast
	return s
}

// Load loads the scripts on every master, so that the first checks (and
// those after a failover or SCRIPT FLUSH, which Check also repairs) need no
// second round trip.
func (s *Store) Load(ctx context.Context) error {
	load := func(ctx context.Context, c redis.Cmdable) error {
		for _, sc := range []*redis.Script{s.check, s.fast, s.undo, s.charge} {
			if err := sc.Load(ctx, c).Err(); err != nil {
				return err
			}
		}
		return nil
	}
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return load(ctx, c) })
	}
	return load(ctx, s.client)
}

// Stats is a snapshot of a Store's counters.
type Stats struct {
	// RoundTrips counts pipelines sent to Redis.
	RoundTrips uint64
	// Errors counts checks that failed (timeouts, refused connections, an
	// open circuit, bad replies).
	Errors uint64
	// Refunds counts requests one slot denied after another had consumed.
	Refunds uint64
	// Breaker is the circuit breaker's state: "closed", "half-open", "open".
	Breaker string
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{RoundTrips: s.roundTrips.Load(), Errors: s.errs.Load(), Refunds: s.refunds.Load(), Breaker: s.breaker.State().String()}
}

// key returns the Redis key of a limit's key. A key without a hash tag
// becomes its own tag, so that its auxiliary key shares its slot.
func (s *Store) key(k string) string {
	if i := strings.IndexByte(k, '{'); i >= 0 {
		if j := strings.IndexByte(k[i+1:], '}'); j > 0 {
			return s.prefix + ":" + k
		}
	}
	return s.prefix + ":{" + k + "}"
}

// group is the limits of one request that share a hash slot, and their
// script call: fast.lua's layout when fast, check.lua's otherwise.
type group struct {
	idx  []int // indexes into the request's limits
	fast bool
	keys []string
	args []any
}

// nowArg is the time argument of the scripts: the injected clock's, or 0 for
// the server's TIME.
func (s *Store) nowArg() int64 {
	if s.clock == nil {
		return 0
	}
	return s.clock.Now().UnixMicro()
}

// groups splits limits by hash slot (one group off a Cluster) and builds
// each group's script call: fast.lua's when every limit of the group can
// use it and full is false, check.lua's (and undo.lua's) otherwise.
func (s *Store) groups(limits []static.Limit, lease any, first any, full bool) []group {
	gs := make([]group, 0, 1)
	var slots map[uint16]int
	keys := make([]string, len(limits))
	for i := range limits {
		keys[i] = s.key(limits[i].Key)
		gi := 0
		if s.cluster {
			if slots == nil {
				slots = make(map[uint16]int, len(limits))
			}
			slot := Slot(keys[i])
			var ok bool
			if gi, ok = slots[slot]; !ok {
				gi = len(gs)
				slots[slot] = gi
			}
		}
		if gi == len(gs) {
			gs = append(gs, group{fast: !full && !s.fastOff})
		}
		g := &gs[gi]
		g.idx = append(g.idx, i)
		g.fast = g.fast && s.argsOf(limits[i].Policy).fastKind != 0
	}
	for gi := range gs {
		g := &gs[gi]
		n := len(g.idx)
		if g.fast {
			g.keys = make([]string, 0, n)
			g.args = append(make([]any, 0, 1+fastStride*n), first)
			for _, i := range g.idx {
				g.keys = append(g.keys, keys[i])
				g.args = s.appendFast(g.args, &limits[i])
			}
			continue
		}
		g.keys = make([]string, 0, 2*n)
		g.args = append(make([]any, 0, 2+stride*n), first, s.leaseTTL.Microseconds())
		for _, i := range g.idx {
			g.keys = append(g.keys, keys[i], keys[i]+":aux")
			g.args = s.appendPolicy(g.args, &limits[i], lease)
		}
	}
	return gs
}

// policyArgs is a policy's part of the script arguments, boxed once.
type policyArgs struct {
	head  [5]any // algorithm, limit, window, burst, warmup
	flags int    // nodelay, count_blocked (shadow is per request)
	tail  [2]any // min_interval, timeout
	sig   any

	// fastKind is fast.lua's algorithm * 16 + nodelay, 0 when the policy
	// needs check.lua; p1 and p2 its figures (see fast.lua).
	fastKind int64
	p1, p2   int64
}

// maxCachedPolicies bounds the argument cache: each reload brings new
// policy pointers, and the old ones must not pile up.
const maxCachedPolicies = 1024

// argsOf returns p's cached arguments. Policies are immutable once in use,
// so the cache is keyed by pointer; a reload makes new pointers, so the
// cache is emptied whenever it reaches maxCachedPolicies (the policies in
// use come back on their next check).
func (s *Store) argsOf(p *static.Policy) *policyArgs {
	if a, ok := s.policies.Load(p); ok {
		return a.(*policyArgs)
	}
	a := &policyArgs{
		head: [5]any{int(p.Algorithm), p.Limit, p.Window.Microseconds(), p.Burst, p.Warmup.Microseconds()},
		tail: [2]any{p.MinInterval.Microseconds(), p.Timeout.Microseconds()},
	}
	if p.NoDelay {
		a.flags |= 1
	}
	if p.CountBlocked {
		a.flags |= 2
	}
	// The signature identifies the policy's state in Redis: state written
	// under another one is discarded. Limit and burst are left out, so that
	// a new limit applies to the usage so far (static.Policy.SharesState).
	a.sig = fmt.Sprintf("%d:%d:%d:%d:%d:%d", p.Algorithm, p.Window.Microseconds(),
		p.Warmup.Microseconds(), a.flags, p.MinInterval.Microseconds(), p.Timeout.Microseconds())
	a.fastKind, a.p1, a.p2 = fastFigures(p)
	if s.nPolicy.Add(1) > maxCachedPolicies {
		s.policies.Clear()
		s.nPolicy.Store(1)
	}
	s.policies.Store(p, a)
	return a
}

// fast.lua's algorithms.
const (
	fastGCRA    = 1
	fastFixed   = 2
	fastSliding = 3
	fastLeaky   = 4
)

// fastFigures returns fast.lua's kind and figures for p, or a zero kind when
// p needs check.lua: another algorithm, a warm-up, a zero limit, or an
// interval under a microsecond (check.lua's arithmetic is the reference for
// those edges).
func fastFigures(p *static.Policy) (kind, p1, p2 int64) {
	if p.Limit <= 0 {
		return 0, 0, 0
	}
	w := p.Window.Microseconds()
	if w <= 0 {
		return 0, 0, 0
	}
	// The interval in whole microseconds, rounded up as check.lua's: a
	// little under the rate when it falls between two, never over it.
	t := (w + p.Limit - 1) / p.Limit
	switch p.Algorithm {
	case static.GCRA, static.TokenBucket:
		if t <= 0 || p.Warmup > 0 {
			return 0, 0, 0
		}
		return fastGCRA << 4, t, p.Capacity()
	case static.LeakyBucket:
		if t <= 0 {
			return 0, 0, 0
		}
		kind = fastLeaky << 4
		if p.NoDelay {
			kind |= 1
		}
		return kind, t, p.Burst
	case static.FixedWindow:
		if p.CountBlocked {
			return 0, 0, 0 // refused hits count: check.lua's
		}
		return fastFixed << 4, w, p.Limit
	case static.SlidingWindow:
		return fastSliding << 4, w, p.Limit
	}
	return 0, 0, 0
}

// appendFast appends l's two fast.lua arguments: kind, p1, p2, cost and
// reserve as five little-endian doubles (one argument to unpack in the
// script instead of five to convert), and the signature.
func (s *Store) appendFast(args []any, l *static.Limit) []any {
	a := s.argsOf(l.Policy)
	flags, reserve := perRequest(l)
	b := make([]byte, 0, 5*8)
	for _, v := range [5]int64{a.fastKind | flags, a.p1, a.p2, l.Cost, reserve} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(v)))
	}
	return append(args, b, a.sig)
}

// perRequest returns l's flags that vary by request, in the bits both
// scripts read them at (4 shadow, 8 dry run), and its reservation window
// in microseconds (none for a shadow limit: it never waits).
func perRequest(l *static.Limit) (flags, reserve int64) {
	if l.Shadow {
		flags |= 4
	}
	if l.DryRun {
		flags |= 8
	}
	if !l.Shadow && l.Reserve > 0 {
		reserve = l.Reserve.Microseconds()
	}
	return flags, reserve
}

func (s *Store) appendPolicy(args []any, l *static.Limit, lease any) []any {
	a := s.argsOf(l.Policy)
	flags, reserve := perRequest(l)
	args = append(args, a.head[:]...)
	args = append(args, int64(a.flags)|flags)
	args = append(args, a.tail[:]...)
	return append(args, l.Cost, lease, a.sig, reserve)
}

// run sends one script call per group in one pipeline, through the breaker.
// A NOSCRIPT reply (a flushed or failed-over server) is answered by sending
// the script bodies once more.
func (s *Store) run(ctx context.Context, full *redis.Script, gs []group) ([]redis.Cmder, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	send := func(sha bool) ([]redis.Cmder, error) {
		return s.breaker.Execute(func() ([]redis.Cmder, error) {
			s.roundTrips.Add(1)
			call := func(c redis.Scripter, g *group) *redis.Cmd {
				script := full
				if g.fast {
					script = s.fast
				}
				if sha {
					return script.EvalSha(ctx, c, g.keys, g.args...)
				}
				return script.Eval(ctx, c, g.keys, g.args...)
			}
			if len(gs) == 1 { // no pipeline to build for one call
				cmd := call(s.client, &gs[0])
				if err := cmd.Err(); err != nil && !isScriptError(err) {
					return nil, err
				}
				return []redis.Cmder{cmd}, nil
			}
			pipe := s.client.Pipeline()
			for i := range gs {
				call(pipe, &gs[i])
			}
			cmds, err := pipe.Exec(ctx)
			if err != nil && !isScriptError(err) {
				return cmds, err
			}
			return cmds, nil
		})
	}
	cmds, err := send(true)
	if err != nil {
		return nil, err
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			if cmds, err = send(false); err != nil {
				return nil, err
			}
			break
		}
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return nil, fmt.Errorf("redisstore: script: %w", err)
		}
	}
	return cmds, nil
}

// isScriptError tells a per-command script error (NOSCRIPT, a Lua error),
// which run inspects, from a failure of the connection.
func isScriptError(err error) bool {
	return redis.HasErrorPrefix(err, "NOSCRIPT") || redis.HasErrorPrefix(err, "ERR") || strings.Contains(err.Error(), "sluice:")
}

// Check implements static.Store.
func (s *Store) Check(ctx context.Context, limits []static.Limit, each []sluice.Decision) (static.Result, error) {
	if len(limits) == 0 {
		return static.Result{Decision: sluice.Decision{Allowed: true, Remaining: -1}, Permit: sluice.NopPermit{}, At: time.Now(), Index: -1}, nil
	}
	var deadline time.Time
	for {
		res, waitable, err := s.try(ctx, limits, each)
		if err != nil || res.Allowed || waitable <= 0 {
			return res, err
		}
		// Only busy concurrency limits with a timeout deny: poll for a slot.
		if deadline.IsZero() {
			deadline = time.Now().Add(waitable)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return res, nil
		}
		t := time.NewTimer(min(pollInterval, left))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return res, ctx.Err()
		}
	}
}

// try makes one attempt; waitable > 0 when only busy concurrency limits with
// a timeout denied, and says the shortest of those timeouts.
func (s *Store) try(ctx context.Context, limits []static.Limit, each []sluice.Decision) (static.Result, time.Duration, error) {
	lease := s.leaseFor(limits)
	gs := s.groups(limits, lease, s.nowArg(), false)
	// A check once sent runs to its end (within the store's timeout) even
	// if the caller leaves meanwhile: its answer says what it took, so the
	// caller can give that back (static.Reservation), where a
	// cancelled round trip would leave a slot taken until its lease ends.
	cmds, err := s.run(context.WithoutCancel(ctx), s.check, gs)
	if err != nil {
		s.errs.Add(1)
		return static.Result{}, 0, err
	}
	r := replies{decisions: make([]sluice.Decision, len(limits)), committed: make([]bool, len(limits)),
		busy: make([]bool, len(limits)), ats: make([]int64, len(gs))}
	for gi, c := range cmds {
		if err := r.read(c.(*redis.Cmd), &gs[gi], gi, limits); err != nil {
			s.errs.Add(1)
			return static.Result{}, 0, err
		}
	}
	d, idx := static.Combine(limits, r.decisions)
	res := static.Result{Decision: d, Permit: sluice.NopPermit{}, At: time.UnixMicro(r.ats[0]), Index: idx}
	if !d.Allowed && len(gs) > 1 {
		s.refund(ctx, limits, lease, gs, r.ats, r.committed)
	}
	if d.Allowed {
		res.Permit = s.heldPermit(limits, lease, r.committed)
	}
	if len(each) >= len(limits) {
		copy(each, r.decisions)
	}
	if d.Allowed {
		return res, 0, nil
	}
	return res, semaphoreWait(limits, r.decisions, r.busy), nil
}

// leaseFor returns the lease that names a check's concurrency slots and
// log entries: "" when no limit of the check needs one.
func (s *Store) leaseFor(limits []static.Limit) any {
	for i := range limits {
		if a := limits[i].Policy.Algorithm; a == static.Concurrency || a == static.SlidingLog {
			return s.leaseID + "-" + strconv.FormatUint(s.leaseSeq.Add(1), 36)
		}
	}
	return ""
}

// replies are the decoded answers of a check's scripts, by limit (and the
// time of each group's script, by group).
type replies struct {
	decisions []sluice.Decision
	committed []bool // the limit's script took its cost
	busy      []bool // a concurrency limit denied for want of a free slot
	ats       []int64
}

// read decodes the reply of group g (the gi-th): its time, then a stride of
// values per limit, check.lua's or fast.lua's. A reply of the wrong shape
// or with a negative field is ErrBadReply.
func (r *replies) read(c *redis.Cmd, g *group, gi int, limits []static.Limit) error {
	vals, err := c.Int64Slice()
	per := replyStride
	if g.fast {
		per = fastReplyStride
	}
	if err != nil || len(vals) != 1+per*len(g.idx) {
		return fmt.Errorf("%w: %d values for %d limits (%v)", ErrBadReply, len(vals), len(g.idx), err)
	}
	r.ats[gi] = vals[0]
	enforcedOK := true // fast.lua commits when every enforced limit allowed
	for j, li := range g.idx {
		v := vals[1+per*j:]
		var limit, retry, flags int64
		if g.fast {
			// allowed, remaining, reset, retry, delay; the capacity is
			// the policy's, what was committed follows from the rest.
			limit, retry = limits[li].Policy.Capacity(), v[3]
			v = []int64{v[0], limit, v[1], v[2], v[3], v[4]}
			if v[0] != 1 && !limits[li].Shadow {
				enforcedOK = false
			}
		} else {
			limit, retry, flags = v[1], v[4], v[6]
		}
		d := sluice.Decision{
			Allowed: v[0] == 1, Limit: limit, Remaining: v[2], ResetAfter: us(v[3]),
			RetryAfter: us(retry), Delay: us(v[5]), RuleID: limits[li].RuleID,
		}
		if retry < 0 {
			d.RetryAfter = sluice.Never
		}
		if !d.Allowed {
			d.Reason = sluice.ReasonQuota
			if flags&2 != 0 {
				d.Reason = sluice.ReasonConcurrency
			}
		}
		if d.Remaining < 0 || d.ResetAfter < 0 || d.Delay < 0 {
			return fmt.Errorf("%w: negative field for rule %q", ErrBadReply, d.RuleID)
		}
		r.decisions[li], r.committed[li], r.busy[li] = d, flags&1 != 0, flags&2 != 0
	}
	if g.fast && enforcedOK {
		for _, li := range g.idx {
			r.committed[li] = r.decisions[li].Allowed && !limits[li].DryRun
		}
	}
	return nil
}

// heldPermit is an admitted check's permit: the concurrency slots it took
// under lease, given back on release; a NopPermit when it took none.
func (s *Store) heldPermit(limits []static.Limit, lease any, committed []bool) sluice.Permit {
	var held []heldLease
	for i := range limits {
		if limits[i].Policy.Algorithm == static.Concurrency && committed[i] && limits[i].Cost > 0 {
			held = append(held, heldLease{aux: s.key(limits[i].Key) + ":aux", lease: lease.(string), cost: limits[i].Cost})
		}
	}
	if len(held) == 0 {
		return sluice.NopPermit{}
	}
	return &leasePermit{s: s, held: held}
}

// semaphoreWait is how long a refused check may wait for a slot: the
// shortest timeout of the busy concurrency limits that denied it, or 0
// when any enforced denial is of another kind (or has no timeout).
func semaphoreWait(limits []static.Limit, decisions []sluice.Decision, busy []bool) time.Duration {
	var wait time.Duration
	for i := range limits {
		if limits[i].Shadow || decisions[i].Allowed {
			continue
		}
		p := limits[i].Policy
		if !busy[i] || p.Timeout <= 0 || limits[i].DryRun {
			return 0
		}
		if wait == 0 || p.Timeout < wait {
			wait = p.Timeout
		}
	}
	return wait
}

// refund undoes, in the slots that committed, what a request consumed when
// another slot denied it. count_blocked logs keep their record.
func (s *Store) refund(ctx context.Context, limits []static.Limit, lease any, gs []group, ats []int64, committed []bool) {
	var undo []group
	for gi := range gs {
		g := group{args: []any{ats[gi], s.leaseTTL.Microseconds()}}
		for _, li := range gs[gi].idx {
			l := &limits[li]
			if !committed[li] || l.Policy.CountBlocked {
				continue
			}
			key := s.key(l.Key)
			g.idx = append(g.idx, li)
			g.keys = append(g.keys, key, key+":aux")
			g.args = s.appendPolicy(g.args, l, lease)
		}
		if len(g.idx) > 0 {
			undo = append(undo, g)
		}
	}
	if len(undo) == 0 {
		return
	}
	s.refunds.Add(1)
	if _, err := s.run(context.WithoutCancel(ctx), s.undo, undo); err != nil {
		s.errs.Add(1) // the quota stays consumed: never a widened limit
	}
}

// ErrChargeWarmup is Charge's error for a warm-up token bucket, whose
// state Redis does not charge.
var ErrChargeWarmup = errors.New("redis store: a token bucket with warm-up cannot be charged")

// Charge implements static.Store in one round trip per hash slot, sent in
// one pipeline (one script call off a Cluster): a positive Cost is added at
// the store's time, a negative one given back as Undo gives back the check
// admitted at admitted.
func (s *Store) Charge(ctx context.Context, limits []static.Limit, admitted time.Time) error {
	kept := make([]static.Limit, 0, len(limits))
	for _, l := range limits {
		switch {
		case l.Cost == 0 || l.DryRun || l.Policy.Algorithm == static.Concurrency:
		case l.Policy.Algorithm == static.TokenBucket && l.Policy.Warmup > 0:
			return fmt.Errorf("%w (%s)", ErrChargeWarmup, l.Key)
		default:
			kept = append(kept, l)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	lease := s.leaseID + "-" + strconv.FormatUint(s.leaseSeq.Add(1), 36)
	gs := s.groups(kept, lease, admitted.UnixMicro(), true)
	for i := range gs {
		gs[i].args[1] = s.nowArg() // charge.lua's ARGV[2]: now, where check.lua has the lease lifetime
	}
	cmds, err := s.run(ctx, s.charge, gs)
	if err != nil {
		return err
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Undo implements static.Store.
func (s *Store) Undo(ctx context.Context, limits []static.Limit, res static.Result) error {
	gs := s.groups(limits, any(""), res.At.UnixMicro(), true)
	_, err := s.run(ctx, s.undo, gs)
	return err
}

func us(v int64) time.Duration { return time.Duration(v) * time.Microsecond }

type heldLease struct {
	aux, lease string
	cost       int64
}

// leasePermit releases concurrency leases in Redis. If the release fails,
// the leases expire by themselves after the lease lifetime.
type leasePermit struct {
	s    *Store
	done atomic.Bool
	held []heldLease
}

// Release removes the leases in one round trip. Only the first call counts.
func (p *leasePermit) Release(sluice.Outcome) {
	if p.done.Swap(true) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.s.timeout)
	defer cancel()
	_, err := p.s.breaker.Execute(func() ([]redis.Cmder, error) {
		p.s.roundTrips.Add(1)
		pipe := p.s.client.Pipeline()
		for _, h := range p.held {
			members := make([]any, 0, h.cost)
			for j := int64(1); j <= h.cost; j++ {
				members = append(members, h.lease+":"+strconv.FormatInt(j, 10))
			}
			pipe.ZRem(ctx, h.aux, members...)
		}
		return pipe.Exec(ctx)
	})
	if err != nil {
		p.s.errs.Add(1)
	}
}
