#!/usr/bin/env bash
# bench/scale-clients.sh: connected clients on one aperio-server (#21).
# It builds aperio-server and bench/scaleclients into a temporary dir,
# then, for each client count N, starts a fresh server (embedded SQLite,
# loopback port, data dir of its own; max_tunnels,
# max_connections_per_ip and the per-address bucket lifted; metrics on;
# GODEBUG=gctrace=1) and measures:
#
#   - the server's VmRSS and RssAnon with 0 and with N clients connected,
#     and the delta per client; the live heap and goroutine stacks per
#     client from the last gctrace lines (MB resolution; gctrace's stacks
#     are the part of each stack in use), and the stacks the runtime holds
#     per client (go_memstats_stack_inuse_bytes on /aperio/metrics)
#   - the server's CPU (utime+stime) over SCALE_IDLE with 0 and with N
#     idle clients (heartbeats only): µs per client per second and % of
#     one core; the client processes' CPU over the same window
#   - the time from the first client started to the server counting N
#     (aperio_connected_clients on /aperio/metrics), at SCALE_RATE/s
#   - a restart: SIGTERM (SCALE_SIGNAL=KILL for SIGKILL) to the server,
#     the same binary started again on the same address and data dir;
#     the time until it listens and then until it counts all N again,
#     the clients reconnecting with their own jittered backoff
#
# The clients are agent.Agent values (what aperio-client runs: the tunnel
# client's reconnect loop, backoff and heartbeats), SCALE_PER_PROC of them
# per child process of the harness, each with its hostname cI.scale.test
# and the tiny backend of its process, dialling from 127.0.0.2, 127.0.0.3,
# ... (SCALE_PER_IP clients per address). One table on stdout; progress
# on stderr. A wait that ends at its deadline shows as ">T (count)" (the
# count of the last poll that was answered) and makes the exit status 1;
# a count whose connect fell short gets no further figures, and the run
# goes on with the next.
#
#   bash bench/scale-clients.sh
#
# Knobs (env): SCALE_CLIENTS="1000 5000 10000", SCALE_IDLE=20s,
# SCALE_SETTLE=5s, SCALE_RATE=250 (clients/s), SCALE_PER_PROC=2500,
# SCALE_PER_IP=250, SCALE_SIGNAL=TERM, SCALE_TIMEOUT=15m (the whole run),
# BENCH_KEEP_TMP=1 (keep the work dir: every process's log).
#
# The run lifts the soft RLIMIT_NOFILE to the hard one for every process.
# Every process runs in its own process group and dies with the harness;
# the EXIT trap stops the harness and removes the work dir.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/aperio-scaleclients.XXXXXX")
PID=
cleanup() {
	trap - EXIT INT TERM
	if [[ -n $PID ]]; then
		kill "$PID" 2>/dev/null || true
		wait "$PID" 2>/dev/null || true
	fi
	if [[ ${BENCH_KEEP_TMP:-} == 1 ]]; then
		echo "bench-scale-clients: work dir kept in $TMP" >&2
	else
		rm -rf "$TMP"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ulimit -n "$(ulimit -Hn)"
echo "bench-scale-clients: building" >&2
CGO_ENABLED=0 go build -o "$TMP/" ./cmd/aperio-server ./bench/scaleclients

timeout --signal=TERM --kill-after=30s "${SCALE_TIMEOUT:-15m}" \
	"$TMP/scaleclients" run -server "$TMP/aperio-server" -dir "$TMP" \
	-clients "${SCALE_CLIENTS:-1000 5000 10000}" -idle "${SCALE_IDLE:-20s}" \
	-settle "${SCALE_SETTLE:-5s}" -rate "${SCALE_RATE:-250}" \
	-per-proc "${SCALE_PER_PROC:-2500}" -per-ip "${SCALE_PER_IP:-250}" \
	-signal "${SCALE_SIGNAL:-TERM}" &
PID=$!
wait "$PID"
