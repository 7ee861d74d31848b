// Command evloopproxy is a bare event-loop HTTP/1.1 reverse proxy on gnet
// v2, a contender of `make bench-proxy` (issue 29): how much CPU a request
// costs a Go proxy that, as nginx does, serves every connection from one
// event loop instead of a goroutine each. It is a measurement, not a
// product: requests and responses framed by Content-Length only (no
// chunked bodies, no streaming, no timeouts), each client connection paired
// with one upstream connection on the same loop. With -config it decides
// every request with sluice's engine (DecideNow: what needs no wait),
// refuses with the verdict's status, and adds the quota headers to the
// answer, so that the table shows what the decision adds to the loop.
//
//	evloopproxy -listen 127.0.0.1:9000 -upstream 127.0.0.1:8080 [-config rules.yaml]
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/panjf2000/gnet/v2"
	"github.com/panjf2000/gnet/v2/pkg/logging"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9000", "address to serve on")
	upstream := flag.String("upstream", "127.0.0.1:8080", "upstream host:port")
	cfgPath := flag.String("config", "", "sluice configuration whose rules decide each request (none: forward all)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile to this file, until SIGINT or SIGTERM")
	flag.Parse()
	if err := serve(*listen, *upstream, *cfgPath, *cpuProfile); err != nil {
		fmt.Fprintln(os.Stderr, "evloopproxy:", err)
		os.Exit(1)
	}
}

// serve runs the proxy, profiled into cpuProfile (when not "") until a
// signal ends it.
func serve(listen, upstream, cfgPath, cpuProfile string) error {
	ctx := context.Background()
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
	}
	return run(ctx, listen, upstream, cfgPath, nil)
}

// run serves until ctx ends; ready, when not nil, is called once it
// listens.
func run(ctx context.Context, listen, upstream, cfgPath string, ready func()) error {
	up, err := net.ResolveTCPAddr("tcp", upstream)
	if err != nil {
		return err
	}
	p := &proxy{up: up, ready: ready, booted: make(chan gnet.Engine, 1)}
	if cfgPath != "" {
		data, err := os.ReadFile(cfgPath)
		if err != nil {
			return err
		}
		cfg, err := config.Parse(cfgPath, data)
		if err != nil {
			return err
		}
		if p.e, err = engine.New(cfg, engine.Options{}); err != nil {
			return err
		}
		defer p.e.Close()
	}
	go func() {
		<-ctx.Done()
		if eng, ok := <-p.booted; ok {
			_ = eng.Stop(context.Background())
		}
	}()
	err = gnet.Run(p, "tcp://"+listen, gnet.WithMulticore(false), gnet.WithNumEventLoop(1),
		gnet.WithLoadBalancing(gnet.LeastConnections), gnet.WithLogLevel(logging.ErrorLevel))
	close(p.booted) // a run that never booted leaves nothing to stop
	return err
}
