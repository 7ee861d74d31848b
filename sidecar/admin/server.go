package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// Server serves an engine's admin endpoints (see Handler) on their own
// address, loopback by default, and keeps the last HistoryLength of the
// engine's state for /v1/history and the live page.
type Server struct {
	srv   *http.Server
	addr  string
	bound string
	log   *slog.Logger
	hist  *history
	stop  chan struct{}
	done  sync.WaitGroup
	once  sync.Once
}

// NewServer returns an admin server for e on addr. It does not listen
// until Start.
func NewServer(e *engine.Engine, addr string, o Options) *Server {
	hist := newHistory(e)
	return &Server{addr: addr, log: e.Logger(), hist: hist, stop: make(chan struct{}),
		srv: &http.Server{Handler: handler(e, o, hist), ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout: time.Minute, IdleTimeout: 75 * time.Second, MaxHeaderBytes: 64 << 10}}
}

// Start listens on the address (an error if it is taken) and serves in the
// background. An address other than loopback is logged as a warning: the
// admin port reloads rules and shows state, and has no authentication.
func (s *Server) Start() error {
	l, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	s.bound = l.Addr().String()
	if ap, err := netip.ParseAddrPort(s.bound); err == nil && !ap.Addr().IsLoopback() {
		s.log.Warn("the admin port listens beyond loopback: anyone who reaches it can read state and reload rules; keep it on a private network",
			"admin", s.bound)
	}
	s.done.Add(2)
	go func() {
		defer s.done.Done()
		if err := s.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("serve", "addr", s.bound, "error", err.Error())
		}
	}()
	go func() { defer s.done.Done(); s.hist.run(s.stop) }()
	return nil
}

// Addr returns the bound address once started ("127.0.0.1:0" resolved).
func (s *Server) Addr() string { return s.bound }

// Shutdown stops the server, waiting for its requests until ctx ends, then
// closing what is left. It may be called more than once, and before Start.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	s.once.Do(func() {
		close(s.stop)
		if s.bound == "" {
			return
		}
		if err = s.srv.Shutdown(ctx); err != nil {
			_ = s.srv.Close()
		}
	})
	s.done.Wait()
	return err
}
