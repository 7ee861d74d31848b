// Package daemon is `sluice run`: the engine behind a reverse proxy (the
// fast engine or net/http), the admin port, the configuration file it
// watches and reloads, and the rules source (ZooKeeper) it follows.
package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/envoyconf"
	"github.com/sluicehq/sluice/sidecar"
	"github.com/sluicehq/sluice/sidecar/admin"
	"github.com/sluicehq/sluice/sidecar/fastproxy"
)

// frontend is the proxy's HTTP engine: net/http (stdFrontend) or the fast
// engine (fastproxy.Proxy). The daemon makes and wraps its listener.
type frontend interface {
	Serve(ln net.Listener)
	Shutdown(ctx context.Context) error
}

// stdFrontend is the net/http engine: one http.Server.
type stdFrontend struct {
	srv  *http.Server
	log  *slog.Logger
	done chan struct{}
}

// Serve serves ln in the background until Shutdown.
func (f *stdFrontend) Serve(ln net.Listener) {
	f.done = make(chan struct{})
	go func() {
		defer close(f.done)
		if err := f.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			f.log.Error("serve", "addr", ln.Addr().String(), "error", err.Error())
		}
	}()
}

// Shutdown stops accepting and waits for requests in flight until ctx
// ends; then it closes what is left.
func (f *stdFrontend) Shutdown(ctx context.Context) error {
	if f.done == nil {
		return nil
	}
	err := f.srv.Shutdown(ctx)
	if err != nil {
		_ = f.srv.Close()
	}
	<-f.done
	return err
}

// Server is the sidecar: the engine behind a reverse proxy, the admin port,
// and the configuration file it reloads. Start binds both ports at once (a
// taken port fails start-up) and serves in the background; Shutdown stops
// accepting and lets in-flight requests finish.
type Server struct {
	// Engine is the server's engine.
	Engine *engine.Engine

	cfg    *config.Config
	file   *config.Config // the file as last read (its own rules, no source's); under mu
	path   string         // "" when not from a file
	log    *slog.Logger
	proxy  frontend // nil: no upstream, the rate limit service only
	bound  string   // the proxy's address once listening
	admin  *admin.Server
	accept *acceptWatch // the proxy listener's accepts, for /readyz and metrics
	stop   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex // serialises reloads
	// missing holds when each rule the file lacks was first found missing
	// (rules kept in force until removalDelay); confirm is the reload
	// scheduled for then. Under mu.
	missing map[string]time.Time
	confirm *time.Timer
	// source is the rules source (ZooKeeper), nil when the rules are
	// the file's.
	source *zkSource

	shutdownOnce sync.Once
	shutdownErr  error
}

// New builds a server for cfg; path is the file to reload ("" for none).
// With a Redis store, readiness waits for Redis to answer once.
func New(cfg *config.Config, path string, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Upstream == "" && cfg.RLS.Listen == "" {
		return nil, fmt.Errorf("%s: upstream: required to run the proxy (or pass -upstream); without one, set rls.listen to serve Envoy's rate limit service only", cfg.File)
	}
	var up *url.URL
	if cfg.Upstream != "" {
		var err error
		up, err = url.Parse(cfg.Upstream)
		if err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
			return nil, fmt.Errorf("%s: upstream: %q is not an http(s) URL", cfg.File, cfg.Upstream)
		}
	}
	s := &Server{cfg: cfg, file: cfg, path: path, log: log, stop: make(chan struct{}), missing: map[string]time.Time{}}
	// The daemon's own registry also carries the Go runtime's and the
	// process's metrics (memory, goroutines, file descriptors).
	reg := prometheus.NewRegistry()
	s.accept = newAcceptWatch(log, sluice.NewSystemClock().Now)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), s.accept)
	withRules, pending := s.openSource(cfg)
	withRules, err := s.assemble(withRules, withRules.Rules)
	if err != nil {
		return nil, err
	}
	// The upstream runs apart from sluice: a round trip's wait for sluice's
	// own CPU is no queue in it.
	opts := engine.Options{Logger: log, Registerer: reg, SelfDelay: adaptive.NewSchedDelay().Mean}
	if s.Engine, err = engine.New(withRules, opts); err != nil {
		return nil, err
	}
	if s.source != nil {
		s.Engine.SetRulesSource(s.sourceState, pending)
	}
	s.admin = admin.NewServer(s.Engine, cfg.Admin, admin.Options{Reload: s.reloadFunc(), NotReady: s.accept.failing, AllowedHosts: cfg.AdminHosts})
	if up == nil {
		return s, nil
	}
	proxy := &http.Server{
		Handler:           dropUnderscoreHeaders(sidecar.Middleware(s.Engine, sidecar.NewProxy(up, cfg.UpstreamTimeout.D(), log)), cfg.Proxy.UnderscoresInHeaders),
		ReadHeaderTimeout: min(10*time.Second, cfg.ReadTimeout.D()),
		ReadTimeout:       cfg.ReadTimeout.D(),
		IdleTimeout:       cfg.IdleTimeout.D(),
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// HTTP/1.1 and HTTP/2 without TLS (h2c) on the same port.
	proxy.Protocols = new(http.Protocols)
	proxy.Protocols.SetHTTP1(true)
	proxy.Protocols.SetUnencryptedHTTP2(true)
	if cfg.Proxy.Engine == config.ProxyFast {
		s.proxy = fastproxy.New(s.Engine, fastproxy.Options{Upstream: up, UpstreamTimeout: cfg.UpstreamTimeout.D(),
			ReadTimeout: cfg.ReadTimeout.D(), IdleTimeout: cfg.IdleTimeout.D(), MaxHeaderBytes: cfg.MaxHeaderBytes,
			Underscores: cfg.Proxy.UnderscoresInHeaders, Std: proxy, Logger: log})
	} else {
		s.proxy = &stdFrontend{srv: proxy, log: log}
	}
	return s, nil
}

func (s *Server) reloadFunc() func() error {
	if s.path == "" {
		return nil
	}
	return s.Reload
}

// assemble returns file's configuration with rules (the file's, or the
// rules source's) and the rules of its rls.envoy_configs files.
func (s *Server) assemble(file *config.Config, rules []config.Rule) (*config.Config, error) {
	return Assemble(file, s.path, rules)
}

// Assemble returns file's configuration (read from path, "" when it was
// not read from a file) with rules and the rules of its rls.envoy_configs
// files, relative paths taken from path's folder: what `sluice run`
// enforces, and what `sluice check` validates.
func Assemble(file *config.Config, path string, rules []config.Rule) (*config.Config, error) {
	if len(file.RLS.EnvoyConfigs) > 0 {
		paths, err := envoyFiles(file, path)
		if err != nil {
			return nil, fmt.Errorf("%s: rls.envoy_configs: %w", file.File, err)
		}
		imported, err := envoyconf.LoadMerging(file.RLS.MergeDomains, paths...)
		if err != nil {
			return nil, fmt.Errorf("%s: rls.envoy_configs: %w", file.File, err)
		}
		rules = append(append([]config.Rule(nil), rules...), imported...)
	}
	return file.WithRules(rules)
}

// envoyEntries returns file's rls.envoy_configs entries, relative ones
// taken from path's folder.
func envoyEntries(file *config.Config, path string) []string {
	out := make([]string, len(file.RLS.EnvoyConfigs))
	for i, p := range file.RLS.EnvoyConfigs {
		if !filepath.IsAbs(p) && path != "" {
			p = filepath.Join(filepath.Dir(path), p) // relative to the configuration file
		}
		out[i] = filepath.Clean(p)
	}
	return out
}

// envoyFiles returns the Envoy configuration files file names: each entry
// a file, or a folder whose *.yaml and *.yml files all count (the peer's
// runtime folder), in name order.
func envoyFiles(file *config.Config, path string) ([]string, error) {
	var out []string
	for _, p := range envoyEntries(file, path) {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			out = append(out, p)
			continue
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			if n := e.Name(); !e.IsDir() && !strings.HasPrefix(n, ".") && (strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
				out = append(out, filepath.Join(p, n))
			}
		}
	}
	return out, nil
}

// Start binds the proxy and admin addresses and serves them in the
// background, with the engine's background work and the file watcher.
func (s *Server) Start() error {
	var ln net.Listener
	if s.proxy != nil {
		var err error
		if ln, err = s.listen(); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
	}
	if err := s.admin.Start(); err != nil {
		if ln != nil {
			_ = ln.Close()
		}
		return err
	}
	if ln != nil {
		s.proxy.Serve(ln)
	}
	s.Engine.Start()
	if err := s.startSource(); err != nil {
		_ = s.Shutdown(context.Background())
		return err
	}
	s.log.Info("sluice serving", "listen", s.bound, "upstream", s.cfg.Upstream, "admin", s.admin.Addr(),
		"store", s.cfg.Store.Type, "rules", len(s.Engine.Config().Rules), "adaptive", s.cfg.Adaptive.Algorithm, "engine", s.cfg.Proxy.Engine)
	if s.path != "" {
		if err := s.watch(); err != nil {
			s.log.Warn("config file not watched; reload with SIGHUP or POST /v1/reload", "error", err.Error())
		}
	}
	return nil
}

// listen binds the proxy's address: each accept is watched (see
// acceptWatch) and each write to a client bounded by write_timeout.
func (s *Server) listen() (net.Listener, error) {
	l, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return nil, err
	}
	s.bound = l.Addr().String()
	s.accept.addr = s.bound
	l = watchedListener{Listener: l, watch: s.accept}
	if t := s.cfg.WriteTimeout.D(); t > 0 {
		l = writeDeadlineListener{Listener: l, timeout: t}
	}
	return l, nil
}

// Addrs returns the bound proxy and admin addresses (after Start).
func (s *Server) Addrs() (proxy, admin string) { return s.bound, s.admin.Addr() }

// watch reloads when the configuration file changes. It watches the folder,
// so that editors that replace the file (and Kubernetes' ConfigMap symlink
// swaps) are seen too, and waits for writes to settle.
func (s *Server) watch() error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	if err := w.Add(filepath.Dir(s.path)); err != nil {
		w.Close()
		return err
	}
	// The Envoy configuration files the file names, and the folders among
	// them, are watched too: an edit, a new file or a removed one in a
	// runtime folder reloads.
	watched := map[string]bool{} // folders added to w
	envoy := map[string]bool{}   // the Envoy entries: files and folders
	track := func() {
		s.mu.Lock()
		file := s.file
		s.mu.Unlock()
		clear(envoy)
		for _, p := range envoyEntries(file, s.path) {
			envoy[p] = true
			dir := filepath.Dir(p)
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				dir = p
			}
			if !watched[dir] {
				if err := w.Add(dir); err != nil {
					s.log.Warn("config watcher: an Envoy configuration's folder is not watched; reload with SIGHUP", "folder", dir, "error", err.Error())
					continue
				}
				watched[dir] = true
			}
		}
	}
	track()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer w.Close()
		var settle <-chan time.Time
		base := filepath.Base(s.path)
		for {
			select {
			case <-s.stop:
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				name := filepath.Clean(ev.Name)
				if filepath.Base(name) == base || filepath.Base(name) == "..data" || envoy[name] || envoy[filepath.Dir(name)] {
					settle = time.After(200 * time.Millisecond)
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				s.log.Warn("config watcher", "error", err.Error())
			case <-settle:
				settle = nil
				_ = s.Reload()
				track() // the file may name other Envoy files now
			}
		}
	}()
	return nil
}

// settleTime is how long a reload that would remove rules waits for the
// file to read the same again: a file cut short at a rule boundary parses,
// and applying it would lift those rules' limits until the write ends.
const settleTime = 500 * time.Millisecond

// removalDelay is how long a rule must be missing from the file before a
// reload removes it: a file written in two steps, with a pause between
// them longer than settleTime, parses half-written, and removing the rules
// of its second half would lift their limits until the write ends.
const removalDelay = 5 * time.Second

// Reload reads the configuration file again. A bad file keeps the old rules;
// the error says why (and is logged and counted). A file that removes rules
// is read again after settleTime until two reads agree (a write still in
// progress), and then applied with the rules it lacks kept in force until
// they have been missing for removalDelay: a reload then (scheduled, or any
// earlier one past it) removes them, logged as a warning naming the rules.
func (s *Server) Reload() error {
	if s.path == "" {
		return errors.New("no configuration file to reload")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cfg, file, removed, err := s.readSettled()
	var kept []string
	if err == nil {
		removed, kept = s.holdRemovals(cfg, removed)
	}
	if err == nil {
		// Addresses on the command line win over the file, as at start.
		cfg.Listen, cfg.Admin, cfg.Upstream = s.cfg.Listen, s.cfg.Admin, s.cfg.Upstream
		err = s.Engine.Reload(cfg)
	}
	if err == nil {
		file.Listen, file.Admin, file.Upstream = s.cfg.Listen, s.cfg.Admin, s.cfg.Upstream
		s.file = file
	}
	if err != nil {
		s.Engine.CountReload(false)
		s.log.Error("reload failed; keeping the previous rules", "error", err.Error())
		return err
	}
	if len(removed) > 0 {
		s.log.Warn("reload removed rules", "file", s.path, "removed", removed)
	}
	if len(kept) > 0 {
		s.log.Warn("rules missing from the file stay in force until they have been missing for "+removalDelay.String()+
			" (a write in progress must not lift limits)", "file", s.path, "missing", kept)
	}
	s.Engine.CountReload(true)
	s.log.Info("configuration reloaded", "file", s.path, "rules", len(cfg.Rules))
	return nil
}

// holdRemovals splits the rules cfg removes into those missing for
// removalDelay (removed now) and the others, which it adds back to cfg from
// the running configuration and for which it schedules a reload when their
// delay ends. Called under s.mu.
func (s *Server) holdRemovals(cfg *config.Config, removed []string) (gone, kept []string) {
	now := time.Now()
	present := make(map[string]bool, len(cfg.Rules))
	for _, r := range cfg.Rules {
		present[r.RuleID] = true
	}
	for id := range s.missing {
		if present[id] {
			delete(s.missing, id) // back in the file: the write ended
		}
	}
	var wait time.Duration
	for _, id := range removed {
		since, ok := s.missing[id]
		if !ok {
			since = now
			s.missing[id] = now
		}
		if left := removalDelay - now.Sub(since); left > 0 {
			kept = append(kept, id)
			wait = max(wait, left)
			continue
		}
		delete(s.missing, id)
		gone = append(gone, id)
	}
	if len(kept) == 0 {
		return gone, nil
	}
	for _, r := range s.Engine.Config().Rules {
		if slices.Contains(kept, r.RuleID) {
			cfg.Rules = append(cfg.Rules, r)
		}
	}
	if s.confirm != nil {
		s.confirm.Stop()
	}
	s.confirm = time.AfterFunc(wait, func() {
		select {
		case <-s.stop:
		default:
			_ = s.Reload()
		}
	})
	return gone, kept
}

// readSettled reads and parses the file; when the result would remove
// rules, it reads again after settleTime until two reads agree (at most a
// few times), and returns the rules removed.
func (s *Server) readSettled() (cfg, file *config.Config, removed []string, err error) {
	data, err := os.ReadFile(s.path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", s.path, err)
	}
	for try := 0; ; try++ {
		file, err = config.Parse(s.path, data)
		if err != nil {
			return nil, nil, nil, err
		}
		cfg = file
		rules := cfg.Rules
		if src := s.source; src != nil {
			// The rules stay the source's; the file's other settings reload.
			if z := cfg.RulesSource.ZooKeeper; z == nil || !reflect.DeepEqual(*z, src.cfg) {
				return nil, nil, nil, fmt.Errorf("%s: rules_source: changes take effect at restart; kept the running configuration", s.path)
			}
			rules = src.rules
		}
		if cfg, err = s.assemble(file, rules); err != nil {
			return nil, nil, nil, err
		}
		cfg.File = file.File
		removed = removedRules(s.Engine.Config(), cfg)
		if len(removed) == 0 {
			return cfg, file, nil, nil
		}
		time.Sleep(settleTime)
		again, err := os.ReadFile(s.path)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", s.path, err)
		}
		if bytes.Equal(again, data) {
			return cfg, file, removed, nil
		}
		if try == 10 {
			return nil, nil, nil, fmt.Errorf("%s: still changing after %v; kept the previous rules", s.path, 10*settleTime)
		}
		data = again
	}
}

// removedRules lists the rule ids of old that next lacks.
func removedRules(old, next *config.Config) []string {
	keep := make(map[string]bool, len(next.Rules))
	for _, r := range next.Rules {
		keep[r.RuleID] = true
	}
	var gone []string
	for _, r := range old.Rules {
		if !keep[r.RuleID] {
			gone = append(gone, r.RuleID)
		}
	}
	return gone
}

// Shutdown stops accepting, lets in-flight requests finish until ctx ends
// (the grace period), then closes what is left and the engine. It is safe
// to call more than once and concurrently: later calls wait for the first
// and return its result.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(func() {
		close(s.stop)
		if s.proxy != nil {
			s.shutdownErr = s.proxy.Shutdown(ctx)
		}
		_ = s.admin.Shutdown(ctx)
		s.wg.Wait()
		s.closeSource()
		_ = s.Engine.Close()
	})
	return s.shutdownErr
}

// dropUnderscoreHeaders removes, unless allow, the request headers whose
// names hold an underscore before next (the rules, then the upstream) sees
// them: see config.Proxy.UnderscoresInHeaders.
func dropUnderscoreHeaders(next http.Handler, allow bool) http.Handler {
	if allow {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k := range r.Header {
			if strings.IndexByte(k, '_') >= 0 {
				delete(r.Header, k)
			}
		}
		next.ServeHTTP(w, r)
	})
}
