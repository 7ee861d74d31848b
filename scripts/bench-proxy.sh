#!/usr/bin/env bash
# bench-proxy: requests per second, p99 latency and CPU per request of
# sluice's proxy engines next to nginx, in front of the same upstream.
#
# Layout (2 cores): the upstream and the proxy under test share CPU 0 (so
# sluice runs with one P, GOMAXPROCS=1, from its CPU affinity); wrk runs on
# CPU 1 (1 thread, CONNS connections, 64 unless set). Two upstreams: nginx answering
# "ok", and a Go net/http service answering "ok" (the "-go" rows).
# Contenders in front of each: the upstream direct, nginx as a reverse proxy
# (keep-alive upstream pool), HAProxy (one thread, connection reuse), sluice
# fast and net/http engines with no rules and with 10 matching rules
# (adaptive off, then gradient2), and internal/evloopproxy, a bare
# event-loop proxy on gnet v2 (the design an event-loop engine would have),
# forwarding only and deciding with the same 10 rules (issue 29). Rounds are interleaved so that the
# machine's drift hits every contender alike; the table has medians, and
# the CPU time of the proxy process (its workers included) per request.
#
# It installs nothing: it needs nginx, haproxy, wrk and taskset on PATH
# (Debian: apt-get install nginx haproxy wrk util-linux) and Go to build
# sluice and the Go upstream.
#
# Usage: [CONNS=N] scripts/bench-proxy.sh [ROUNDS] [SECONDS]   (default 5
# rounds of 5 s, 64 connections)
# With BENCH_PROXY_WRITE=1 the table replaces the one between the
# bench-proxy markers in BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
SECS=${2:-5}
CONNS=${CONNS:-64}
for tool in nginx haproxy wrk taskset go; do
  if ! command -v "$tool" >/dev/null 2>&1 && ! [ -x "/usr/sbin/$tool" ]; then
    echo "bench-proxy: needs $tool (Debian: apt-get install nginx haproxy wrk util-linux; Go for sluice)" >&2
    exit 1
  fi
done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for f in "$work"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
  sleep 0.2
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

go build -o "$work/sluice" ./cmd/sluice
go build -o "$work/evloopproxy" ./internal/evloopproxy

mkdir -p "$work/goup"
cat > "$work/goup/main.go" <<'EOF'
// The Go upstream: a net/http service answering "ok".
package main

import (
	"net/http"
	"os"
)

func main() {
	_ = http.ListenAndServe(os.Args[1], http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
}
EOF
(cd "$work/goup" && GO111MODULE=off go build -o "$work/goup/goup" main.go)

UP=$(free_port)
GOUP=$(free_port)
nginx_conf() { # name, upstream port, body of the server block
  cat > "$work/$1.conf" <<EOF
worker_processes 1;
daemon on;
pid $work/$1.pid;
error_log $work/$1.error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  upstream app { server 127.0.0.1:$2; keepalive 128; }
  server {
    $3
  }
}
EOF
}
haproxy_conf() { # name, port, upstream port
  cat > "$work/$1.cfg" <<EOF
global
  nbthread 1
  maxconn 8192
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  option forwardfor
  http-reuse always
frontend fe
  bind 127.0.0.1:$2
  default_backend app
backend app
  server up 127.0.0.1:$3 maxconn 1024
EOF
}
declare -A addr
nginx_conf upstream "$UP" "listen 127.0.0.1:$UP; location / { return 200 \"ok\"; }"
taskset -c 0 "$NGINX" -c "$work/upstream.conf" -p "$work"
taskset -c 0 "$work/goup/goup" "127.0.0.1:$GOUP" &
pids+=($!)
echo $! > "$work/direct-go.pid"
for up in nginx go; do
  upport=$UP; sfx=""
  if [ "$up" = go ]; then upport=$GOUP; sfx="-go"; fi
  p=$(free_port)
  nginx_conf "nginx$sfx" "$upport" "listen 127.0.0.1:$p; location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for; }"
  taskset -c 0 "$NGINX" -c "$work/nginx$sfx.conf" -p "$work"
  addr[nginx$sfx]="127.0.0.1:$p"
  p=$(free_port)
  haproxy_conf "haproxy$sfx" "$p" "$upport"
  taskset -c 0 "$HAPROXY" -f "$work/haproxy$sfx.cfg" -D -p "$work/haproxy$sfx.pid"
  addr[haproxy$sfx]="127.0.0.1:$p"
done

rules10='rules:
  - {rule_id: ip_tb,     identifier_type: ip_address, algorithm: token_bucket,   limit: 1000000,    window: 1s}
  - {rule_id: ip_sw,     identifier_type: ip_address, algorithm: sliding_window, limit: 1000000000, window: 1m}
  - {rule_id: ip_fw,     identifier_type: ip_address, algorithm: fixed_window,   limit: 1000000000, window: 1h}
  - {rule_id: ip_gcra,   identifier_type: ip_address, algorithm: gcra,           limit: 1000000,    window: 1s, burst: 1000}
  - {rule_id: global_tb, identifier_type: global,     algorithm: token_bucket,   limit: 1000000,    window: 1s}
  - {rule_id: global_sw, identifier_type: global,     algorithm: sliding_window, limit: 1000000000, window: 1m}
  - {rule_id: root,      identifier_type: ip_address, algorithm: sliding_window, limit: 1000000000, window: 1m, match: {path_pattern: /**}}
  - {rule_id: get,       identifier_type: ip_address, algorithm: token_bucket,   limit: 1000000,    window: 1s, match: {methods: [GET]}}
  - {rule_id: loopback,  identifier_type: ip_address, algorithm: gcra,           limit: 1000000,    window: 1s, burst: 1000, match: {ip_subnet: 127.0.0.0/8}}
  - {rule_id: hdr,       identifier_type: "header:Host", algorithm: fixed_window, limit: 1000000000, window: 1h}'
start_sluice() { # name engine adaptive rules(0|10) [upstream port]
  local port admin cfg
  port=$(free_port); admin=$(free_port)
  cfg="$work/$1.yaml"
  {
    echo "proxy: {engine: $2}"
    echo "adaptive: {algorithm: $3, initial_limit: 64, max_limit: 1000}"
    echo "queue: {max_size: 1000}"
    if [ "$4" = 10 ]; then echo "$rules10"; fi
  } > "$cfg"
  taskset -c 0 "$work/sluice" run -config "$cfg" -upstream "http://127.0.0.1:${5:-$UP}" -listen "127.0.0.1:$port" \
    -admin "127.0.0.1:$admin" -log-level error 2>"$work/$1.log" &
  pids+=($!)
  echo $! > "$work/$1.sluicepid"
  addr[$1]="127.0.0.1:$port"
}
start_evloop() { # name rules(0|10) [upstream port]
  local port cfg=""
  port=$(free_port)
  if [ "$2" = 10 ]; then
    cfg="$work/$1.yaml"
    { echo "adaptive: {algorithm: off}"; echo "$rules10"; } > "$cfg"
  fi
  GOMAXPROCS=1 taskset -c 0 "$work/evloopproxy" -listen "127.0.0.1:$port" -upstream "127.0.0.1:${3:-$UP}" ${cfg:+-config "$cfg"} \
    2>"$work/$1.log" &
  pids+=($!)
  echo $! > "$work/$1.sluicepid"
  addr[$1]="127.0.0.1:$port"
}
start_sluice fast-0 fast off 0
start_sluice fast-10 fast off 10
start_sluice fast-10-adaptive fast gradient2 10
start_sluice nethttp-0 nethttp off 0
start_sluice nethttp-10 nethttp off 10
start_sluice fast-0-go fast off 0 "$GOUP"
start_sluice fast-10-go fast off 10 "$GOUP"
start_sluice fast-10-adaptive-go fast gradient2 10 "$GOUP"
start_evloop evloop-0 0
start_evloop evloop-10 10
start_evloop evloop-0-go 0 "$GOUP"
start_evloop evloop-10-go 10 "$GOUP"
addr[direct]="127.0.0.1:$UP"
addr[direct-go]="127.0.0.1:$GOUP"
contenders=(direct nginx haproxy fast-0 fast-10 fast-10-adaptive nethttp-0 nethttp-10 evloop-0 evloop-10
  direct-go nginx-go haproxy-go fast-0-go fast-10-go fast-10-adaptive-go evloop-0-go evloop-10-go)
for c in "${contenders[@]}"; do
  for _ in $(seq 50); do curl -fsS "http://${addr[$c]}/" >/dev/null 2>&1 && break; sleep 0.1; done
done

# cpu_ticks PID...: user+system clock ticks of the processes (and, for
# nginx, of its workers).
cpu_ticks() {
  local total=0 p
  for p in "$@"; do
    for q in $p $(pgrep -P "$p" || true); do
      if [ -r "/proc/$q/stat" ]; then
        total=$((total + $(awk '{print $14 + $15}' "/proc/$q/stat")))
      fi
    done
  done
  echo "$total"
}
pid_of() {
  case $1 in
    direct) cat "$work/upstream.pid" ;;
    direct-go) cat "$work/direct-go.pid" ;;
    nginx*|haproxy*) cat "$work/$1.pid" ;;
    *) cat "$work/$1.sluicepid" ;;
  esac
}
hz=$(getconf CLK_TCK)
results="$work/results.tsv"
: > "$results"
for r in $(seq "$ROUNDS"); do
  for c in "${contenders[@]}"; do
    pid=$(pid_of "$c")
    before=$(cpu_ticks "$pid")
    out=$(taskset -c 1 wrk -t1 -c"$CONNS" -d"${SECS}s" --latency "http://${addr[$c]}/" 2>&1)
    after=$(cpu_ticks "$pid")
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    total=$(echo "$out" | awk '/requests in/ {print $1}')
    p99=$(echo "$out" | awk '$1=="99%" {print $2}')
    non2xx=$(echo "$out" | awk '/Non-2xx/ {print $NF}')
    cpu_us=$(awk -v t=$((after - before)) -v hz="$hz" -v n="$total" 'BEGIN { if (n > 0) printf "%.1f", t / hz * 1e6 / n; else print "nan" }')
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$c" "$r" "$rps" "$p99" "$cpu_us" "${non2xx:-0}" >> "$results"
    echo "round $r $c: $rps req/s, p99 $p99, ${cpu_us} us CPU/request ${non2xx:+(non-2xx $non2xx)}" >&2
  done
done

table=$(python3 - "$results" <<'EOF'
import sys, statistics
rows = {}
order = []
def ms(v):
    v = v.strip()
    for unit, f in (("us", 0.001), ("ms", 1.0), ("s", 1000.0)):
        if v.endswith(unit):
            return float(v[: -len(unit)]) * f
    return float(v)
for line in open(sys.argv[1]):
    c, r, rps, p99, cpu, bad = line.rstrip("\n").split("\t")
    if c not in rows:
        rows[c] = []
        order.append(c)
    rows[c].append((float(rps), ms(p99), float(cpu), int(bad or 0)))
med = {c: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v), statistics.median(x[2] for x in v), sum(x[3] for x in v)) for c, v in rows.items()}
print("| contender | req/s (median) | x nginx | p99 ms (median) | CPU us/request (proxy, median) | CPU x nginx | non-2xx |")
print("|---|---|---|---|---|---|---|")
for c in order:
    rps, p99, cpu, bad = med[c]
    ng = med["nginx-go" if c.endswith("-go") else "nginx"]  # the same upstream's nginx
    ratio = f"{cpu / ng[2]:.2f}x" if not c.startswith("direct") and ng[2] > 0 else ""
    print(f"| {c} | {rps:,.0f} | {rps / ng[0]:.2f}x | {p99:.2f} | {cpu:.1f} | {ratio} | {bad} |")
EOF
)
echo "$table"
if [ "${BENCH_PROXY_WRITE:-}" = 1 ]; then
  python3 - "$table" "$ROUNDS" "$SECS" <<'EOF'
import sys, re, datetime
table, rounds, secs = sys.argv[1], sys.argv[2], sys.argv[3]
p = "BENCHMARKS.md"
s = open(p).read()
block = f"<!-- bench-proxy:begin -->\n{rounds} interleaved rounds of {secs} s, written by `make bench-proxy` on {datetime.date.today()}:\n\n{table}\n<!-- bench-proxy:end -->"
s2 = re.sub(r"<!-- bench-proxy:begin -->.*?<!-- bench-proxy:end -->", lambda m: block, s, flags=re.S)
if s2 == s and "<!-- bench-proxy:begin -->" not in s:
    s2 = s + "\n" + block + "\n"
open(p, "w").write(s2)
EOF
fi
