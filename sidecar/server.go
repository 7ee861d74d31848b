package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sluicehq/sluice/sidecar/config"
	"github.com/sluicehq/sluice/static"
	"github.com/sluicehq/sluice/static/redisstore"
)

// Server is the sidecar: the engine behind a reverse proxy, the admin port,
// and the configuration file it reloads. Start binds both ports at once (a
// taken port fails start-up) and serves in the background; Shutdown stops
// accepting and lets in-flight requests finish.
type Server struct {
	// Engine is the server's engine.
	Engine *Engine

	cfg    *config.Config
	path   string // "" when not from a file
	log    *slog.Logger
	proxy  *http.Server
	admin  *http.Server
	closeR func() error // closes the Redis client
	stop   chan struct{}
	bound  [2]string // the proxy's and the admin's addresses once listening
	wg     sync.WaitGroup
	mu     sync.Mutex // serialises reloads
}

// NewServer builds a server for cfg; path is the file to reload ("" for
// none). It connects to Redis when the store is redis; readiness waits for
// Redis to answer once.
func NewServer(cfg *config.Config, path string, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Upstream == "" {
		return nil, fmt.Errorf("%s: upstream: required to run the proxy (or pass -upstream)", cfg.File)
	}
	up, err := url.Parse(cfg.Upstream)
	if err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
		return nil, fmt.Errorf("%s: upstream: %q is not an http(s) URL", cfg.File, cfg.Upstream)
	}
	s := &Server{cfg: cfg, path: path, log: log, stop: make(chan struct{})}
	opts := Options{Logger: log}
	memory := static.NewMemory(static.WithMaxKeys(cfg.Store.Memory.MaxKeys))
	opts.Memory = memory
	var redis *redisstore.Store
	if cfg.Store.Type == "redis" {
		r := cfg.Store.Redis
		client, err := redisstore.NewClient(redisstore.Config{Addrs: r.Addrs, MasterName: r.MasterName, Username: r.Username,
			Password: r.Password, DB: r.DB, Timeout: r.Timeout.D()})
		if err != nil {
			return nil, fmt.Errorf("%s: store.redis: %w", cfg.File, err)
		}
		s.closeR = client.Close
		redis = redisstore.New(client, redisstore.WithPrefix(r.Prefix), redisstore.WithTimeout(r.Timeout.D()))
		opts.Store = static.NewFailover(redis, memory, r.Instances)
	}
	if s.Engine, err = New(cfg, opts); err != nil {
		return nil, err
	}
	if redis != nil {
		s.Engine.ready.Store(false)
		s.wg.Add(1)
		go s.waitForRedis(redis)
	}
	s.proxy = &http.Server{
		Handler:           s.Engine.Middleware(NewProxy(up, cfg.UpstreamTimeout.D(), log)),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// HTTP/1.1 and HTTP/2 without TLS (h2c) on the same port.
	s.proxy.Protocols = new(http.Protocols)
	s.proxy.Protocols.SetHTTP1(true)
	s.proxy.Protocols.SetUnencryptedHTTP2(true)
	s.admin = &http.Server{Handler: s.Engine.AdminHandler(s.Reload), ReadHeaderTimeout: 10 * time.Second}
	return s, nil
}

// waitForRedis loads the scripts (which proves Redis answers) and marks the
// engine ready, retrying every second until it works or the server stops.
func (s *Server) waitForRedis(r *redisstore.Store) {
	defer s.wg.Done()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := r.Load(ctx)
		cancel()
		if err == nil {
			s.Engine.ready.Store(true)
			s.log.Info("redis answered; ready")
			return
		}
		s.log.Warn("redis not answering yet; checks use the failure policy", "error", err.Error())
		select {
		case <-s.stop:
			return
		case <-time.After(time.Second):
		}
	}
}

// Start binds the proxy and admin addresses and serves them in the
// background, with the file watcher and the periodic sweep of idle keys.
func (s *Server) Start() error {
	pl, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	al, err := net.Listen("tcp", s.cfg.Admin)
	if err != nil {
		pl.Close()
		return fmt.Errorf("admin: %w", err)
	}
	s.bound = [2]string{pl.Addr().String(), al.Addr().String()}
	s.log.Info("sluice serving", "listen", pl.Addr().String(), "upstream", s.cfg.Upstream, "admin", al.Addr().String(),
		"store", s.cfg.Store.Type, "rules", len(s.cfg.Rules), "adaptive", s.cfg.Adaptive.Algorithm)
	for _, srv := range []struct {
		h *http.Server
		l net.Listener
	}{{s.proxy, pl}, {s.admin, al}} {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := srv.h.Serve(srv.l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("serve", "error", err.Error())
			}
		}()
	}
	s.wg.Add(1)
	go s.sweep()
	if s.path != "" {
		if err := s.watch(); err != nil {
			s.log.Warn("config file not watched; reload with SIGHUP or POST /v1/reload", "error", err.Error())
		}
	}
	return nil
}

// Addrs returns the bound proxy and admin addresses (after Start).
func (s *Server) Addrs() (proxy, admin string) { return s.bound[0], s.bound[1] }

func (s *Server) sweep() {
	defer s.wg.Done()
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Engine.Sweep()
		}
	}
}

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
				if filepath.Base(ev.Name) == base || filepath.Base(ev.Name) == "..data" {
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
			}
		}
	}()
	return nil
}

// Reload reads the configuration file again. A bad file keeps the old rules;
// the error says why (and is logged and counted).
func (s *Server) Reload() error {
	if s.path == "" {
		return errors.New("no configuration file to reload")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cfg, err := config.Load(s.path)
	if err == nil {
		// Addresses on the command line win over the file, as at start.
		cfg.Listen, cfg.Admin, cfg.Upstream = s.cfg.Listen, s.cfg.Admin, s.cfg.Upstream
		err = s.Engine.Reload(cfg)
	}
	if err != nil {
		s.Engine.metrics.reloads.WithLabelValues("failure").Inc()
		s.log.Error("reload failed; keeping the previous rules", "error", err.Error())
		return err
	}
	s.Engine.metrics.reloads.WithLabelValues("success").Inc()
	s.log.Info("configuration reloaded", "file", s.path, "rules", len(cfg.Rules))
	return nil
}

// Shutdown stops accepting, lets in-flight requests finish until ctx ends
// (the grace period), then closes what is left.
func (s *Server) Shutdown(ctx context.Context) error {
	close(s.stop)
	err := s.proxy.Shutdown(ctx)
	if err != nil {
		s.proxy.Close()
	}
	_ = s.admin.Shutdown(ctx)
	s.wg.Wait()
	if s.closeR != nil {
		_ = s.closeR()
	}
	return err
}
