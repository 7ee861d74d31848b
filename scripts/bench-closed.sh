#!/usr/bin/env bash
# bench-closed: what a user's first benchmark of sluice sees. wrk's closed
# loops (16-1024 connections) against services nowhere near overloaded,
# through the sidecar with its default configuration (gradient2) and with
# `adaptive: {algorithm: off}` (the same proxy, no limit); the figure is
# good (2xx) requests a second with the default over those without a limit,
# the goal of issue 23 (>= 0.95; >= 0.90 when the service burns CPU on the
# sidecar's core).
#
# Layout (2 cores): the sidecar and its service share CPU 0; wrk runs on
# CPU 1 (one thread). Services, all `sluice loadtest backend` with
# unlimited slots: "instant" (answers at once), "5ms-io" (waits 5 ms),
# "200us-cpu" (burns 200 us of CPU on the sidecar's core). Rounds are
# interleaved (default, off, default, off...) so the machine's drift hits
# both alike; the table gives each round's ratio and their median.
#
# It installs nothing: it needs wrk and taskset on PATH (Debian: apt-get
# install wrk util-linux) and Go to build sluice.
#
# Usage: scripts/bench-closed.sh [ROUNDS] [SECONDS] [CONNECTIONS...]
#   (default 3 rounds of 6 s at 16 64 256 1024)
# SLUICE=path uses that binary instead of building one.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
SECS=${2:-6}
shift 2 2>/dev/null || shift $#
CONNS=("$@")
[ ${#CONNS[@]} -eq 0 ] && CONNS=(16 64 256 1024)
for tool in wrk taskset; do
  command -v "$tool" >/dev/null 2>&1 || { echo "bench-closed: needs $tool (Debian: apt-get install wrk util-linux)" >&2; exit 1; }
done
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
if [ -n "${SLUICE:-}" ]; then
  bin=$SLUICE
else
  go build -o "$work/sluice" ./cmd/sluice
  bin=$work/sluice
fi
echo 'adaptive: {algorithm: off}' > "$work/off.yaml"
echo '{}' > "$work/default.yaml"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

wait_port() {
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "bench-closed: nothing listens on $1" >&2
  exit 1
}

# run CONFIG CONNS BACKEND-ARGS...: good requests a second.
run() {
  local cfg=$1 conns=$2
  shift 2
  local bp sp
  bp=$(free_port)
  sp=$(free_port)
  taskset -c 0 "$bin" loadtest backend -listen "127.0.0.1:$bp" "$@" >/dev/null 2>&1 &
  local b=$!
  pids+=("$b")
  taskset -c 0 "$bin" run -config "$work/$cfg.yaml" -listen "127.0.0.1:$sp" -upstream "http://127.0.0.1:$bp" >/dev/null 2>&1 &
  local s=$!
  pids+=("$s")
  wait_port "$bp"
  wait_port "$sp"
  local out
  out=$(taskset -c 1 wrk -t1 -c"$conns" -d"${SECS}s" --timeout 2s "http://127.0.0.1:$sp/work" 2>&1)
  kill "$s" "$b" 2>/dev/null || true
  wait "$s" "$b" 2>/dev/null || true
  python3 - "$out" <<'PY'
import re, sys
o = sys.argv[1]
m = re.search(r'(\d+) requests in ([\d.]+)(m?s)', o)
n, t = int(m.group(1)), float(m.group(2)) / (1000 if m.group(3) == 'ms' else 1)
bad = re.search(r'Non-2xx or 3xx responses: (\d+)', o)
print('%.0f' % ((n - (int(bad.group(1)) if bad else 0)) / t))
PY
}

declare -A services=(
  [instant]="-slots 1000000 -service 0 -sigma 0"
  [5ms-io]="-slots 1000000 -service 5ms -sigma 0"
  [200us-cpu]="-slots 1000000 -service 200us -sigma 0 -cpu"
)
echo "| service | connections | default / off, each round | median | default good/s | off good/s |"
echo "|---|---|---|---|---|---|"
for svc in instant 5ms-io 200us-cpu; do
  for c in "${CONNS[@]}"; do
    ratios=() defs=() offs=()
    for _ in $(seq "$ROUNDS"); do
      # shellcheck disable=SC2086
      d=$(run default "$c" ${services[$svc]})
      # shellcheck disable=SC2086
      o=$(run off "$c" ${services[$svc]})
      defs+=("$d") offs+=("$o")
      ratios+=("$(python3 -c "print('%.2f' % ($d / max($o, 1)))")")
    done
    python3 - "$svc" "$c" "${ratios[*]}" "${defs[*]}" "${offs[*]}" <<'PY'
import statistics, sys
svc, c, r, d, o = sys.argv[1:]
rs = [float(x) for x in r.split()]
print('| %s | %s | %s | **%.2f** | %s | %s |' % (svc, c, ', '.join(r.split()), statistics.median(rs),
      ', '.join(d.split()), ', '.join(o.split())))
PY
  done
done
