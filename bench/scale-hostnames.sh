#!/usr/bin/env bash
# bench/scale-hostnames.sh (#21): route lookup with 1,000, 10,000 and
# 100,000 hostnames in the route table (10% wildcards). It runs the
# router's BenchmarkLookupHostnames (router/scale_bench_test.go) COUNT
# times and prints the median ns/op per size of the table lookup alone
# (match) and of a whole proxied request in the router, tunnel faked
# (serve), with allocations and the heap the router holds per hostname.
# One table on stdout, the raw benchmark output on stderr.
#
# Knobs:
#   SCALE_HOSTNAMES_COUNT=5        runs of each sub-benchmark
#   SCALE_HOSTNAMES_BENCHTIME=1s   -benchtime of each run
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
COUNT=${SCALE_HOSTNAMES_COUNT:-5}
BENCHTIME=${SCALE_HOSTNAMES_BENCHTIME:-1s}
OUT=$(mktemp "${TMPDIR:-/tmp}/aperio-scale-hostnames.XXXXXX")
trap 'rm -f "$OUT"' EXIT

echo "scale-hostnames: go test -bench BenchmarkLookupHostnames -count $COUNT -benchtime $BENCHTIME ./router/" >&2
timeout 420 go test -run '^$' -bench '^BenchmarkLookupHostnames$' -benchmem -count "$COUNT" -benchtime "$BENCHTIME" ./router/ | tee "$OUT" >&2

echo
echo "== route lookup by registered hostnames (10% wildcards; clients of 1,000 hostnames each), median of $COUNT runs"
echo "nproc $(nproc), load average at the end $(cut -d' ' -f1-3 /proc/loadavg); $(grep -m1 '^cpu:' "$OUT" || true)"
# Benchmark lines: name-P  N  ns/op-value ns/op  heap heapB/host  B B/op  allocs allocs/op.
awk '
/^BenchmarkLookupHostnames\// {
	split($1, part, "/"); size = part[2]; sub(/^hosts=/, "", size); kind = part[3]; sub(/-[0-9]+$/, "", kind)
	for (i = 3; i < NF; i++) v[$(i + 1)] = $i
	key = size SUBSEP kind
	n[key]++; ns[key, n[key]] = v["ns/op"]; allocs[key] = v["allocs/op"]; heap[size] = v["heapB/host"]
	if (!(size in seen)) { seen[size] = 1; order[++sizes] = size }
}
function median(key,   m, i, j, t, a) {
	m = n[key]
	for (i = 1; i <= m; i++) a[i] = ns[key, i] + 0
	for (i = 2; i <= m; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
	return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
}
END {
	printf "%-9s %12s %13s %12s %13s %11s\n", "hostnames", "match_ns/op", "match_allocs", "serve_ns/op", "serve_allocs", "heapB/host"
	for (i = 1; i <= sizes; i++) {
		s = order[i]
		printf "%-9s %12.1f %13s %12.0f %13s %11.0f\n", s, median(s SUBSEP "match"), allocs[s SUBSEP "match"], median(s SUBSEP "serve"), allocs[s SUBSEP "serve"], heap[s]
	}
}' "$OUT"
