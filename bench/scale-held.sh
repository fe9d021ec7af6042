#!/usr/bin/env bash
# bench/scale-held.sh (#21): requests held for a cold start. An
# aperio-server with autoscaling on; one aperio-client declares a
# scaling: block for a hostname (the provider is the harness backend's
# POST /scale, which answers 202 and starts nothing) and leaves, so the
# pool is empty but armed. Then N visitor requests at once
# (bench/scalevisitors held), one HTTP/1.1 connection each, and on a
# second server over HTTP/2 without TLS: the server holds them all; its
# memory before and with N held, per held request; then a client for
# the hostname connects again, which releases them, and every answer's
# status is counted. One table on stdout, progress on stderr.
#
# Knobs:
#   SCALE_HELD_N=10000        held requests
#   SCALE_HELD_SETTLE=5       seconds before each memory reading
#   SCALE_HELD_CLIENT_MAX=256 the releasing client's max_concurrent
#   SCALE_HELD_PROTOS="h1 h2c" visitor protocols, one row (and server) each
#   BENCH_KEEP_TMP=1          keep the work dir (logs)
set -euo pipefail
NAME=scale-held
# shellcheck source=bench/scale-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/scale-lib.sh"

N=${SCALE_HELD_N:-10000}
PROTOS=${SCALE_HELD_PROTOS:-h1 h2c}
SETTLE=${SCALE_HELD_SETTLE:-5}
HOST=held.scale.test
((N + 2000 <= NOFILE)) || die "$N held requests (one connection each) do not fit the server's fd limit ($FD_NOTE)"

# Held requests are bounded by scaling_max_held (default 1,000) and, once
# released, by max_concurrent_requests (default 100) and the client's
# max_concurrent; one visitor address sends them all.
HELD_MAX=$N
SETTINGS=(APERIO_SCALING=1 APERIO_SCALING_ALLOW_HTTP=1 APERIO_SCALING_ALLOW_PRIVATE=1
	APERIO_SCALING_MAX_HELD=$HELD_MAX APERIO_MAX_CONCURRENT_REQUESTS=$N APERIO_GATEWAY_TIMEOUT=120s
	APERIO_MAX_CONNECTIONS_PER_IP=0 APERIO_MAX_STREAMS_PER_IP=0
	APERIO_IP_LIMIT_MAX=1000000000 APERIO_IP_LIMIT_REFILL=1000000000 APERIO_ACCESS_LOG=false)
# The client's max_concurrent equals tunnel_max_streams (256): the released
# requests outrun the streams of the answered ones, and wait (up to 2 s) for
# one to free; before they waited, most of them got 502 "session has
# tunnel_max_streams streams open".
CLIENT_MAX=${SCALE_HELD_CLIENT_MAX:-256}
SCALING=(--max-concurrent "$CLIENT_MAX" --scaling-url "http://$BACKEND/scale" --scaling-min 0 --scaling-max 1
	--scaling-cold-start 5m --scaling-window 15s --scaling-cooldown 60s)

# One row per visitor protocol, each on a fresh server.
ROWS=()
for proto in $PROTOS; do
	start_server "${SETTINGS[@]}"
	log "declaring the scaling block, then leaving"
	start_client "$PORT" "$HOST" "${SCALING[@]}"
	wait_http "http://127.0.0.1:$PORT/" "$HOST" 30
	stop "$CLIENT_PID"
	timeout 90 "$SV" armed -addr "127.0.0.1:$PORT" -host "$HOST" -token "$TOKEN" -timeout 60s || die "the hostname is not armed"
	calls0=$(grep -c '^provider call' "$TMP/backend.log" || true)
	sleep "$SETTLE"
	read -r rss0 anon0 < <(mem "$SERVER_PID")
	log "$proto: server VmRSS $rss0 KiB, RssAnon $anon0 KiB; sending $N requests"

	OUT=$TMP/held-$proto.out
	t0=$SECONDS
	"$SV" held -addr "127.0.0.1:$PORT" -host "$HOST" -n "$N" -metrics-token "$METRICS_TOKEN" -proto "$proto" -timeout 8m >"$OUT" 2>"$TMP/held-$proto.log" & PIDS+=($!)
	HELD_PID=$!
	wait_line "$OUT" '^held ' 300
	read -r _ held <<<"$LINE"
	held_s=$((SECONDS - t0))
	sleep "$SETTLE"
	read -r rss1 anon1 < <(mem "$SERVER_PID")
	fds=$(ls "/proc/$SERVER_PID/fd" | wc -l)
	calls=$(( $(grep -c '^provider call' "$TMP/backend.log" || true) - calls0 ))
	log "$proto: $held held after ${held_s}s: server VmRSS $rss1 KiB, RssAnon $anon1 KiB, $fds fds, $calls provider call(s); releasing"

	rel0=$(date +%s%N)
	start_client "$PORT" "$HOST" "${SCALING[@]}"
	wait_line "$OUT" '^answers ' 300
	answers=$LINE
	rel_ms=$(( ($(date +%s%N) - rel0) / 1000000 ))
	wait "$HELD_PID" || die "the held visitors failed"
	log "$proto: $answers, ${rel_ms} ms after the client started"
	ROWS+=("$(printf '%-5s %6s %8s %8s %9s %9s %9s %10s %6s %6s %8s %8s  %s' "$proto" "$held" "$(mib "$rss0")" "$(mib "$rss1")" "$(per "$rss1" "$rss0" "$held")" \
		"$(mib "$anon0")" "$(mib "$anon1")" "$(per "$anon1" "$anon0" "$held")" "$fds" "$calls" "$held_s" "$rel_ms" "${answers#answers }")")
	stop "$CLIENT_PID" "$SERVER_PID"
done

echo
echo "== $N requests held for a cold start (empty pool, scaling: block; the provider answers 202 and starts nothing)"
echo "server: scaling_max_held=$HELD_MAX (default 1000) max_concurrent_requests=$N (default 100) gateway_timeout=120s tunnel_max_streams=256 (default) max_connections_per_ip=0 max_streams_per_ip=0 ip_limit_max/refill=1e9 access_log=false; fd limit $FD_NOTE"
echo "client: cold_start 5m, max_concurrent $CLIENT_MAX; visitors from 127.0.0.1: h1 = HTTP/1.1, one connection per request, so KiB/held includes an open visitor connection (bench/scale-visitors.sh: KiB/conn of an idle one); h2c = HTTP/2 without TLS, multiplexed over few connections"
echo "memory: /proc/PID/status of the server ${SETTLE}s after each step settled; KiB/held = (held - before) / held; fds = the server's open files while they are held; release_ms = the client's start to the last answer"
echo "nproc $(nproc), load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-5s %6s %8s %8s %9s %9s %9s %10s %6s %6s %8s %8s  %s\n' proto held rss0_MiB rssN_MiB KiB/held anon0_MiB anonN_MiB anonKiB/h fds calls held_s release_ms answers
for r in "${ROWS[@]}"; do echo "$r"; done
