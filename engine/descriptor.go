package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/static"
)

// This file is the engine's face for Envoy's rate limit service: rules with
// a descriptor, looked up as envoyproxy/ratelimit looks them up, and a
// request's descriptors checked in one store call. It imports no gRPC: the
// rls package turns protobuf into DescriptorRequest and back.

// descNode is one level of a domain's descriptor tree.
type descNode struct {
	exact     map[string]*descNode // key "\x00" value
	wildcards []wildNode           // values with "*", in configuration order
	anyValue  map[string]*descNode // key only: any value
	rules     []*rule              // the rules whose descriptor ends here
	// unlimited: a descriptor ending here is never limited.
	unlimited bool
}

// wildNode is a value pattern of one level: "*" matches any run of
// characters (none too), anywhere in the value, as in envoyproxy/ratelimit.
type wildNode struct {
	key, pattern string
	parts        []string // pattern split on "*"
	// shared (share_threshold): every value the pattern matches counts on
	// one counter, the pattern's, instead of one per value.
	shared bool
	node   *descNode
}

func (n *descNode) child(e config.DescriptorEntry) *descNode {
	var next *descNode
	switch {
	case strings.Contains(e.Value, "*"):
		for i := range n.wildcards {
			if w := &n.wildcards[i]; w.key == e.Key && w.pattern == e.Value {
				w.shared = w.shared || e.ShareThreshold
				return w.node
			}
		}
		next = &descNode{}
		n.wildcards = append(n.wildcards, wildNode{key: e.Key, pattern: e.Value, parts: strings.Split(e.Value, "*"),
			shared: e.ShareThreshold, node: next})
	case e.Value != "":
		if n.exact == nil {
			n.exact = map[string]*descNode{}
		}
		k := e.Key + "\x00" + e.Value
		if next = n.exact[k]; next == nil {
			next = &descNode{}
			n.exact[k] = next
		}
	default:
		if n.anyValue == nil {
			n.anyValue = map[string]*descNode{}
		}
		if next = n.anyValue[e.Key]; next == nil {
			next = &descNode{}
			n.anyValue[e.Key] = next
		}
	}
	return next
}

// wildcardMatch reports whether value matches the pattern split on "*"
// into parts: the first part begins it, the last ends it, the others come
// in order between. It allocates nothing.
func wildcardMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	mid := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(mid, p)
		if i < 0 {
			return false
		}
		mid = mid[i+len(p):]
	}
	return true
}

// lookup follows entries from n: at each level the exact value, else the
// first wildcard pattern (in configuration order) that matches, else any
// value; nil when nothing matches. shared, as long as entries, gets the
// pattern of each entry matched by a share_threshold wildcard ("" for the
// others): its counter is the pattern's.
func (n *descNode) lookup(entries []DescriptorEntry, shared []string) *descNode {
	for i, e := range entries {
		shared[i] = ""
		next := n.exact[e.Key+"\x00"+e.Value]
		if next == nil {
			for _, w := range n.wildcards {
				if w.key == e.Key && wildcardMatch(w.parts, e.Value) {
					next = w.node
					if w.shared {
						shared[i] = w.pattern
					}
					break
				}
			}
		}
		if next == nil {
			next = n.anyValue[e.Key]
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}

// addDescriptor puts a descriptor rule (r nil for an unlimited one) into
// the rule set's trees.
func (rs *ruleSet) addDescriptor(d *config.Descriptor, r *rule, id string) error {
	if rs.domains == nil {
		rs.domains = map[string]*descNode{}
	}
	n := rs.domains[d.Domain]
	if n == nil {
		n = &descNode{}
		rs.domains[d.Domain] = n
	}
	for _, e := range d.Entries {
		n = n.child(e)
	}
	if (d.Unlimited && len(n.rules) > 0) || (!d.Unlimited && n.unlimited) {
		return fmt.Errorf("rule %q: descriptor: the same descriptor is unlimited in one rule and limited in another", id)
	}
	if d.Unlimited {
		n.unlimited = true
		return nil
	}
	n.rules = append(n.rules, r)
	return nil
}

// DescriptorEntry is one entry of a descriptor Envoy sends.
type DescriptorEntry struct {
	Key, Value string
}

// Descriptor is one descriptor of a DescriptorRequest.
type Descriptor struct {
	Entries []DescriptorEntry
	// Hits is what the descriptor consumes (envoy's hits_addend, the
	// descriptor's own or the request's); 0 asks without consuming.
	Hits uint64
	// Refund gives Hits back instead of taking them (is_negative_hits).
	Refund bool
	// Override, when set, is the limit the descriptor brings (Envoy's
	// per-descriptor limit): it replaces the rules' lookup.
	Override *LimitOverride
}

// LimitOverride is a limit a descriptor brings with it (Envoy's
// RateLimitOverride): Limit requests per Window, counted in a fixed window,
// in place of the rules'.
type LimitOverride struct {
	Limit  int64
	Window time.Duration
}

// maxOverrides bounds the distinct limit overrides a rule set keeps rules
// for: they come from Envoy's route configuration (a few), not from
// clients.
const maxOverrides = 256

// override returns the rule of a limit override, made once per distinct
// override and rule set.
func (rs *ruleSet) override(o LimitOverride) (*rule, error) {
	if o.Limit < 0 || o.Window <= 0 {
		return nil, fmt.Errorf("%w: a limit override of %d per %v", ErrBadDescriptors, o.Limit, o.Window)
	}
	rs.overrideMu.Lock()
	defer rs.overrideMu.Unlock()
	if r := rs.overrides[o]; r != nil {
		return r, nil
	}
	if len(rs.overrides) >= maxOverrides {
		return nil, fmt.Errorf("%w: more than %d distinct limit overrides", ErrBadDescriptors, maxOverrides)
	}
	p := static.Policy{Algorithm: static.FixedWindow, Limit: o.Limit, Window: o.Window}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%w: limit override: %v", ErrBadDescriptors, err)
	}
	id := fmt.Sprintf("override:%d/%v", o.Limit, o.Window)
	r := &rule{id: id, policy: &p, nominal: p.Limit, nominalCap: p.Capacity(), window: p.Window,
		onError: rs.onError, counters: rs.metrics.ruleCounters(id), rateLimitPrefix: `"` + id + `";r=`, alone: []string{id}, desc: true}
	if rs.overrides == nil {
		rs.overrides = map[LimitOverride]*rule{}
	}
	rs.overrides[o] = r
	return r, nil
}

// DescriptorRequest is a ShouldRateLimit call.
type DescriptorRequest struct {
	Domain      string
	Descriptors []Descriptor
}

// DescriptorStatus is the answer for one descriptor.
type DescriptorStatus struct {
	// Matched is false when no rule applies (the descriptor is allowed
	// and nothing is counted) or an unlimited one does.
	Matched bool
	// Allowed is false when the descriptor's rule denied.
	Allowed bool
	// RuleID, Limit, Window describe the rule that answered (of several at
	// one descriptor: the first that denied, else the tightest).
	RuleID    string
	Limit     int64
	Window    time.Duration
	Remaining int64
	// ResetAfter is until the quota is whole again; RetryAfter, when
	// denied, until a retry can succeed.
	ResetAfter, RetryAfter time.Duration
	// Shadow is true for a shadow rule (its denial does not deny).
	Shadow bool
	// Unlimited is true when an unlimited descriptor matched.
	Unlimited bool
	// EnvoyCompatible is the answering rule's: answer as
	// envoyproxy/ratelimit does, with Name (maybe "") as the limit's name.
	EnvoyCompatible bool
	Name            string
	// Metadata is the answering rule's descriptor metadata (nil: none).
	Metadata map[string]any
	// QuotaMode is the answering rule's quota_mode: its OVER_LIMIT makes
	// the answer OVER_LIMIT only with every quota-mode descriptor's.
	QuotaMode bool
}

// MaxDescriptors bounds the descriptors of one request.
const MaxDescriptors = 64

// maxHits bounds one descriptor's hits: more than any quota holds.
const maxHits = 1 << 40

// ErrBadDescriptors is CheckDescriptors' error for a request it cannot
// decide as sent (no domain, too many descriptors or entries).
var ErrBadDescriptors = errors.New("bad rate limit request")

// CheckDescriptors decides an Envoy rate limit request: every descriptor is
// looked up in its domain's rules, refunds (Refund) are given back first,
// then all the matched rules are checked in one store call, all-or-nothing
// (one Redis round trip), each consuming its descriptor's Hits. The
// Verdict is the request's (its headers are the tightest rule's); statuses
// has one entry per descriptor, in order. A rule with max_wait holds the
// answer until its quota comes back, as it holds an HTTP request.
func (e *Engine) CheckDescriptors(ctx context.Context, req DescriptorRequest) (Verdict, []DescriptorStatus, error) {
	if err := validDescriptors(req); err != nil {
		return Verdict{}, nil, err
	}
	rs := e.rules.Load()
	statuses := make([]DescriptorStatus, len(req.Descriptors))
	for i := range statuses {
		statuses[i].Allowed = true
	}
	v := Verdict{Allowed: true, e: e, static: sluice.NopPermit{}, Decision: sluice.Decision{Allowed: true, Remaining: -1}}
	root := rs.domains[req.Domain]
	if root == nil {
		return v, statuses, nil
	}
	// Sized for a rule per descriptor, the common case.
	n := len(req.Descriptors)
	dl := descriptorLimits{limits: make([]static.Limit, 0, n), firsts: make([]int, 0, n)}
	o, err := dl.collect(descriptorOwners{matched: make([]*rule, 0, n), owners: make([][]int, 0, n)},
		rs, root, req, statuses, e.limiter == nil || e.limiter.Spare(rs.headroom))
	if err != nil {
		return Verdict{}, nil, err
	}
	if len(dl.refunds) > 0 {
		if err := e.store.Undo(ctx, dl.refunds, static.Result{At: e.clock.Now(), Decision: sluice.Decision{Allowed: true}}); err != nil {
			e.log.Warn("rate limit service: refund (is_negative_hits) failed", "error", err.Error())
		}
	}
	if len(dl.charges) > 0 {
		if err := e.store.Charge(ctx, dl.charges, e.clock.Now()); err != nil {
			e.chargeFailed(e.clock.Now(), err)
		}
	}
	limits, matched, owners := dropReplaced(dl.limits, o.matched, o.owners)
	if len(limits) == 0 {
		return v, statuses, nil
	}
	each := make([]sluice.Decision, len(limits))
	res, _, err := e.checkWaiting(ctx, decideFull, matched, limits, each)
	if err != nil {
		return Verdict{}, nil, err
	}
	e.account(matched, limits, each, res.Allowed)
	ratio := rs.cfg.RLS.NearLimitRatio
	for j, r := range matched {
		d := each[j]
		used := r.nominal - d.Remaining
		r.counters.countEnvoy(limits[j].Cost, r.nominal, used, d.Allowed, !d.Allowed && limits[j].Shadow, ratio,
			req.Descriptors[owners[j][0]].Entries) // the limit's first descriptor (firsts is not filtered by dropReplaced)
	}
	admitted := v.takeStatic(matched, limits, each, res)
	for j, ds := range owners {
		d := descriptorDecision(matched[j], limits[j], each[j], res)
		if limits[j].DryRun && d.Allowed && d.Remaining >= 0 {
			d.Remaining += limits[j].Cost // a hits_addend rule's ask took nothing
		}
		for _, i := range ds {
			setStatus(&statuses[i], matched[j], d, limits[j].Shadow)
		}
	}
	if !admitted {
		return v, statuses, nil
	}
	// Envoy reports no request's end: nothing is held past the answer (a
	// reservation's delay is waited out here, before answering).
	taken := static.Reserved(e.store, limits, res)
	if err := taken.Wait(ctx); err != nil {
		return Verdict{}, nil, err
	}
	taken.Done(sluice.Ignore)
	return v, statuses, nil
}

// validDescriptors refuses, with ErrBadDescriptors, a call the peer
// refuses: no domain, no descriptors (a mistake of the caller's, not a
// pass), too many of them or of a descriptor's entries.
func validDescriptors(req DescriptorRequest) error {
	if req.Domain == "" {
		return fmt.Errorf("%w: no domain", ErrBadDescriptors)
	}
	if len(req.Descriptors) == 0 {
		return fmt.Errorf("%w: the descriptor list must not be empty", ErrBadDescriptors)
	}
	if len(req.Descriptors) > MaxDescriptors {
		return fmt.Errorf("%w: %d descriptors, more than %d", ErrBadDescriptors, len(req.Descriptors), MaxDescriptors)
	}
	for i, d := range req.Descriptors {
		if len(d.Entries) > config.MaxDescriptorEntries {
			return fmt.Errorf("%w: descriptor %d has %d entries, want at most %d", ErrBadDescriptors, i, len(d.Entries), config.MaxDescriptorEntries)
		}
	}
	return nil
}

// descriptorDecision is what one limit of a call answers its descriptors:
// its decision, with what was left before the call when the call as a
// whole was refused and took nothing, and the peer's reset time.
func descriptorDecision(r *rule, l static.Limit, d sluice.Decision, res static.Result) sluice.Decision {
	if !res.Allowed && d.Allowed && d.Remaining >= 0 && !l.Policy.CountBlocked {
		// Nothing was taken (all-or-nothing): what is left is what was
		// left before the call. A rule that counts blocked hits (as
		// envoyproxy/ratelimit counts every descriptor of a call) kept
		// them: its remaining stands.
		d.Remaining = min(d.Remaining+l.Cost, max(d.Limit, d.Remaining))
	}
	if r.envoyCompat && d.ResetAfter <= 0 {
		// As the peer answers: the time to the end of the unit, even when
		// the counter was not touched (hits 0 on a fresh key) or cannot be
		// (a limit of 0).
		d.ResetAfter = untilWindowEnd(res.At, r.window)
	}
	return d
}

// descriptorLimits are the limits one call checks, one per counter, and
// the refunds it gives back.
type descriptorLimits struct {
	limits  []static.Limit
	byKey   map[string]int // a limit's index by key, once there are many
	refunds []static.Limit
	charges []static.Limit // hits_addend rules' calls at the stream's end
	firsts  []int          // descriptorOwners.owners' first elements, in one array
}

// descriptorOwners are, by limit, its rule and the descriptors that share
// it. They are apart from descriptorLimits (whose keys go into a map, and
// whose firsts owners point into), so that escape analysis keeps them on
// the caller's stack while small.
type descriptorOwners struct {
	matched []*rule
	owners  [][]int // the descriptors of each limit
}

// collect adds the limits of each descriptor of req to dl and o: the rules
// its entries match under root, or the limit its override states. A
// descriptor that matches nothing stays allowed; one that matches an
// unlimited node is marked so in statuses.
func (dl *descriptorLimits) collect(o descriptorOwners, rs *ruleSet, root *descNode, req DescriptorRequest, statuses []DescriptorStatus, spare bool) (descriptorOwners, error) {
	for i, d := range req.Descriptors {
		if len(d.Entries) == 0 {
			continue // no entries match no rule: OK, as envoyproxy/ratelimit answers
		}
		var shared [config.MaxDescriptorEntries]string
		var rules []*rule
		if ov := d.Override; ov != nil {
			// The limit Envoy's route sent wins over the rules (as the
			// peer answers it): a fixed window of its own, per descriptor.
			r, err := rs.override(*ov)
			if err != nil {
				return o, err
			}
			rules = []*rule{r}
		} else {
			n := root.lookup(d.Entries, shared[:len(d.Entries)])
			if n == nil {
				continue
			}
			if n.unlimited {
				statuses[i].Unlimited = true
				continue
			}
			rules = n.rules
		}
		cost := int64(min(d.Hits, maxHits))
		counter := descriptorCounter(req.Domain, d.Entries, shared[:len(d.Entries)])
		for _, r := range rules {
			// A refund notes no demand; it gives its hits back (Undo)
			// and reports the quota with a check that takes nothing.
			l := r.limit(cost, d.Refund, spare)
			l.Key, l.DryRun = counter+r.id, false
			switch {
			case d.Refund:
				back := l
				back.Shadow = false
				dl.refunds = append(dl.refunds, back)
				l.Cost, l.Shadow = 0, true
			case r.cost != nil && r.cost.from.Kind == config.CostHitsAddend && cost > 0:
				// Envoy's call at the stream's end (apply_on_stream_done):
				// the usage has happened. It is charged, never refused,
				// and the answer reports the quota, taking nothing.
				used := l
				used.Shadow = false
				dl.charges = append(dl.charges, used)
				r.counters.costCharged.Add(uint64(cost))
				l.Cost, l.Shadow = 0, true
			case r.cost != nil && r.cost.from.Kind == config.CostHitsAddend:
				// The call before the request (hits 0): admitted while a
				// unit is left, taking nothing; the end's call charges.
				l.Cost, l.DryRun = 1, true
			}
			o = dl.add(o, i, r, l)
		}
	}
	return o, nil
}

// add adds descriptor i's limit l of rule r; the same counter twice in one
// call is one check of the summed hits (a store must see a key once).
func (dl *descriptorLimits) add(o descriptorOwners, i int, r *rule, l static.Limit) descriptorOwners {
	if j, ok := dl.indexOf(l.Key); ok && dl.limits[j].Shadow == l.Shadow {
		dl.limits[j].Cost += l.Cost
		o.owners[j] = append(o.owners[j], i)
		return o
	}
	if dl.byKey == nil && len(dl.limits) == 16 { // past a few, a map beats a scan
		dl.byKey = make(map[string]int, 2*len(dl.limits))
		for j := range dl.limits {
			dl.byKey[dl.limits[j].Key] = j
		}
	}
	if dl.byKey != nil {
		dl.byKey[l.Key] = len(dl.limits)
	}
	dl.limits = append(dl.limits, l)
	o.matched = append(o.matched, r)
	dl.firsts = append(dl.firsts, i)
	n := len(dl.firsts)
	o.owners = append(o.owners, dl.firsts[n-1:n:n])
	return o
}

// indexOf returns the index of the latest limit of key.
func (dl *descriptorLimits) indexOf(key string) (int, bool) {
	if dl.byKey != nil {
		j, ok := dl.byKey[key]
		return j, ok
	}
	for j := len(dl.limits) - 1; j >= 0; j-- { // the latest, as the map keeps
		if dl.limits[j].Key == key {
			return j, true
		}
	}
	return 0, false
}

// untilWindowEnd is how long after now the fixed window of length w that
// holds now ends, windows counted from the Unix epoch as envoyproxy/ratelimit
// and the fixed window algorithm count them.
func untilWindowEnd(now time.Time, w time.Duration) time.Duration {
	if w <= 0 {
		return 0
	}
	return w - time.Duration(now.UnixNano()%int64(w))
}

// setStatus makes d, rule r's decision, st's answer unless st holds a
// better one: of several rules at one descriptor, the first that denied,
// else the tightest.
func setStatus(st *DescriptorStatus, r *rule, d sluice.Decision, shadow bool) {
	denies := !d.Allowed && !shadow
	if st.Matched && (!st.Allowed || (!denies && d.Remaining >= st.Remaining)) {
		return
	}
	*st = DescriptorStatus{Matched: true, Allowed: !denies, RuleID: r.id, Limit: r.nominal, Window: r.window,
		Remaining: d.Remaining, ResetAfter: d.ResetAfter, RetryAfter: d.RetryAfter, Shadow: shadow,
		EnvoyCompatible: r.envoyCompat, Name: r.envoyName, Metadata: r.envoyMeta, QuotaMode: r.quotaMode}
	if r.mode == modeSoft {
		st.Remaining = min(max(0, st.Remaining-r.softExtra), r.nominalCap)
	}
}

// dropReplaced removes the limits of rules another matched rule replaces.
func dropReplaced(limits []static.Limit, matched []*rule, owner [][]int) ([]static.Limit, []*rule, [][]int) {
	var gone map[string]bool
	for _, r := range matched {
		for _, id := range r.replaces {
			if gone == nil {
				gone = map[string]bool{}
			}
			gone[id] = true
		}
	}
	if gone == nil {
		return limits, matched, owner
	}
	k := 0
	for j := range limits {
		if gone[matched[j].id] {
			continue
		}
		limits[k], matched[k], owner[k] = limits[j], matched[j], owner[j]
		k++
	}
	return limits[:k], matched[:k], owner[:k]
}

// descriptorCounter is the part of a descriptor's counter keys before the
// rule id: "{d:<domain>|<key>=<value>|...}:", the braced part hashed when
// long (values come from clients). An entry with a shared pattern counts
// under the pattern, not its value.
func descriptorCounter(domain string, entries []DescriptorEntry, shared []string) string {
	n := len(domain)
	for i, e := range entries {
		if shared[i] != "" {
			e.Value = shared[i]
		}
		n += 2 + len(e.Key) + len(e.Value)
	}
	var b strings.Builder
	long := n > MaxIdentifierBytes
	if !long {
		b.Grow(len("{d:") + n + len("}:")) // one allocation
		b.WriteString("{d:")
	}
	b.WriteString(domain)
	for i, e := range entries {
		if shared[i] != "" {
			e.Value = shared[i]
		}
		b.WriteByte('|')
		b.WriteString(e.Key)
		b.WriteByte('=')
		b.WriteString(e.Value)
	}
	if long {
		return "{d:" + hashIdentifier(b.String()) + "}:"
	}
	b.WriteString("}:")
	return b.String()
}
