#!/usr/bin/env bash
# bench/scale-visitors.sh (#21): idle visitor connections. For each size
# (10,000 and 50,000) a fresh aperio-server and one aperio-client in front
# of a tiny backend; a fixed load with no idle connection, the server's
# memory, then N visitor connections that each made one keep-alive
# request through the tunnel and sit idle, the memory again, the same
# load again, and a second request on every idle connection (none may
# have been closed). One table on stdout, progress on stderr.
#
# The visitors come from bench/scalevisitors child processes of
# PER_CHILD connections each (the shell's fd limit is 20,000), each from a
# loopback source address of its own (127.1.K.1; one address has some
# 28,000 ephemeral ports); the server runs under prlimit with a fd limit
# of 200,000 (or fs.nr_open).
#
# Knobs:
#   SCALE_VISITORS_SIZES=10000,50000  idle connections per row
#   SCALE_VISITORS_PER_CHILD=10000    connections per visitor process
#   SCALE_VISITORS_LOAD_C=64          load connections
#   SCALE_VISITORS_LOAD_D=5s          load duration
#   SCALE_VISITORS_LOAD_RUNS=3        loads per point, the best one counts
#   SCALE_VISITORS_SETTLE=5           seconds before each memory reading
#   BENCH_KEEP_TMP=1                  keep the work dir (logs)
set -euo pipefail
NAME=scale-visitors
# shellcheck source=bench/scale-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/scale-lib.sh"

SIZES=${SCALE_VISITORS_SIZES:-10000,50000}
PER_CHILD=${SCALE_VISITORS_PER_CHILD:-10000}
LOAD_C=${SCALE_VISITORS_LOAD_C:-64}
LOAD_D=${SCALE_VISITORS_LOAD_D:-5s}
LOAD_RUNS=${SCALE_VISITORS_LOAD_RUNS:-3}
SETTLE=${SCALE_VISITORS_SETTLE:-5}
HOST=idle.scale.test

# The settings that keep idle connections open and one address unthrottled.
SETTINGS=(APERIO_KEEPALIVE_TIMEOUT=1h APERIO_MAX_CONNECTIONS_PER_IP=0 APERIO_MAX_STREAMS_PER_IP=0
	APERIO_IP_LIMIT_MAX=1000000000 APERIO_IP_LIMIT_REFILL=1000000000 APERIO_ACCESS_LOG=false)

ROWS=()
IFS=, read -ra sizes <<<"$SIZES"
NOTES=()
for asked in "${sizes[@]}"; do
	# One fd per idle connection, plus some 2,000 for the tunnel, the
	# load and the rest: a size past the server's limit is cut to fit.
	n=$asked
	if ((n > NOFILE - 2000)); then
		n=$((NOFILE - 2000))
		NOTES+=("$asked idle connections do not fit the server's fd limit ($FD_NOTE): measured $n instead")
		log "${NOTES[-1]}"
	fi
	start_server "${SETTINGS[@]}"
	start_client "$PORT" "$HOST" --max-concurrent 256
	wait_http "http://127.0.0.1:$PORT/" "$HOST" 30
	log "$n idle: warm-up and load with 0 idle"
	load "$HOST" "$LOAD_C" 2s 1
	load "$HOST" "$LOAD_C" "$LOAD_D" "$LOAD_RUNS"
	rps0=$RPS bad0=$BAD
	sleep "$SETTLE"
	read -r rss0 anon0 < <(mem "$SERVER_PID")
	log "$n idle: server VmRSS $rss0 KiB, RssAnon $anon0 KiB before; opening $n connections"
	kids=() outs=() left=$n k=0
	while ((left > 0)); do
		m=$((left < PER_CHILD ? left : PER_CHILD))
		out=$TMP/idle-$n-$k.out
		"$SV" idle -addr "127.0.0.1:$PORT" -host "$HOST" -n "$m" -src "127.1.$k.1" -hold 15m >"$out" 2>"$TMP/idle-$n-$k.log" & PIDS+=($!)
		kids+=($!) outs+=("$out")
		left=$((left - m)) k=$((k + 1))
	done
	open=0 failed=0
	for out in "${outs[@]}"; do
		wait_line "$out" '^ready ' 300
		read -r _ o f <<<"$LINE"
		open=$((open + o)) failed=$((failed + f))
	done
	log "$n idle: $open open, $failed failed"
	sleep "$SETTLE"
	read -r rss1 anon1 < <(mem "$SERVER_PID")
	fds=$(ls "/proc/$SERVER_PID/fd" | wc -l)
	log "$n idle: server VmRSS $rss1 KiB, RssAnon $anon1 KiB, $fds fds; load with $n idle"
	load "$HOST" "$LOAD_C" "$LOAD_D" "$LOAD_RUNS"
	rps1=$RPS bad1=$BAD
	kill -USR1 "${kids[@]}"
	alive=0
	for out in "${outs[@]}"; do
		wait_line "$out" '^alive ' 300
		read -r _ a _ <<<"$LINE"
		alive=$((alive + a))
	done
	log "$n idle: $alive of $n answered a second request"
	stop "${kids[@]}"
	# The same load once they are gone: the spread of req/s_0 and
	# req/s_after is the noise of the run (other work on the machine).
	load "$HOST" "$LOAD_C" "$LOAD_D" "$LOAD_RUNS"
	rps2=$RPS
	stop "$CLIENT_PID" "$SERVER_PID"
	ROWS+=("$(printf '%-7s %-7s %6s %8s %8s %9s %9s %9s %9s %9s %9s %9s %6s %6s %7s' "$asked" "$n" "$open" \
		"$(mib "$rss0")" "$(mib "$rss1")" "$(per "$rss1" "$rss0" "$open")" \
		"$(mib "$anon0")" "$(mib "$anon1")" "$(per "$anon1" "$anon0" "$open")" \
		"$rps0" "$rps1" "$rps2" "$(awk -v a="$rps1" -v b="$rps0" 'BEGIN { printf "%.2f", a / b }')" \
		"$bad0/$bad1" "$alive")")
done

echo
echo "== idle visitor connections: each made one keep-alive request through the tunnel, then sits idle"
echo "server: keepalive_timeout=1h max_connections_per_ip=0 max_streams_per_ip=0 ip_limit_max/refill=1e9 access_log=false; fd limit $FD_NOTE"
echo "load: $LOAD_C keep-alive connections for $LOAD_D (bench/scalevisitors load), best of $LOAD_RUNS, before (req/s_0), with (req/s_N) and after (req/s_aft) the idle ones; ratio = N/0"
echo "memory: /proc/PID/status of the server ${SETTLE}s after each step settled; KiB/conn = (with - before) / open; bad = non-200 answers + errors of the loads; alive = idle connections that answered a second request at the end"
echo "nproc $(nproc), load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-7s %-7s %6s %8s %8s %9s %9s %9s %9s %9s %9s %9s %6s %6s %7s\n' asked idle open rss0_MiB rssN_MiB KiB/conn \
	anon0_MiB anonN_MiB anonKiB/c req/s_0 req/s_N req/s_aft ratio bad0/N alive
for r in "${ROWS[@]}"; do echo "$r"; done
for r in "${NOTES[@]}"; do echo "note: $r"; done
