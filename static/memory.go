package static

import (
	"context"
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// DefaultMaxKeys is the key capacity of a Memory store made without
// WithMaxKeys.
const DefaultMaxKeys = 1_000_000

// Memory is the embedded Store: every key's state in this process's memory.
//
// The key space is split into shards, each with its own mutex, map and
// least-recently-used list, so that checks of different keys rarely contend.
// A key is hashed once per check: the hash's low bits pick its shard, its
// high half is its slot in the shard's map (keys of one slot are chained and
// compared in full). The list is promoted lazily, as CLOCK does: a check
// marks its keys used, and eviction moves a marked key from the list's tail
// back to its front when it comes to it, so that a hit writes no list
// pointers.
// A check locks the shards of all its keys (in a fixed order, so checks never
// deadlock), evaluates every limit, and commits all of them or none.
//
// Memory is bounded: it holds at most MaxKeys keys. A key whose state is whole
// again (its Until passed) is equivalent to a fresh one and is dropped first;
// past the cap, a key among the least recently used is evicted (counted in
// Stats().Evictions), and its usage is remembered: a table per shard (48
// bytes per key of capacity, allocated at the first eviction, see
// ghostsPerKey) keeps each evicted key's share of quota left under its
// fingerprint for the rest of its window, and the key, when it comes back,
// starts from that share (counted in Stats().Restored). A flood of fresh
// identities must so evict about four times the store's capacity after a
// slow client's last request to reset its window (more than twice with
// odds above 99.9%), and a key never seen is never charged for another's
// usage. Keys holding concurrency
// permits are never evicted. Memory starts no goroutine; call Sweep now and then to drop
// idle keys early.
//
// A Memory is safe for concurrent use. The zero value is not usable; call
// NewMemory.
type Memory struct {
	clock   sluice.Clock
	nano    sluice.NanoClock // clock, when it is one: read on every check
	seed    maphash.Seed
	mask    uint64
	maxKeys int
	sharing bool // record committed usage for Drain
	shards  []shard
	scratch sync.Pool // *bigScratch
}

var _ Store = (*Memory)(nil)

type shard struct {
	mu          sync.Mutex
	keys        map[uint32]*entry // by the key's slot (slotOf); keys of one slot chain through entry.same
	count       int               // keys held
	seed        maphash.Seed      // the store's: a key's hash, read again on its rare paths
	lru         entry             // sentinel of the LRU ring: lru.next is the most recently promoted
	evictions   uint64
	expirations uint64
	restored    uint64 // keys created with an evicted key's usage
	// ghostFPs and ghostVals remember evicted keys' usage (see
	// ghostsPerKey); nil until the first eviction.
	ghostFPs  []uint32
	ghostVals []uint64
	capacity  int      // this shard's share of MaxKeys
	dirty     []*entry // with sharing: entries with usage not yet drained
	_         [64]byte // keep neighbouring shards' locks off one cache line
}

type entry struct {
	key        string
	same       *entry // the next entry whose key has the same slot: almost always nil
	policy     *Policy
	prev, next *entry
	until      int64 // when st is whole again (Unix ns)
	st         KeyState
	wake       chan struct{} // closed when a concurrency permit is released
	shared     int64         // with sharing: cost committed since the last Drain
	sharedAt   int64         // the latest of those commits (Unix ns)
	pinned     bool          // in use by the check holding the shard lock
	used       bool          // checked since it was last put at the list's front (see makeRoom)
	dirty      bool          // in the shard's dirty list
	slot       uint32        // its key's slot (slotOf), in the bools' padding
}

// slotOf is where the key whose hash is h is in its shard's map: the hash's
// high half (its low bits picked the shard). Keys of one slot, about one in
// 2^32 pairs, are chained and compared in full.
func slotOf(h uint64) uint32 { return uint32(h >> 32) }

// MemoryOptions configure a Memory store; the zero value is the default.
type MemoryOptions struct {
	// Clock is the clock the store reads; nil is the system clock.
	Clock sluice.Clock
	// MaxKeys bounds the number of keys held; < 1 means DefaultMaxKeys.
	MaxKeys int
	// Sharing makes the store record the usage it commits, for Drain: a
	// fleet store shares it with the other sidecars.
	Sharing bool
	// OneLock keeps every key under one lock instead of spreading them
	// over shards by MaxKeys: the cheaper store for a single goroutine
	// (sluice replay), whose checks of many limits then take one lock.
	OneLock bool
}

// NewMemory returns an empty Memory store.
func NewMemory(o MemoryOptions) *Memory {
	m := &Memory{clock: o.Clock, seed: maphash.MakeSeed(), maxKeys: DefaultMaxKeys, sharing: o.Sharing}
	if m.clock == nil {
		m.clock = sluice.NewSystemClock()
	}
	if o.MaxKeys >= 1 {
		m.maxKeys = o.MaxKeys
	}
	m.scratch.New = func() any { return new(bigScratch) }
	m.nano, _ = m.clock.(sluice.NanoClock)
	maxKeys := m.maxKeys
	// Enough shards to spread contention, few enough that each holds a
	// useful number of keys. A power of two, so a mask picks the shard.
	n := 1
	for n < 256 && n*2*64 <= maxKeys && !o.OneLock {
		n *= 2
	}
	m.shards = make([]shard, n)
	m.mask = uint64(n - 1)
	for i := range m.shards {
		s := &m.shards[i]
		// The shards' caps add up to maxKeys exactly.
		s.capacity = maxKeys / n
		if i < maxKeys%n {
			s.capacity++
		}
		s.keys = make(map[uint32]*entry)
		s.lru.next, s.lru.prev = &s.lru, &s.lru
		s.seed = m.seed
	}
	return m
}

// Clock is the clock the store reads: a check's Result.At is a reading
// of it, taken as the check was made.
func (m *Memory) Clock() sluice.Clock { return m.clock }

// unixNano reads the store's clock in Unix nanoseconds.
func (m *Memory) unixNano() int64 {
	if m.nano != nil {
		return m.nano.UnixNano()
	}
	return m.clock.Now().UnixNano()
}

// hashOf returns key's hash and its shard's index.
func (m *Memory) hashOf(key string) (uint64, uint32) {
	h := maphash.String(m.seed, key)
	return h, uint32(h & m.mask)
}

// shardOf returns key's shard and hash.
func (m *Memory) shardOf(key string) (*shard, uint64) {
	h, i := m.hashOf(key)
	return &m.shards[i], h
}

// bigScratch is the working memory of a check of more than maxInline
// limits, pooled.
type bigScratch struct {
	steps         []Step
	ents          []*entry
	hashes        []uint64
	shards, locks []uint32
	decisions     []sluice.Decision
}

func (b *bigScratch) reset() {
	clear(b.ents[:cap(b.ents)])
	b.steps, b.ents, b.hashes, b.shards, b.locks, b.decisions = b.steps[:0], b.ents[:0], b.hashes[:0], b.shards[:0], b.locks[:0], b.decisions[:0]
}

// A check of up to maxInline limits keeps its scratch arrays on the stack;
// up to maxStacked, on a larger stack frame (the arrays are zeroed on every
// check, so the common small check gets the small ones); beyond, in pooled
// heap memory.
const (
	maxInline  = 4
	maxStacked = 16
)

// Check implements Store.
func (m *Memory) Check(ctx context.Context, limits []Limit, each []sluice.Decision) (res Result, err error) {
	if len(limits) == 0 {
		return Result{Decision: sluice.Decision{Allowed: true, Remaining: -1}, Permit: sluice.NopPermit{}, At: m.clock.Now(), Index: -1}, nil
	}
	var timer *time.Timer
	for {
		// The result is written in place (a named result), not copied:
		// Result is large and this is every request's path.
		var wake <-chan struct{}
		var wait time.Duration
		if len(limits) == 1 {
			wake, wait = m.tryOne(&limits[0], each, &res)
		} else {
			res, wake, wait = m.try(limits, each)
		}
		if res.Allowed || wake == nil {
			if timer != nil {
				timer.Stop()
			}
			return res, nil
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		}
		select {
		case <-wake:
		case <-timer.C:
			return res, nil
		case <-ctx.Done():
			timer.Stop()
			return res, ctx.Err()
		}
	}
}

// try makes one attempt. When the request is denied only by busy concurrency
// limits with a timeout, it returns a channel closed at the next release on
// one of them and the time the caller may wait.
func (m *Memory) try(limits []Limit, each []sluice.Decision) (Result, <-chan struct{}, time.Duration) {
	if n := len(limits); n > maxStacked {
		// Many limits: pooled scratch, so that the check allocates nothing.
		big := m.scratch.Get().(*bigScratch)
		big.steps, big.ents, big.hashes = slices.Grow(big.steps, n), slices.Grow(big.ents, n), slices.Grow(big.hashes, n)
		big.shards, big.locks = slices.Grow(big.shards, n), slices.Grow(big.locks, n)
		big.decisions = slices.Grow(big.decisions, n)
		res, wake, wait := m.tryWith(limits, each, big.steps, big.ents, big.hashes, big.shards, big.locks, big.decisions)
		big.reset()
		m.scratch.Put(big)
		return res, wake, wait
	}
	if len(limits) > maxInline {
		return m.tryMany(limits, each)
	}
	var (
		stepBuf  [maxInline]Step
		entBuf   [maxInline]*entry
		hashBuf  [maxInline]uint64
		shardBuf [maxInline]uint32
		lockBuf  [maxInline]uint32
		decBuf   [maxInline]sluice.Decision
	)
	return m.tryWith(limits, each, stepBuf[:0], entBuf[:0], hashBuf[:0], shardBuf[:0], lockBuf[:0], decBuf[:0])
}

// tryMany is try for up to maxStacked limits, with its scratch on the stack
// too: zeroing it costs less than the write barriers that pooled heap
// scratch pays for every pointer while the garbage collector marks. It
// has no scratch for the decisions: the engine always gives each room for
// them, and zeroing room it never uses cost a tenth of a ten-limit check.
func (m *Memory) tryMany(limits []Limit, each []sluice.Decision) (Result, <-chan struct{}, time.Duration) {
	var (
		stepBuf  [maxStacked]Step
		entBuf   [maxStacked]*entry
		hashBuf  [maxStacked]uint64
		shardBuf [maxStacked]uint32
		lockBuf  [maxStacked]uint32
	)
	return m.tryWith(limits, each, stepBuf[:0], entBuf[:0], hashBuf[:0], shardBuf[:0], lockBuf[:0], nil)
}

// tryWith is try with its scratch slices (empty, with room for every limit;
// decisions may have none when each has room).
func (m *Memory) tryWith(limits []Limit, each []sluice.Decision, steps []Step, ents []*entry, hashes []uint64, shards, locks []uint32,
	decisions []sluice.Decision) (Result, <-chan struct{}, time.Duration) {
	for i := range limits {
		h, s := m.hashOf(limits[i].Key)
		hashes = append(hashes, h)
		shards = append(shards, s)
		locks = insertSorted(locks, s)
	}
	for _, s := range locks {
		m.shards[s].mu.Lock()
	}
	now := m.unixNano()
	for i := range limits {
		l := &limits[i]
		e := m.shards[shards[i]].lookup(l.Key, hashes[i], l.Policy, now)
		e.pinned = true
		ents = append(ents, e)
		steps = steps[:i+1]
		l.Policy.evaluate(&steps[i], &e.st, now, l.Cost, l.reserve())
	}
	// The per-limit decisions go straight to the caller's each when it
	// has room, else to scratch.
	if len(each) >= len(limits) {
		decisions = each[:len(limits)]
		for i := range steps {
			decisions[i] = steps[i].Decision
			decisions[i].RuleID = limits[i].RuleID
		}
	} else {
		if cap(decisions) < len(steps) {
			decisions = make([]sluice.Decision, 0, len(steps)) // a caller that gave each no room
		}
		for i := range steps {
			decisions = append(decisions, steps[i].Decision)
		}
	}
	d, idx := Combine(limits, decisions)
	res := Result{Decision: d, Permit: sluice.NopPermit{}, At: time.Unix(0, now), Index: idx}
	var permit *memPermit
	for i := range steps {
		st := &steps[i]
		if (!(d.Allowed && st.Decision.Allowed) && !st.CommitOnDeny) || limits[i].DryRun {
			continue
		}
		p := limits[i].Policy
		p.Commit(&ents[i].st, st)
		ents[i].until = st.Until
		if m.sharing {
			m.shards[shards[i]].record(ents[i], now, limits[i].Cost)
		}
		if p.Algorithm == Concurrency && limits[i].Cost > 0 {
			if permit == nil {
				permit = &memPermit{m: m}
			}
			permit.add(ents[i], shards[i], limits[i].Cost)
		}
	}
	if permit != nil {
		res.Permit = permit
	}
	var wake chan struct{}
	var wait time.Duration
	if !d.Allowed {
		wake, wait = waitable(limits, steps, ents)
	}
	for _, e := range ents {
		e.pinned = false
	}
	for i := len(locks) - 1; i >= 0; i-- {
		m.shards[locks[i]].mu.Unlock()
	}
	return res, wake, wait
}

// tryOne is try for a request with a single limit, the common case: one
// lock, no scratch arrays, no copies of the step. It decides as combine
// would for one limit, into *res.
func (m *Memory) tryOne(l *Limit, each []sluice.Decision, res *Result) (<-chan struct{}, time.Duration) {
	h, si := m.hashOf(l.Key)
	s := &m.shards[si]
	s.mu.Lock()
	now := m.unixNano()
	e := s.lookup(l.Key, h, l.Policy, now)
	var st Step
	l.Policy.evaluate(&st, &e.st, now, l.Cost, l.reserve())
	res.Decision = st.Decision
	res.RuleID = l.RuleID
	if l.Shadow {
		res.Allowed, res.Reason, res.RetryAfter, res.Delay = true, sluice.ReasonNone, 0, 0
	}
	res.Permit = sluice.NopPermit{}
	res.At = time.Unix(0, now)
	if (st.Decision.Allowed || st.CommitOnDeny) && !l.DryRun {
		l.Policy.Commit(&e.st, &st)
		e.until = st.Until
		if m.sharing {
			s.record(e, now, l.Cost)
		}
		if l.Policy.Algorithm == Concurrency && l.Cost > 0 && st.Decision.Allowed {
			p := &memPermit{m: m}
			p.add(e, si, l.Cost)
			res.Permit = p
		}
	}
	var wake chan struct{}
	var wait time.Duration
	if !res.Allowed {
		if w, ok := waitFor(l, &st); ok && w > 0 {
			wake, wait = wakeOf(e), w
		}
	}
	if len(each) >= 1 {
		each[0] = st.Decision
		each[0].RuleID = l.RuleID
	}
	s.mu.Unlock()
	return wake, wait
}

// waitable returns the wake channel of the first busy concurrency limit and
// the shortest timeout, when every enforced denial is such a limit. Called
// with the shard locks held.
func waitable(limits []Limit, steps []Step, ents []*entry) (chan struct{}, time.Duration) {
	var first *entry
	var wait time.Duration
	for i := range steps {
		w, ok := waitFor(&limits[i], &steps[i])
		if !ok {
			return nil, 0
		}
		if w > 0 && first == nil {
			first, wait = ents[i], w
		}
		if w > 0 {
			wait = min(wait, w)
		}
	}
	return wakeOf(first), wait
}

// waitFor says whether limit l's step stands in the way of admission (ok
// false: a denial no waiting cures) and, for a busy concurrency limit with a
// timeout, how long it may be waited for.
func waitFor(l *Limit, st *Step) (time.Duration, bool) {
	if l.Shadow || st.Decision.Allowed {
		return 0, true
	}
	if l.DryRun {
		return 0, false // asking does not wait
	}
	p := l.Policy
	if p.Algorithm != Concurrency || p.Timeout <= 0 || st.Decision.RetryAfter == sluice.Never {
		return 0, false
	}
	return p.Timeout, true
}

// wakeOf returns the channel closed at e's next permit release.
func wakeOf(e *entry) chan struct{} {
	if e == nil {
		return nil
	}
	if e.wake == nil {
		e.wake = make(chan struct{})
	}
	return e.wake
}

// insertSorted adds s to the ascending set xs unless it is there.
func insertSorted(xs []uint32, s uint32) []uint32 {
	i := len(xs)
	for i > 0 && xs[i-1] > s {
		i--
	}
	if i > 0 && xs[i-1] == s {
		return xs
	}
	xs = append(xs, 0)
	copy(xs[i+1:], xs[i:])
	xs[i] = s
	return xs
}

// find returns the entry of key, whose slot is slot, or nil. Called with
// s.mu held.
func (s *shard) find(key string, slot uint32) *entry {
	for e := s.keys[slot]; e != nil; e = e.same {
		if e.key == key {
			return e
		}
	}
	return nil
}

// lookup returns the entry of key, whose hash is h, creating it (and making
// room) if needed, and marks it used. Called with s.mu held.
func (s *shard) lookup(key string, h uint64, p *Policy, now int64) *entry {
	slot := slotOf(h)
	e := s.find(key, slot)
	if e == nil {
		s.makeRoom(now)
		key = strings.Clone(key) // the caller's key may not outlive the call
		e = &entry{key: key, policy: p, slot: slot}
		s.remember(e, h, now)
		e.same = s.keys[slot]
		s.keys[slot] = e
		s.count++
		s.pushFront(e)
		return e
	}
	if e.policy != p {
		if !e.policy.SharesState(p) {
			// The rule changed: start afresh, but keep permits in flight.
			e.st = KeyState{Last: e.st.Last, InFlight: e.st.InFlight}
			e.until = 0
		}
		e.policy = p
	}
	e.used = true
	return e
}

func (e *entry) idle(now int64) bool {
	return !e.pinned && e.st.InFlight == 0 && now >= e.until &&
		(e.policy.Algorithm != Concurrency || e.st.B == 0)
}

// evictSample is how many of the least recently used keys makeRoom weighs
// against each other; maxPromote is how many keys checked since they were
// put at the list's front one makeRoom moves back there, at most, before it
// weighs them too (a bound on its work when every key is in use).
const (
	evictSample = 16
	maxPromote  = 64
)

// makeRoom, at capacity, drops one key to make room for a new one. It looks
// at the evictSample least recently used keys that hold no permit and drops
// the one whose loss forgets least: an idle key (its state is whole again:
// an expiration, nothing forgotten), else the key with the largest share of
// its quota left (an eviction: a flood of one-off identities, each having
// spent one unit, is forgotten before a slow client that has spent most of
// its quota), the most recently used of the sample among equals (so that a
// key that has lasted to the tail is not the one dropped each time a flood
// of equals passes it). Below capacity it does
// nothing: dropping idle keys eagerly would only churn allocations for keys
// that come back; Sweep reclaims them.
//
// The list's order is when a key was put at its front; a key checked since
// (marked used by lookup) is moved there again as makeRoom passes it,
// instead of being weighed: a second chance, as CLOCK gives, which keeps a
// check's hit free of list writes. A key checked at least once while its
// shard's capacity of other keys is added is so never weighed, as under a
// strict LRU (up to maxPromote marked keys a call; past that, the marked
// are weighed too).
func (s *shard) makeRoom(now int64) {
	for s.count >= s.capacity {
		var victim *entry
		var victimLeft float64
		seen, promoted := 0, 0
		for e, prev := s.lru.prev, (*entry)(nil); e != &s.lru && seen < evictSample; e = prev {
			prev = e.prev
			if e.pinned || e.st.InFlight > 0 || e.dirty {
				continue
			}
			if e.used && promoted < maxPromote {
				e.used = false
				s.unlink(e)
				s.pushFront(e)
				promoted++
				continue
			}
			seen++
			if e.idle(now) {
				victim = e
				break
			}
			if left := e.quotaLeft(now); victim == nil || left >= victimLeft {
				victim, victimLeft = e, left
			}
		}
		if victim == nil {
			return // everything old is busy: go over the cap for now
		}
		if victim.idle(now) {
			s.expirations++
		} else {
			s.evictions++
			s.forget(victim, now)
		}
		s.remove(victim)
	}
}

// A shard remembers evicted keys' usage in a table of ghostsPerKey slots
// per key of its capacity (12 bytes each), in buckets of ghostBucket
// slots. A slot holds a key's 48-bit fingerprint (one new key in about 10^13
// finds a slot of another's), its share of quota left (8 bits, in 255ths,
// rounded down) and when its state would have been whole again (Unix
// seconds, rounded up). A bucket is a queue, the latest eviction first: a
// key evicted goes to the front of its bucket (with the lesser share, when
// its earlier slot is still there), the expired are dropped, and the oldest
// falls off a full one. A key created takes its slot's usage, or starts
// afresh when it has none. A key's usage so survives about ghostsPerKey
// times the shard's capacity of later evictions, and twice its capacity
// with odds above 99.9%.
const (
	ghostsPerKey = 4
	ghostBucket  = 32
)

// ghostBucketOf returns the bucket of the key whose hash is h (its
// fingerprints' low 32 bits and its values) and its fingerprint: high 16
// bits in a value's top bits, never 0.
func (s *shard) ghostBucketOf(h uint64) (fps []uint32, vals []uint64, lo uint32, hi uint64) {
	n := uint64(len(s.ghostFPs) / ghostBucket)
	b := (h >> 8) % n // past the low bits, which picked the shard
	lo, hi = uint32(h>>16), h>>48|1
	return s.ghostFPs[b*ghostBucket : (b+1)*ghostBucket], s.ghostVals[b*ghostBucket : (b+1)*ghostBucket], lo, hi
}

// A value packs fingerprint's high 16 bits<<48 | share<<32 | until (s).
func ghostHi(v uint64) uint64   { return v >> 48 }
func ghostLeft(v uint64) uint64 { return v >> 32 & 0xff }
func ghostUntil(v uint64) int64 { return int64(v&0xffffffff) * 1e9 }
func packGhost(hi, left uint64, until int64) uint64 {
	return hi<<48 | left<<32 | uint64(min((until+1e9-1)/1e9, math.MaxUint32))
}

// forget records the usage of e, which is being evicted.
func (s *shard) forget(e *entry, now int64) {
	if e.policy.Algorithm == Concurrency || e.until <= now {
		return
	}
	left := e.quotaLeft(now)
	if left >= 1 {
		return
	}
	if s.ghostFPs == nil {
		n := ghostBucket * max(1, (ghostsPerKey*s.capacity+ghostBucket-1)/ghostBucket)
		s.ghostFPs, s.ghostVals = make([]uint32, n), make([]uint64, n)
	}
	fps, vals, lo, hi := s.ghostBucketOf(s.hash(e.key))
	share, until := uint64(math.Floor(left*0xff)), e.until
	// e goes to the front, its own earlier slot merged in; the others keep
	// their order behind it, the expired are dropped, and the oldest falls
	// off a full bucket.
	var keptFP [ghostBucket]uint32
	var keptVal [ghostBucket]uint64
	n := 0
	for i, v := range vals {
		switch {
		case v == 0 || ghostUntil(v) <= now:
		case fps[i] == lo && ghostHi(v) == hi:
			share, until = min(share, ghostLeft(v)), max(until, ghostUntil(v))
		case n < ghostBucket-1:
			keptFP[n], keptVal[n] = fps[i], v
			n++
		}
	}
	fps[0], vals[0] = lo, packGhost(hi, share, until)
	copy(fps[1:], keptFP[:n])
	copy(vals[1:], keptVal[:n])
	clear(vals[1+n:])
}

// remember gives the new entry e, whose key's hash is h, the usage kept
// for its key, consumed now.
func (s *shard) remember(e *entry, h uint64, now int64) {
	if s.ghostFPs == nil || e.policy.Algorithm == Concurrency {
		return
	}
	fps, vals, lo, hi := s.ghostBucketOf(h)
	for i, v := range vals {
		if fps[i] != lo || v == 0 || ghostHi(v) != hi {
			continue
		}
		vals[i] = 0 // the entry holds it now
		if ghostUntil(v) <= now {
			return
		}
		d := e.policy.Evaluate(KeyState{}, now, 0).Decision
		if used := int64(math.Ceil((1 - float64(ghostLeft(v))/0xff) * float64(d.Limit))); used > 0 {
			e.until = e.policy.Absorb(&e.st, now, used)
			s.restored++
		}
		return
	}
}

// quotaLeft is the share of its quota e's key has left now, in [0, 1].
func (e *entry) quotaLeft(now int64) float64 {
	d := e.policy.Evaluate(e.st, now, 0).Decision
	if d.Limit <= 0 || d.Remaining < 0 {
		return 0
	}
	return min(1, float64(d.Remaining)/float64(d.Limit))
}

func (s *shard) pushFront(e *entry) {
	e.prev, e.next = &s.lru, s.lru.next
	s.lru.next.prev = e
	s.lru.next = e
}

func (s *shard) unlink(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

// hash returns key's hash, as Memory.hashOf does: for the rare paths that
// do not have it at hand.
func (s *shard) hash(key string) uint64 { return maphash.String(s.seed, key) }

func (s *shard) remove(e *entry) {
	s.unlink(e)
	h := e.slot
	p := s.keys[h]
	switch {
	case p == e && e.same == nil:
		delete(s.keys, h)
	case p == e:
		s.keys[h] = e.same
	default:
		for p.same != e {
			p = p.same
		}
		p.same = e.same
	}
	e.same = nil
	s.count--
}

// Undo implements Store.
func (m *Memory) Undo(_ context.Context, limits []Limit, res Result) error {
	at := res.At.UnixNano()
	for i := range limits {
		l := &limits[i]
		s, h := m.shardOf(l.Key)
		s.mu.Lock()
		if e := s.find(l.Key, slotOf(h)); e != nil && e.policy.SharesState(l.Policy) && l.Policy.Algorithm != Concurrency && !l.DryRun {
			m.giveBack(s, e, l.Policy, at, l.Cost)
		}
		s.mu.Unlock()
	}
	return nil
}

// giveBack undoes cost of e's check at at (see Policy.Undo), recording it
// for the fleet in a shared store. s's lock is held.
func (m *Memory) giveBack(s *shard, e *entry, p *Policy, at, cost int64) {
	p.Undo(&e.st, at, cost)
	if m.sharing {
		s.record(e, at, -cost)
	}
}

// Charge implements Store: a positive Cost is recorded now as
// Policy.Absorb records another sidecar's usage, a negative one given back
// as Undo gives back the check admitted at admitted; in a shared store,
// both are drained to the others as this store's own.
func (m *Memory) Charge(_ context.Context, limits []Limit, admitted time.Time) error {
	at, now := admitted.UnixNano(), m.unixNano()
	for i := range limits {
		l := &limits[i]
		if l.Cost == 0 || l.DryRun || l.Policy.Algorithm == Concurrency {
			continue
		}
		s, h := m.shardOf(l.Key)
		s.mu.Lock()
		e := s.find(l.Key, slotOf(h))
		switch {
		case e != nil && !e.policy.SharesState(l.Policy):
			// The rule changed since: the usage was another rule's.
		case l.Cost < 0:
			if e != nil {
				m.giveBack(s, e, l.Policy, at, -l.Cost)
			}
		default:
			if e == nil {
				e = s.lookup(l.Key, h, l.Policy, now)
			}
			e.until = max(e.until, e.policy.Absorb(&e.st, now, l.Cost))
			if m.sharing {
				s.record(e, now, l.Cost)
			}
		}
		s.mu.Unlock()
	}
	return nil
}

// Sweep drops every key whose state is whole again. It holds one shard's
// lock at a time.
func (m *Memory) Sweep() {
	now := m.unixNano()
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for e := s.lru.next; e != &s.lru; {
			next := e.next
			if e.idle(now) {
				s.remove(e)
				s.expirations++
			}
			e = next
		}
		s.mu.Unlock()
	}
}

// MemoryStats is a snapshot of a Memory store's counters.
type MemoryStats struct {
	// Keys is the number of keys held.
	Keys int
	// MaxKeys is the cap on Keys.
	MaxKeys int
	// Restored counts keys created with the usage the store kept of their
	// eviction.
	Restored uint64
	// Evictions counts keys dropped at the cap while their state was still
	// in use: each forgot some usage.
	Evictions uint64
	// Expirations counts idle keys dropped; they forgot nothing.
	Expirations uint64
}

// Stats returns the store's counters. It locks each shard briefly.
func (m *Memory) Stats() MemoryStats {
	st := MemoryStats{MaxKeys: m.maxKeys}
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		st.Keys += s.count
		st.Evictions += s.evictions
		st.Restored += s.restored
		st.Expirations += s.expirations
		s.mu.Unlock()
	}
	return st
}

// memPermit releases the concurrency slots of one admitted request.
type memPermit struct {
	m      *Memory
	done   atomic.Bool
	n      int
	inline [2]held
	more   []held
}

type held struct {
	e     *entry
	shard uint32
	cost  int64
}

func (p *memPermit) add(e *entry, shard uint32, cost int64) {
	if p.n < len(p.inline) {
		p.inline[p.n] = held{e, shard, cost}
	} else {
		p.more = append(p.more, held{e, shard, cost})
	}
	p.n++
}

// Release gives the slots back and wakes waiters. Only the first call counts.
func (p *memPermit) Release(sluice.Outcome) {
	if p.done.Swap(true) {
		return
	}
	for i := 0; i < p.n; i++ {
		var h held
		if i < len(p.inline) {
			h = p.inline[i]
		} else {
			h = p.more[i-len(p.inline)]
		}
		s := &p.m.shards[h.shard]
		s.mu.Lock()
		h.e.st.InFlight = max(0, h.e.st.InFlight-h.cost)
		if p.m.sharing {
			s.record(h.e, 0, 0)
		}
		if h.e.wake != nil {
			close(h.e.wake)
			h.e.wake = nil
		}
		s.mu.Unlock()
	}
}

// record notes, with sharing, that e committed cost at now (a concurrency
// limit's change of InFlight when cost is 0), for Drain. Called with the
// shard's lock held.
func (s *shard) record(e *entry, now, cost int64) {
	e.shared += cost
	e.sharedAt = max(e.sharedAt, now)
	if !e.dirty {
		e.dirty = true
		s.dirty = append(s.dirty, e)
	}
}

// Usage is what one key used since the last Drain, or what another sidecar
// reports it used, for Absorb.
type Usage struct {
	// Key is the limit's key.
	Key string
	// Policy is the key's policy.
	Policy *Policy
	// At is when the usage happened (the latest of it), Unix nanoseconds.
	At int64
	// Cost is the cost committed since the last Drain; negative when more
	// was given back (Undo) than taken. Zero for Concurrency.
	Cost int64
	// InFlight is, for Concurrency, the requests in flight now.
	InFlight int64
}

// Drain calls fn with the usage of every key that committed or gave back
// since the last Drain (a store made WithSharing), and forgets it. A
// concurrency key with requests in flight is reported at every Drain, so
// that the others know it is still held. fn runs with a shard's lock held:
// it must only copy what it needs.
func (m *Memory) Drain(fn func(Usage)) {
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		keep := s.dirty[:0]
		for _, e := range s.dirty {
			u := Usage{Key: e.key, Policy: e.policy, At: e.sharedAt, Cost: e.shared}
			if e.policy.Algorithm == Concurrency {
				u.Cost, u.InFlight = 0, e.st.InFlight
			}
			fn(u)
			e.shared, e.sharedAt = 0, 0
			if e.policy.Algorithm == Concurrency && e.st.InFlight > 0 && s.find(e.key, e.slot) == e {
				keep = append(keep, e)
				continue
			}
			e.dirty = false
		}
		clear(s.dirty[len(keep):])
		s.dirty = keep
		s.mu.Unlock()
	}
}

// Absorb records usage that happened elsewhere into u.Key's state (see
// Policy.Absorb); u.Cost is the cost, or for Concurrency the change of the
// requests in flight elsewhere. The key is created, under u.Policy, if this
// store does not hold it; a key it holds keeps its own policy when the two
// share state, and ignores the usage when they do not (the rule differs
// here: a reload under way). Absorbed usage is not recorded for Drain.
func (m *Memory) Absorb(u Usage) {
	s, h := m.shardOf(u.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.find(u.Key, slotOf(h))
	if e == nil {
		if u.Cost <= 0 && u.Policy.Algorithm != Concurrency {
			return // nothing to give back on a key this store does not hold
		}
		e = s.lookup(u.Key, h, u.Policy, max(u.At, 0))
	} else if !e.policy.SharesState(u.Policy) {
		return
	}
	until := e.policy.Absorb(&e.st, min(u.At, m.unixNano()), u.Cost)
	e.until = max(e.until, until)
}
