# sluice build. `make test` is what CI runs (through .ci/run).
GO       ?= go
PKGS     ?= ./...
BENCHTIME ?= 1s
COUNT    ?= 6

ROUNDS ?= 5
SECONDS ?= 5

.PHONY: all build test deps vet lint bench bench-static bench-sidecar bench-fleet bench-zk bench-proxy bench-closed static image fuzz demo clean

all: build

build:
	$(GO) build $(PKGS)

# static is the release binary: no cgo, no local paths, stripped (the
# image's flags; deploy/deploy_test.go runs it from an empty directory).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
STATIC_FLAGS = -trimpath -ldflags "-s -w -X main.version=$(VERSION)"
static:
	CGO_ENABLED=0 $(GO) build $(STATIC_FLAGS) -o bin/sluice ./cmd/sluice

# image builds deploy/Dockerfile with podman or docker, whichever is here.
CONTAINER ?= $(shell command -v podman 2>/dev/null || command -v docker 2>/dev/null)
image:
	@if [ -z "$(CONTAINER)" ]; then echo "make image: needs podman or docker" >&2; exit 1; fi
	$(CONTAINER) build -f deploy/Dockerfile --build-arg VERSION=$(VERSION) -t sluice:$(VERSION) -t sluice:latest .

# demo is the README's quickstart: the sidecar on the embedded memory store
# with examples/basic.yaml (proxy DEMO_LISTEN, admin DEMO_ADMIN) in front of
# examples/hello on DEMO_UPSTREAM; override them when those ports are taken
# (make demo DEMO_LISTEN=127.0.0.1:18080). Ctrl-C stops both.
DEMO_LISTEN ?= 127.0.0.1:8080
DEMO_ADMIN ?= 127.0.0.1:9901
DEMO_UPSTREAM ?= 127.0.0.1:9000
demo:
	$(GO) build -o bin/sluice ./cmd/sluice
	$(GO) build -o bin/hello ./examples/hello
	@bin/hello -listen $(DEMO_UPSTREAM) & hello=$$!; trap 'kill $$hello 2>/dev/null' EXIT INT TERM; \
	  bin/sluice run -config examples/basic.yaml -listen $(DEMO_LISTEN) -admin $(DEMO_ADMIN) -upstream http://$(DEMO_UPSTREAM)

# deps installs the servers the tests start (redis-server, redis-sentinel,
# redis-cli) when they are missing and this machine can install them.
deps:
	@bash scripts/install-deps.sh

vet:
	$(GO) vet $(PKGS)

# REALTIME are the tests that load a service in real time through the real
# binary or a tuning session and score what it served: run beside the
# race-enabled tests of every other package on a 2-core machine they
# measured that starvation (critical requests 69% served, a tuning step's
# p99 688 ms; 400 closed-loop clients that could not connect fast enough to
# overflow the queue, so that no hold test was needed), not sluice. They run
# alone, after the rest.
REALTIME := ^(TestE2EScenarios|TestE2EWhomScenarios|TestTuneSimulatedBackend|TestE2EClosedLoopIsHeld|TestE2EClosedLoopHeldPastMaxWait)$$

# test runs every package (but REALTIME), then the end-to-end suite of the
# real binary again on the net/http proxy engine (the first run uses the
# default, fast; the replays of envoyproxy/ratelimit's sequences use no
# proxy engine), then the fast engine's own suites and that end-to-end suite
# with one P (GOMAXPROCS=1, inherited by the binaries the tests start: the
# only setting in which the fast engine gathers its writes into bursts), then
# REALTIME one package at a time, then the allocation tests without the race
# detector (under it sync.Pool drops items at random).
test: deps vet
	$(GO) test -race -shuffle=on -timeout 30m -skip '$(REALTIME)' $(PKGS)
	SLUICE_E2E_ENGINE=nethttp $(GO) test -race -shuffle=on -timeout 20m -run 'TestE2E' -skip 'Scenarios|Peer' ./cmd/sluice/
	GOMAXPROCS=1 $(GO) test -race -shuffle=on -timeout 20m ./sidecar/fastproxy/ ./sidecar/daemon/
	GOMAXPROCS=1 $(GO) test -race -shuffle=on -timeout 20m -run 'TestE2E' -skip 'Scenarios|Peer' ./cmd/sluice/
	$(GO) test -race -p 1 -timeout 20m -run '$(REALTIME)' ./cmd/sluice/ ./loadtest/tune/
	$(GO) test -run 'Alloc' ./engine/ ./sidecar/ ./sidecar/daemon/ ./replay/...

lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)

# bench runs every benchmark with the settings BENCHMARKS.md reports;
# compare runs with benchstat (go run golang.org/x/perf/cmd/benchstat@latest).
bench:
	$(GO) test -run '^$$' -bench . -benchmem -cpu 1,2 -count $(COUNT) -benchtime $(BENCHTIME) $(PKGS)

bench-sidecar:
	$(GO) test -run '^$$' -bench Middleware -benchmem -cpu 1,2 -count $(COUNT) -benchtime $(BENCHTIME) ./sidecar/

# bench-fleet starts redis-server and sluice processes and measures how far
# an eventual or gossiping fleet admits past a shared limit, and how long it
# takes to converge after Redis comes back (BENCHMARKS.md "Limits across a fleet").
bench-fleet:
	SLUICE_FLEET_BENCH=1 $(GO) test -run '^$$' -bench 'Fleet(Bounds|Convergence)' -benchtime 1x ./cmd/sluice/
	$(GO) test -run '^$$' -bench 'Check' -benchmem -cpu 1,2 -count $(COUNT) -benchtime $(BENCHTIME) ./static/fleet/

# bench-proxy measures requests per second, p99 and CPU per request of the
# proxy engines next to nginx (needs nginx, wrk, taskset; installs
# nothing) and writes the table into BENCHMARKS.md.
bench-proxy:
	BENCH_PROXY_WRITE=1 bash scripts/bench-proxy.sh $(ROUNDS) $(SECONDS)

# bench-closed measures wrk's closed loops (16-1024 connections) through
# the sidecar with its defaults and with no adaptive limit, against
# services nowhere near overloaded (needs wrk, taskset; installs nothing).
bench-closed:
	bash scripts/bench-closed.sh $(ROUNDS) $(SECONDS)

# bench-zk starts ZooKeeper and 1, 4 and 8 sluice processes and measures how
# long a `sluice rules push` takes to reach every one (BENCHMARKS.md).
bench-zk:
	SLUICE_ZK_BENCH=1 $(GO) test -run '^$$' -bench ZooKeeperPropagation -benchtime 1x ./cmd/sluice/

bench-static:
	$(GO) test -run '^$$' -bench . -benchmem -cpu 1,2 -count $(COUNT) -benchtime $(BENCHTIME) ./static/

# fuzz runs each fuzz target briefly (CI runs their seed corpora in `test`).
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzAlgorithms -fuzztime 30s ./static/
	$(GO) test -run '^$$' -fuzz 'FuzzParse$$' -fuzztime 30s ./config/
	$(GO) test -run '^$$' -fuzz FuzzParseRule -fuzztime 30s ./config/
	$(GO) test -run '^$$' -fuzz FuzzClientIP -fuzztime 30s ./engine/
	$(GO) test -run '^$$' -fuzz FuzzCanonicalPath -fuzztime 30s ./engine/
	$(GO) test -run '^$$' -fuzz FuzzWildcardMatch -fuzztime 30s ./engine/
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime 30s ./static/fleet/
	$(GO) test -run '^$$' -fuzz FuzzParseCost -fuzztime 30s ./engine/
	$(GO) test -run '^$$' -fuzz FuzzResponseCostBody -fuzztime 30s ./engine/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./replay/logfmt/
	$(GO) test -run '^$$' -fuzz FuzzReadTargets -fuzztime 30s ./loadtest/
	$(GO) test -run '^$$' -fuzz FuzzParseBudget -fuzztime 30s ./engine/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./envoyconf/

clean:
	$(GO) clean -testcache
