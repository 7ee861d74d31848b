// Package zkrules keeps rules in ZooKeeper, in the seed design's layout: a
// persistent parent znode (default /config/ratelimit/rules) with one child
// per rule, named by its rule_id, whose data is the rule as JSON in the
// same schema as a rules file. A Watcher reads the rules, watches the
// parent (rules added or removed) and every rule (rule changed), re-arms
// each watch after it fires, and reads everything again whenever a session
// is (re-)established, so that no change made while it was away is
// missed. Push makes the znodes match a set of rules in one atomic
// multi-operation (create, setData, delete); List shows them.
package zkrules

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/sluicehq/sluice/config"
)

// MaxRuleBytes bounds one rule's znode data; a larger znode is refused.
// (ZooKeeper's own bound is 1 MiB per znode.)
const MaxRuleBytes = 64 << 10

// MaxRules bounds how many rules a parent may hold; past it the whole
// change is refused and the last good set stays.
const MaxRules = 10000

// Options configure a Watcher.
type Options struct {
	// Servers are the ensemble's host:port addresses.
	Servers []string
	// Path is the parent znode.
	Path string
	// SessionTimeout is the session's timeout; default 10s.
	SessionTimeout time.Duration
	// Check validates one rule against the rest of the configuration
	// (store, identity): a rule it refuses is reported, never applied.
	// Nil accepts every rule that decodes.
	Check func(config.Rule) error
	// Apply is called, from the Watcher's goroutine, with every new rule
	// set: at the first full read and after every change. An error is
	// reported (State.ApplyError) and the set is offered again at the next
	// change.
	Apply func(Set) error
	// Auth, when set, authenticates every session (digest), so that rules
	// readable only by that identity can be read.
	Auth *Auth
	// Logger logs changes, refusals and the session's life; default none.
	Logger *slog.Logger
}

// Set is the rule set the znodes describe.
type Set struct {
	// Rules are the good rules, sorted by rule_id: for a znode refused
	// now, its last good version when it had one.
	Rules []config.Rule
	// Data is each good rule's znode data (what a cache keeps).
	Data map[string][]byte
	// Refused lists the znodes whose current data was refused.
	Refused []Refusal
}

// Refusal is a znode whose data is not a valid rule.
type Refusal struct {
	// ZNode is the child's name.
	ZNode string `json:"znode"`
	// Error says why.
	Error string `json:"error"`
	// Kept is true when the rule's last good version stays in force.
	Kept bool `json:"kept"`
}

// State is a snapshot of a Watcher.
type State struct {
	// Connected is true while the Watcher has a ZooKeeper session.
	Connected bool `json:"connected"`
	// Loaded is true once a full read succeeded.
	Loaded bool `json:"loaded"`
	// Rules is how many rules the last applied set held.
	Rules int `json:"rules"`
	// Refused lists the znodes refused now.
	Refused []Refusal `json:"refused,omitempty"`
	// Updates counts the sets applied; Sessions the sessions established.
	Updates  uint64 `json:"updates"`
	Sessions uint64 `json:"sessions"`
	// LastUpdate is when a set was last applied (zero: never).
	LastUpdate time.Time `json:"last_update,omitzero"`
	// Error is the last read or apply error, "" when the last pass
	// succeeded.
	Error string `json:"error,omitempty"`
}

// node is what the Watcher knows of one child znode.
type node struct {
	data    []byte
	version int32
	good    *config.Rule // the last good version, nil if none
	goodRaw []byte
	err     error // why the current data is refused, nil if it is good
}

// Watcher keeps a rule set in step with the znodes under a path.
type Watcher struct {
	opts   Options
	conn   *zk.Conn
	events <-chan zk.Event
	fired  chan fired
	cancel context.CancelFunc
	done   chan struct{}

	// owned by the run goroutine
	parentArmed bool
	armed       map[string]bool
	nodes       map[string]*node
	dirty       map[string]bool
	relist      bool
	applied     []byte // a fingerprint of the last applied set
	authed      bool   // Auth was added (the client re-sends it on every new session)

	mu    sync.Mutex
	state State
}

// fired is a watch that fired: on the parent (child == "") or a child.
type fired struct {
	child string
	ev    zk.Event
}

// Watch connects to ZooKeeper and starts watching in the background; the
// first Apply comes once the first full read succeeds. It fails only on a
// bad option; an unreachable ensemble is retried for as long as the
// Watcher lives.
func Watch(opts Options) (*Watcher, error) {
	if len(opts.Servers) == 0 {
		return nil, errors.New("zkrules: no servers")
	}
	if err := config.CheckZNodePath(opts.Path); err != nil {
		return nil, fmt.Errorf("zkrules: path: %w", err)
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Apply == nil {
		opts.Apply = func(Set) error { return nil }
	}
	conn, events, err := connect(opts.Servers, opts.SessionTimeout, opts.Logger)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &Watcher{opts: opts, conn: conn, events: events, fired: make(chan fired, 64), cancel: cancel,
		done: make(chan struct{}), armed: map[string]bool{}, nodes: map[string]*node{}, dirty: map[string]bool{}}
	go w.run(ctx)
	return w, nil
}

// connect opens a session in the background, logging the client's chatter
// at debug level.
func connect(servers []string, timeout time.Duration, log *slog.Logger) (*zk.Conn, <-chan zk.Event, error) {
	conn, events, err := zk.Connect(servers, timeout, zk.WithLogger(zkLogger{log}), zk.WithLogInfo(false))
	if err != nil {
		return nil, nil, fmt.Errorf("zkrules: %w", err)
	}
	return conn, events, nil
}

type zkLogger struct{ log *slog.Logger }

func (l zkLogger) Printf(format string, args ...any) {
	l.log.Debug("zookeeper client: " + fmt.Sprintf(format, args...))
}

// State returns a snapshot of the Watcher.
func (w *Watcher) State() State {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.state
	s.Refused = slices.Clone(s.Refused)
	return s
}

// Close ends the session and the Watcher's goroutine.
func (w *Watcher) Close() {
	w.cancel()
	<-w.done
	w.conn.Close()
}

// errNoParent is reconcile's error when the parent znode is missing.
var errNoParent = errors.New("no parent znode")

// retryEvery is how soon a failed read is tried again while the session
// lasts.
const retryEvery = time.Second

func (w *Watcher) run(ctx context.Context) {
	defer close(w.done)
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.events:
			if !ok {
				return
			}
			w.session(ev)
		case f := <-w.fired:
			w.watchFired(f)
		case <-retry:
			retry = nil
		}
		// Take every event already waiting before reading: a push of
		// many rules is read in one pass.
		for drained := false; !drained; {
			select {
			case f := <-w.fired:
				w.watchFired(f)
			case ev, ok := <-w.events:
				if !ok {
					return
				}
				w.session(ev)
			default:
				drained = true
			}
		}
		if !w.relist && len(w.dirty) == 0 {
			continue
		}
		if w.conn.State() != zk.StateHasSession {
			continue // the next session reads everything
		}
		if w.opts.Auth != nil && !w.authed {
			if err := w.opts.Auth.add(w.conn); err != nil {
				if w.setError(err) {
					w.opts.Logger.Warn("zookeeper rules: authentication failed; the last good rules stay in force", "error", err.Error())
				}
				retry = time.After(retryEvery)
				continue
			}
			w.authed = true
		}
		if err := w.reconcile(ctx); err != nil {
			if w.setError(err) {
				w.opts.Logger.Warn("zookeeper rules: read failed; the last good rules stay in force", "path", w.opts.Path, "error", err.Error())
			}
			if !errors.Is(err, errNoParent) { // its creation fires a watch
				retry = time.After(retryEvery)
			}
			continue
		}
		w.publish()
	}
}

// session handles a session event: a new or re-established session reads
// everything again (watches set before an expiry are gone, and changes
// made while disconnected may not all fire).
func (w *Watcher) session(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	switch ev.State {
	case zk.StateHasSession:
		w.relist = true
		for name := range w.nodes {
			w.dirty[name] = true
		}
		w.mu.Lock()
		w.state.Connected = true
		w.state.Sessions++
		w.mu.Unlock()
		w.opts.Logger.Info("zookeeper rules: session established", "server", ev.Server, "path", w.opts.Path)
	case zk.StateDisconnected, zk.StateExpired, zk.StateAuthFailed:
		w.mu.Lock()
		was := w.state.Connected
		w.state.Connected = false
		w.mu.Unlock()
		if was {
			w.opts.Logger.Warn("zookeeper rules: session lost; the last good rules stay in force", "state", ev.State.String())
		}
	}
}

func (w *Watcher) watchFired(f fired) {
	if f.ev.Type == zk.EventNotWatching {
		// The session expired (or the client closes): every watch is gone.
		w.parentArmed = false
		clear(w.armed)
		w.relist = true
		for name := range w.nodes {
			w.dirty[name] = true
		}
		return
	}
	if f.child == "" {
		w.parentArmed = false
		w.relist = true
		return
	}
	w.armed[f.child] = false
	w.dirty[f.child] = true
	w.relist = true // see reconcile
}

// forward hands a one-shot watch's event to the run loop.
func (w *Watcher) forward(ctx context.Context, child string, ch <-chan zk.Event) {
	go func() {
		select {
		case ev, ok := <-ch:
			if !ok {
				ev = zk.Event{Type: zk.EventNotWatching}
			}
			select {
			case w.fired <- fired{child: child, ev: ev}:
			case <-ctx.Done():
			}
		case <-ctx.Done():
		}
	}()
}

// reconcile reads what changed: the children list when it may have
// changed, and every dirty child, arming each watch that is not armed.
func (w *Watcher) reconcile(ctx context.Context) error {
	if w.relist {
		var children []string
		var err error
		if w.parentArmed {
			children, _, err = w.conn.Children(w.opts.Path)
		} else {
			var ch <-chan zk.Event
			children, _, ch, err = w.conn.ChildrenW(w.opts.Path)
			if err == nil {
				w.parentArmed = true
				w.forward(ctx, "", ch)
			}
		}
		if errors.Is(err, zk.ErrNoNode) {
			// No parent: watch for its creation, and keep the last good
			// rules (a missing parent is a mistake more often than an
			// intent to lift every limit).
			_, _, ch, eerr := w.conn.ExistsW(w.opts.Path)
			if eerr == nil {
				w.parentArmed = true
				w.forward(ctx, "", ch)
				return fmt.Errorf("%w: %s (create it with `sluice rules push`)", errNoParent, w.opts.Path)
			}
			return eerr
		}
		if err != nil {
			return fmt.Errorf("children of %s: %w", w.opts.Path, err)
		}
		if len(children) > MaxRules {
			return fmt.Errorf("%s has %d children, more than %d", w.opts.Path, len(children), MaxRules)
		}
		// Read every child, not only those whose watch fired: a push's
		// multi-operation committed before its first event, so reading all
		// of them now applies the push whole, never half of it.
		present := make(map[string]bool, len(children))
		for _, c := range children {
			present[c] = true
			w.dirty[c] = true
		}
		for name := range w.nodes {
			if !present[name] {
				delete(w.nodes, name)
				delete(w.dirty, name)
				w.opts.Logger.Info("zookeeper rules: rule removed", "rule_id", name)
			}
		}
		w.relist = false
	}
	for _, name := range slices.Sorted(maps.Keys(w.dirty)) {
		p := path.Join(w.opts.Path, name)
		var data []byte
		var st *zk.Stat
		var err error
		if w.armed[name] {
			data, st, err = w.conn.Get(p)
		} else {
			var ch <-chan zk.Event
			data, st, ch, err = w.conn.GetW(p)
			if err == nil {
				w.armed[name] = true
				w.forward(ctx, name, ch)
			}
		}
		if errors.Is(err, zk.ErrNoNode) {
			delete(w.nodes, name)
			delete(w.dirty, name)
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		delete(w.dirty, name)
		w.update(name, data, st.Version)
	}
	return nil
}

// update decodes and checks a child's data. A refused version leaves the
// last good one in force.
func (w *Watcher) update(name string, data []byte, version int32) {
	n := w.nodes[name]
	if n == nil {
		n = &node{}
		w.nodes[name] = n
	}
	if n.good != nil && n.err == nil && n.version == version && string(n.data) == string(data) {
		return
	}
	n.data, n.version = data, version
	r, err := w.decode(name, data)
	if err != nil {
		n.err = err
		w.opts.Logger.Error("zookeeper rules: znode refused", "znode", path.Join(w.opts.Path, name), "error", err.Error(),
			"kept_previous", n.good != nil)
		return
	}
	n.err, n.good, n.goodRaw = nil, &r, data
}

func (w *Watcher) decode(name string, data []byte) (config.Rule, error) {
	return decodeRule(name, data, w.opts.Check)
}

// decodeRule decodes one znode's data as a rule and checks it: a bound on
// its size, strict decoding, its rule_id the znode's name, and check when
// not nil.
func decodeRule(name string, data []byte, check func(config.Rule) error) (config.Rule, error) {
	if len(data) > MaxRuleBytes {
		return config.Rule{}, fmt.Errorf("%d bytes, more than %d", len(data), MaxRuleBytes)
	}
	r, err := config.ParseRule("znode "+name, data)
	if err != nil {
		return r, err
	}
	if r.RuleID != name {
		return r, fmt.Errorf("znode %s: rule_id %q differs from the znode's name", name, r.RuleID)
	}
	if check != nil {
		if err := check(r); err != nil {
			return r, err
		}
	}
	return r, nil
}

// set builds the rule set the nodes describe now.
func (w *Watcher) set() Set {
	s := Set{Data: map[string][]byte{}}
	for _, name := range slices.Sorted(maps.Keys(w.nodes)) {
		n := w.nodes[name]
		if n.err != nil {
			s.Refused = append(s.Refused, Refusal{ZNode: name, Error: n.err.Error(), Kept: n.good != nil})
		}
		if n.good != nil {
			s.Rules = append(s.Rules, *n.good)
			s.Data[name] = n.goodRaw
		}
	}
	return s
}

// publish applies the set when it differs from the last applied one.
func (w *Watcher) publish() {
	s := w.set()
	fp := fingerprint(s)
	w.mu.Lock()
	w.state.Loaded = true
	w.state.Refused = s.Refused
	w.state.Error = ""
	w.mu.Unlock()
	if w.applied != nil && string(fp) == string(w.applied) {
		return
	}
	if err := w.opts.Apply(s); err != nil {
		_ = w.setError(fmt.Errorf("applying the rules: %w", err))
		w.opts.Logger.Error("zookeeper rules: new rule set refused; the last good rules stay in force", "error", err.Error())
		return
	}
	w.applied = fp
	w.mu.Lock()
	w.state.Rules = len(s.Rules)
	w.state.Updates++
	w.state.LastUpdate = time.Now()
	w.mu.Unlock()
	w.opts.Logger.Info("zookeeper rules: applied", "path", w.opts.Path, "rules", len(s.Rules), "refused", len(s.Refused))
}

// setError records err and reports whether it differs from the last.
func (w *Watcher) setError(err error) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	changed := w.state.Error != err.Error()
	w.state.Error = err.Error()
	return changed
}

// fingerprint identifies a set by its good rules' data.
func fingerprint(s Set) []byte {
	fp := []byte{1}
	for _, name := range slices.Sorted(maps.Keys(s.Data)) {
		fp = fmt.Appendf(fp, "%d:%s%d:", len(name), name, len(s.Data[name]))
		fp = append(fp, s.Data[name]...)
	}
	return fp
}
