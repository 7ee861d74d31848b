// Command sluice is the rate- and concurrency-limiting sidecar.
//
//	sluice run   -config FILE [-listen ADDR] [-upstream URL] [-admin ADDR]
//	sluice check -config FILE
//	sluice loadtest -target URL -rate N -duration D [-profile ...] [-out DIR]
//	sluice loadtest backend -listen ADDR -slots C -service D
//	sluice tune -target URL -slo-p99 D
//	sluice rules push|list -zookeeper ADDRS [-path P] [FILE]
//	sluice import envoy-ratelimit FILE...
//	sluice health [-admin ADDR] [-live]
//	sluice version
//
// The command is thin: flags become a config.Config, and the sidecar
// package does the rest.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/rls"
	"github.com/sluicehq/sluice/sidecar/daemon"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// otherwise the module's build information is used.
var version = ""

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `sluice: a rate- and concurrency-limiting sidecar

Usage:
  sluice run   [-config FILE] [-listen ADDR] [-upstream URL] [-admin ADDR] [-rls ADDR] [-engine fast|nethttp]
               [-log-level LEVEL] [-log-format text|json] [-cpuprofile FILE]
  sluice check -config FILE
  sluice loadtest -target URL -rate N -duration D [-profile constant|step|ramp|spike|sine] [-admin ADDR] [-out DIR]
  sluice loadtest backend [-listen ADDR] [-slots C] [-service 20ms] [-sigma S] [-degrade D] [-cpu]
  sluice loadtest scenarios [-scenario NAMES] [-contenders NAMES] [-sweep] [-out DIR]
  sluice tune -target URL -slo-p99 D [-no-verify] [-config-out FILE] [-out DIR]
  sluice replay -config FILE [-compare FILE] [-format auto|nginx|clf|nginx-json|envoy|envoy-json|alb|sluice]
               [-map field=key]... [-service-model none|auto|N] [-speed X] [-out DIR] [-json] [-decisions FILE] LOG...|-
  sluice rules push -zookeeper ADDRS [-path P] [-auth-file F] [-readers-auth-file F] [-dry-run] FILE
  sluice rules list -zookeeper ADDRS [-path P] [-auth-file F]
  sluice import envoy-ratelimit FILE...
  sluice health [-admin ADDR] [-live]
  sluice version

Without -config, run applies adaptive concurrency limiting only, on the
embedded memory store. See the README for the configuration reference.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "run":
		return cmdRun(args[1:], stderr)
	case "check":
		return cmdCheck(args[1:], stdout, stderr)
	case "loadtest":
		return cmdLoadtest(args[1:], stdout, stderr)
	case "tune":
		return cmdTune(args[1:], stdout, stderr)
	case "replay":
		return cmdReplay(args[1:], stdout, stderr)
	case "rules":
		return cmdRules(args[1:], stdout, stderr)
	case "import":
		return cmdImport(args[1:], stdout, stderr)
	case "health":
		return cmdHealth(args[1:], stdout, stderr)
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, "sluice", versionString())
		return 0
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func cmdCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file to validate")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, "sluice check: -config FILE is required")
		return 2
	}
	cfg, err := config.Load(*path)
	if err == nil {
		// With the rules of the Envoy files it names, as run loads them.
		cfg, err = daemon.Assemble(cfg, *path, cfg.Rules)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok (%d rules, store %s, adaptive %s)\n", *path, len(cfg.Rules), cfg.Store.Type, cfg.Adaptive.Algorithm)
	if host, _, err := net.SplitHostPort(cfg.Admin); err == nil {
		// As run warns when it binds: a valid file, but say so before.
		if ip, err := netip.ParseAddr(host); host == "" || err == nil && !ip.IsLoopback() {
			fmt.Fprintf(stderr, "%s: warning: admin %s listens beyond loopback: anyone who reaches it can read state and reload rules; keep it on a private network\n", *path, cfg.Admin)
		}
	}
	return 0
}

func cmdRun(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file (YAML or JSON); hot-reloaded")
	listen := fs.String("listen", "", "proxy address (overrides the file)")
	upstream := fs.String("upstream", "", "upstream URL (overrides the file)")
	admin := fs.String("admin", "", "admin address (overrides the file)")
	rlsAddr := fs.String("rls", "", "Envoy rate limit service (gRPC) address (overrides the file's rls.listen)")
	proxyEngine := fs.String("engine", "", "the proxy's HTTP engine: fast or nethttp (overrides the file's proxy.engine)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile (pprof) to this file until shutdown")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	format := fs.String("log-format", "text", "text or json")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(stderr, "sluice run: -log-level: %v\n", err)
		return 2
	}
	var h slog.Handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv})
	if *format == "json" {
		h = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: lv})
	}
	log := slog.New(h)
	// go-redis writes its own plain-text lines (a pool that cannot dial)
	// through a logger of its package: route them into this one, so that
	// -log-format json stays JSON while Redis is down.
	redis.SetLogger(redisLog{log})

	var cfg *config.Config
	var err error
	if *path != "" {
		cfg, err = config.Load(*path)
	} else {
		cfg, err = config.Parse("(no config)", []byte("{}"))
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	for _, o := range []struct {
		dst *string
		v   string
	}{{&cfg.Listen, *listen}, {&cfg.Upstream, *upstream}, {&cfg.Admin, *admin}, {&cfg.RLS.Listen, *rlsAddr}, {(*string)(&cfg.Proxy.Engine), *proxyEngine}} {
		if o.v != "" {
			*o.dst = o.v
		}
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "sluice run: -cpuprofile:", err)
			return 1
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "sluice run: -cpuprofile:", err)
			return 1
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	srv, err := daemon.New(cfg, *path, log)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if err := srv.Start(); err != nil {
		fmt.Fprintln(stderr, "sluice run:", err)
		return 1
	}
	var rlsSrv *rls.Server
	if cfg.RLS.Listen != "" {
		var opts []grpc.ServerOption
		if t := cfg.RLS.TLS; t != nil {
			creds, err := rls.TLSCredentials(relTo(cfg.File, t.CertFile), relTo(cfg.File, t.KeyFile), relTo(cfg.File, t.ClientCAFile))
			if err != nil {
				fmt.Fprintln(stderr, "sluice run: rls.tls:", err)
				_ = srv.Shutdown(context.Background())
				return 1
			}
			opts = append(opts, grpc.Creds(creds))
		}
		if rlsSrv, err = rls.Listen(cfg.RLS.Listen, srv.Engine, opts...); err != nil {
			fmt.Fprintln(stderr, "sluice run: rls.listen:", err)
			_ = srv.Shutdown(context.Background())
			return 1
		}
		log.Info("rate limit service serving", "rls", rlsSrv.Addr())
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	for sig := range sigs {
		if sig == syscall.SIGHUP {
			_ = srv.Reload() // logged by Reload
			continue
		}
		grace := cfg.ShutdownGrace.D()
		log.Info("shutting down: no new connections; waiting for requests in flight", "signal", sig.String(), "grace", grace.String())
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		if rlsSrv != nil {
			rlsSrv.Shutdown(ctx)
		}
		err := srv.Shutdown(ctx)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			log.Error("shutdown", "error", err.Error())
			return 1
		}
		if errors.Is(err, context.DeadlineExceeded) {
			log.Warn("grace period over; remaining requests were cut", "grace", grace.String())
		}
		log.Info("stopped")
		return 0
	}
	return 0
}

// redisLog is go-redis's logger writing into the process's slog logger, as
// WARN lines with the store as their source.
type redisLog struct{ log *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	r.log.WarnContext(ctx, "redis client: "+strings.TrimSpace(fmt.Sprintf(format, v...)), "source", "go-redis")
}

// relTo resolves path relative to the configuration file's folder ("" and
// absolute paths stay as they are).
func relTo(configFile, path string) string {
	if path == "" || filepath.IsAbs(path) || configFile == "" {
		return path
	}
	return filepath.Join(filepath.Dir(configFile), path)
}
