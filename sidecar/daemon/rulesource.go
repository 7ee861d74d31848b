package daemon

import (
	"fmt"
	"os"
	"strings"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/zkrules"
)

// zkSource is a Server's ZooKeeper rules source.
type zkSource struct {
	cfg       config.ZooKeeperSource
	watcher   *zkrules.Watcher
	rules     []config.Rule // the rules in force from the source (under Server.mu)
	fromCache bool
}

// checkRule returns the check a source applies to each rule alone: the
// configuration with that rule as its only one must validate.
func checkRule(base *config.Config) func(config.Rule) error {
	return func(r config.Rule) error {
		_, err := base.WithRules([]config.Rule{r})
		if err != nil {
			// Name the znode, not the configuration file.
			msg := strings.TrimPrefix(err.Error(), base.File+": ")
			return fmt.Errorf("%s", msg)
		}
		return nil
	}
}

// openSource prepares the rules source of cfg, before the engine exists:
// with a cache file it returns the configuration with the cached rules
// (the sidecar starts enforcing them at once), else cfg and pending true
// (not ready until ZooKeeper answers).
func (s *Server) openSource(cfg *config.Config) (*config.Config, bool) {
	z := cfg.RulesSource.ZooKeeper
	if z == nil {
		return cfg, false
	}
	s.source = &zkSource{cfg: *z}
	if z.Cache == "" {
		return cfg, true
	}
	rules, err := zkrules.LoadCache(z.Cache, z.Path, checkRule(cfg))
	if err != nil {
		if !os.IsNotExist(err) {
			s.log.Warn("zookeeper rules: cache not used", "cache", z.Cache, "error", err.Error())
		}
		return cfg, true
	}
	with, err := cfg.WithRules(rules)
	if err != nil {
		s.log.Warn("zookeeper rules: cache not used", "cache", z.Cache, "error", err.Error())
		return cfg, true
	}
	s.source.rules, s.source.fromCache = rules, true
	s.log.Info("zookeeper rules: starting with the cached rules until ZooKeeper answers", "cache", z.Cache, "rules", len(rules))
	return with, false
}

// startSource starts watching ZooKeeper.
func (s *Server) startSource() error {
	src := s.source
	if src == nil {
		return nil
	}
	var auth *zkrules.Auth
	if f := src.cfg.AuthFile; f != "" {
		var err error
		if auth, err = zkrules.LoadAuth(f); err != nil {
			return fmt.Errorf("rules_source.zookeeper.auth_file: %w", err)
		}
	}
	w, err := zkrules.Watch(zkrules.Options{Servers: src.cfg.Servers, Path: src.cfg.Path,
		SessionTimeout: src.cfg.SessionTimeout.D(), Check: checkRule(s.cfg), Apply: s.applySource, Auth: auth, Logger: s.log})
	if err != nil {
		return err
	}
	s.mu.Lock()
	src.watcher = w
	s.mu.Unlock()
	return nil
}

// applySource swaps in a rule set read from ZooKeeper, then writes the
// cache.
func (s *Server) applySource(set zkrules.Set) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	// The file as last reloaded with the source's rules.
	cfg, err := s.assemble(s.file, set.Rules)
	if err == nil {
		cfg.Listen, cfg.Admin, cfg.Upstream = s.cfg.Listen, s.cfg.Admin, s.cfg.Upstream
	}
	if err == nil {
		err = s.Engine.Reload(cfg)
	}
	if err != nil {
		s.Engine.CountReload(false)
		return err
	}
	s.Engine.CountReload(true)
	src := s.source
	src.rules, src.fromCache = set.Rules, false
	s.Engine.RulesLoaded()
	if c := src.cfg.Cache; c != "" {
		if err := zkrules.SaveCache(c, src.cfg.Path, set); err != nil {
			s.log.Warn("zookeeper rules: cache not written", "cache", c, "error", err.Error())
		}
	}
	return nil
}

func (s *Server) sourceState() *engine.RulesSourceState {
	src := s.source
	st := &engine.RulesSourceState{Type: "zookeeper", Servers: src.cfg.Servers, Path: src.cfg.Path, Cache: src.cfg.Cache}
	s.mu.Lock()
	w := src.watcher
	st.FromCache = src.fromCache
	s.mu.Unlock()
	if w != nil {
		st.State = w.State()
	}
	return st
}

// closeSource ends the ZooKeeper session.
func (s *Server) closeSource() {
	if s.source == nil {
		return
	}
	s.mu.Lock()
	w := s.source.watcher
	s.mu.Unlock()
	if w != nil {
		w.Close()
	}
}
