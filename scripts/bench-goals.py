#!/usr/bin/env python3
"""bench-goals: the table of issue 16's in-process and Redis goals from the
output of one `make bench` run (medians of its counts, sluice against its
peer in the same run).

Usage: make bench COUNT=3 | tee bench.txt; python3 scripts/bench-goals.py bench.txt
"""
import collections
import re
import statistics
import sys

# (package, sluice's benchmark, peer's benchmark, what, goal)
PAIRS = [
    ("./static", "BenchmarkMemoryStore/one_rule", "BenchmarkBaseline/xtimerate_allow", "one rule, memory store", "<= 1.0x"),
    ("./sidecar", "BenchmarkMiddleware/sluice_10_rules", "BenchmarkMiddleware/peer_xrate_10_gcl",
     "middleware, 10 rules + adaptive + headers", "<= 1.0x"),
    ("./static/redisstore", "BenchmarkRedisStore/one_rule", "BenchmarkBaseline/redis_rate_one", "Redis, one rule (throughput)", "<= 1.0x"),
    ("./static/redisstore", "BenchmarkRedisStore/one_rule_serial", "BenchmarkBaseline/redis_rate_one_serial",
     "Redis, one rule (latency)", "<= 1.0x"),
    ("./static/redisstore", "BenchmarkRedisStore/three_rules", "BenchmarkBaseline/redis_rate_three",
     "Redis, three rules (throughput)", "<= 0.5x"),
    ("./static/redisstore", "BenchmarkRedisStore/three_rules_serial", "BenchmarkBaseline/redis_rate_three_serial",
     "Redis, three rules (latency)", "<= 0.5x"),
]


def parse(path):
    pkg = None
    ns = collections.defaultdict(list)
    extra = {}
    for line in open(path):
        if line.startswith("pkg:"):
            pkg = line.split()[1].replace("github.com/sluicehq/sluice", ".")
            continue
        m = re.match(r"^(Benchmark\S+?)(-2)?\s+\d+\s+([\d.]+) ns/op(.*)$", line)
        if not m:
            continue
        key = (pkg, m.group(1), "2" if m.group(2) else "1")
        ns[key].append(float(m.group(3)))
        rest = m.group(4)
        found = [re.search(p, rest) for p in (r"([\d.]+) allocs/op", r"([\d.]+) server-us/op")]
        extra[key] = tuple(f.group(1) if f else "" for f in found)
    return {k: statistics.median(v) for k, v in ns.items()}, extra


def fmt(v):
    if v is None:
        return "n/a"
    return "%.2f µs" % (v / 1000) if v >= 1000 else "%.0f ns" % v


def main():
    med, extra = parse(sys.argv[1])
    print("| path | cpu | sluice | peer | ratio | goal | sluice allocs/op | sluice server-us/op |")
    print("|---|---|---|---|---|---|---|---|")
    for pkg, ours, peer, what, goal in PAIRS:
        for cpu in "12":
            a, b = med.get((pkg, ours, cpu)), med.get((pkg, peer, cpu))
            allocs, server = extra.get((pkg, ours, cpu), ("", ""))
            ratio = "%.2fx" % (a / b) if a and b else "n/a"
            print(f"| {what} | {cpu} | {fmt(a)} | {fmt(b)} | {ratio} | {goal} | {allocs} | {server} |")


if __name__ == "__main__":
    main()
