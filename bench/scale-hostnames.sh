#!/usr/bin/env bash
# bench/scale-hostnames.sh (#21): 100,000 hostnames in the route table.
#
#   (a) the router's BenchmarkLookupHostnames (router/scale_bench_test.go)
#       COUNT times: the median ns/op per size (1,000, 10,000 and 100,000
#       hostnames, 10% wildcards) of the table lookup alone (match: names
#       at random; hot: 1,000 of them, a working set in the CPU caches) and of
#       a whole proxied request in the router, tunnel faked (serve), with
#       allocations and the heap the router holds per hostname;
#   (b) with real processes, unless SCALE_HOSTNAMES_PROCS=0: one
#       aperio-server, a probe client with one hostname, then CLIENTS
#       aperio-clients of PER hostnames each (the protocol's bound on one
#       announcement is 1,024); the server's memory per hostname, and the
#       req/s of a fixed load on the probe hostname and on one of the
#       100,000, before and with them.
#
# Tables on stdout, progress (and the raw benchmark output) on stderr.
#
# Knobs:
#   SCALE_HOSTNAMES_COUNT=5        runs of each sub-benchmark in (a)
#   SCALE_HOSTNAMES_BENCHTIME=1s   -benchtime of each run
#   SCALE_HOSTNAMES_PROCS=1        run (b)
#   SCALE_HOSTNAMES_CLIENTS=100    clients in (b)
#   SCALE_HOSTNAMES_PER=1000       hostnames per client in (b)
#   SCALE_HOSTNAMES_LOAD_D=5s      each load in (b): 64 connections, best of 3
#   BENCH_KEEP_TMP=1               keep the work dir (logs)
set -euo pipefail
NAME=scale-hostnames
# shellcheck source=bench/scale-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/scale-lib.sh"

COUNT=${SCALE_HOSTNAMES_COUNT:-5}
BENCHTIME=${SCALE_HOSTNAMES_BENCHTIME:-1s}
CLIENTS_N=${SCALE_HOSTNAMES_CLIENTS:-100}
PER=${SCALE_HOSTNAMES_PER:-1000}
LOAD_D=${SCALE_HOSTNAMES_LOAD_D:-5s}
OUT=$TMP/bench.txt

log "go test -bench BenchmarkLookupHostnames -count $COUNT -benchtime $BENCHTIME ./router/"
timeout 420 go test -run '^$' -bench '^BenchmarkLookupHostnames$' -benchmem -count "$COUNT" -benchtime "$BENCHTIME" ./router/ | tee "$OUT" >&2

echo
echo "== (a) route lookup by registered hostnames (10% wildcards; clients of 1,000 hostnames each), median of $COUNT runs"
echo "nproc $(nproc), load average $(cut -d' ' -f1-3 /proc/loadavg); $(grep -m1 '^cpu:' "$OUT" || true)"
# Benchmark lines: name-P  N  ns/op-value ns/op  heap heapB/host  B B/op  allocs allocs/op.
awk '
/^BenchmarkLookupHostnames\// {
	split($1, part, "/"); size = part[2]; sub(/^hosts=/, "", size); kind = part[3]; sub(/-[0-9]+$/, "", kind)
	for (i = 3; i < NF; i++) v[$(i + 1)] = $i
	key = size SUBSEP kind
	n[key]++; ns[key, n[key]] = v["ns/op"]; allocs[key] = v["allocs/op"]
	if ("heapB/host" in v) heap[size] = v["heapB/host"]
	delete v
	if (!(size in seen)) { seen[size] = 1; order[++sizes] = size }
}
function median(key,   m, i, j, t, a) {
	m = n[key]
	for (i = 1; i <= m; i++) a[i] = ns[key, i] + 0
	for (i = 2; i <= m; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
	return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
}
END {
	printf "%-9s %12s %13s %12s %12s %13s %11s\n", "hostnames", "match_ns/op", "match_allocs", "hot_ns/op", "serve_ns/op", "serve_allocs", "heapB/host"
	for (i = 1; i <= sizes; i++) {
		s = order[i]
		printf "%-9s %12.1f %13s %12.1f %12.0f %13s %11.0f\n", s, median(s SUBSEP "match"), allocs[s SUBSEP "match"], median(s SUBSEP "match-hot"), median(s SUBSEP "serve"), allocs[s SUBSEP "serve"], heap[s]
	}
}' "$OUT"

[[ ${SCALE_HOSTNAMES_PROCS:-1} == 1 ]] || exit 0

# hosts C prints client C's hostnames, comma-separated: one in ten a
# wildcard.
hosts() { awk -v c="$1" -v n="$PER" 'BEGIN { for (i = 0; i < n; i++) printf "%s%s", (i ? "," : ""), (i % 10 == 9 ? "*.w" c "-" i ".hosts.test" : "h" c "-" i ".hosts.test") }'; }
total=$((CLIENTS_N * PER))
start_server APERIO_IP_LIMIT_MAX=1000000000 APERIO_IP_LIMIT_REFILL=1000000000 APERIO_MAX_STREAMS_PER_IP=0 APERIO_ACCESS_LOG=false
PROBE=probe.hosts.test
start_client "$PORT" "$PROBE" --max-concurrent 200
wait_http "http://127.0.0.1:$PORT/" "$PROBE" 30
load "$PROBE" 64 2s 1
load "$PROBE" 64 "$LOAD_D" 3
rps0=$RPS bad0=$BAD
sleep 5
read -r rss0 anon0 < <(mem "$SERVER_PID")
log "(b) server VmRSS $rss0 KiB, RssAnon $anon0 KiB with the probe client; starting $CLIENTS_N clients of $PER hostnames"
t0=$SECONDS
for ((c = 0; c < CLIENTS_N; c++)); do
	start_client "$PORT" "$(hosts "$c")" --max-concurrent 200
done
# Every client's last exact hostname answers once its announcement is in.
last=$(( PER % 10 == 0 ? PER - 2 : PER - 1 ))
for ((c = 0; c < CLIENTS_N; c++)); do
	wait_http "http://127.0.0.1:$PORT/" "h$c-$last.hosts.test" 180
done
up_s=$((SECONDS - t0))
wait_http "http://127.0.0.1:$PORT/" "www.w0-9.hosts.test" 30
sleep 5
read -r rss1 anon1 < <(mem "$SERVER_PID")
log "(b) $total hostnames served after ${up_s}s: server VmRSS $rss1 KiB, RssAnon $anon1 KiB"
load "$PROBE" 64 "$LOAD_D" 3
rps1=$RPS bad1=$BAD
MID="h$((CLIENTS_N / 2))-$((PER / 2)).hosts.test"
load "$MID" 64 "$LOAD_D" 3
rps2=$RPS bad2=$BAD

echo
echo "== (b) $total hostnames on one aperio-server: $CLIENTS_N aperio-clients of $PER hostnames (one in ten a wildcard), real processes"
echo "memory: /proc/PID/status of the server 5s after settling, with the probe client only and with all; B/host = (with - before) / $total, and includes $CLIENTS_N tunnel sessions"
echo "load: 64 keep-alive connections for $LOAD_D, best of 3, on $PROBE (before and with the $total) and on $MID (with); bad = non-200 answers + errors"
echo "nproc $(nproc), load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-9s %6s %8s %8s %7s %9s %9s %10s %8s %8s %12s %7s\n' hostnames up_s rss0_MiB rssN_MiB B/host anon0_MiB anonN_MiB anonB/host req/s_0 req/s_N "req/s_N(mid)" bad
printf '%-9s %6s %8s %8s %7s %9s %9s %10s %8s %8s %12s %7s\n' "$total" "$up_s" "$(mib "$rss0")" "$(mib "$rss1")" \
	"$(awk -v a="$rss1" -v b="$rss0" -v n="$total" 'BEGIN { printf "%.0f", (a - b) * 1024 / n }')" \
	"$(mib "$anon0")" "$(mib "$anon1")" "$(awk -v a="$anon1" -v b="$anon0" -v n="$total" 'BEGIN { printf "%.0f", (a - b) * 1024 / n }')" \
	"$rps0" "$rps1" "$rps2" "$bad0/$bad1/$bad2"
