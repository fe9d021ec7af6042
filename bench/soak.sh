#!/usr/bin/env bash
# bench/soak.sh: the soak test of issue #21 (`make soak`). It builds
# aperio-server, aperio-client and bench/soak, then runs one server, two
# clients for one hostname, a cold-start hostname whose instance a
# harness provider starts, and an in-harness backend, and drives mixed
# traffic for DURATION:
#
#   - ~150 small GETs a second, HTTP/1.1 and h2c in turn
#   - two loops of 1 MiB chunked bodies, read whole and checked (SHA-256)
#   - two loops of WebSocket sessions (connect, 10 echoes, close)
#   - a cold start every 40 s: a burst of 4 GETs held while the provider
#     starts a client, then that client is stopped (SIGTERM) and the
#     hostname armed again
#   - a client restart every 30 s: SIGTERM to one of the two clients (it
#     must exit 0), start it again, wait until it serves
#
# What "no request lost" asserts: every request started ends in a 200
# with the exact body (a WebSocket: 101, every echo, a clean close); no
# other status, no transport error, during restarts included. That is
# the product's guarantee, not a tolerance: a client stopped with SIGTERM
# announces draining and waits for every server's acknowledgement before
# it stops taking requests, finishes those in flight (drain_timeout, here
# 30 s), and only then closes its tunnel; the other client serves the
# hostname throughout (docs/architecture.md, Shutdown). Requests held for
# a cold start were never dispatched and go to the new instance
# (docs/autoscaling.md). The failover retries of docs/failover.md are
# for a client that vanishes mid-request and are not relied on.
#
# Every SOAK_INTERVAL it prints a row: the server's RSS, goroutines
# (go_goroutines on /aperio/metrics) and open fds, the steady client's RSS
# and fds (the client exposes no goroutine count), and the requests
# started so far by kind. Afterwards it fits a least-squares line to each
# series past the warm-up (20% of the run, at least 30 s) and fails a
# series whose predicted change over the run exceeds max(3 x the residual
# standard deviation, a floor: RSS 2 MiB, goroutines 20, fds 10) — one
# goroutine, fd or 10 KiB leaked per small request is orders above that.
#
#   bash bench/soak.sh [DURATION]       default 3m; e.g. 10m, 1h
#
# Knobs: SOAK_INTERVAL (10s), SOAK_RATE (150 small GETs/s), SOAK_COLD_EVERY
# (40s), SOAK_RESTART_EVERY (30s), BENCH_KEEP_TMP=1 keeps every process's
# log. Tables go to stdout, progress to stderr; exit 1 on any failure.
# Everything listens on 127.0.0.1. The program stops the processes it
# started on every exit path (and, on Linux, they die with it); the EXIT
# trap removes the build dir. The run is bounded: DURATION, plus at most
# 3 minutes of setup and 2 of draining, or the program gives up.
set -euo pipefail

DURATION=${1:-3m}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/aperio-soak.XXXXXX")
PID=
cleanup() {
	trap - EXIT INT TERM
	if [[ -n $PID ]]; then
		kill "$PID" 2>/dev/null || true
		wait "$PID" 2>/dev/null || true
	fi
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
log() { echo "soak: $*" >&2; }

log "building aperio-server, aperio-client and bench/soak"
CGO_ENABLED=0 go build -o "$TMP/" ./cmd/aperio-server ./cmd/aperio-client ./bench/soak

keep=()
if [[ ${BENCH_KEEP_TMP:-} == 1 ]]; then
	keep=(-keep -work-dir "$(mktemp -d "${TMPDIR:-/tmp}/aperio-soak-work.XXXXXX")")
fi
start=$SECONDS
# In the background and waited for, so that a Ctrl-C reaches the traps
# at once; the program stops its own children.
"$TMP/soak" -server "$TMP/aperio-server" -client "$TMP/aperio-client" -duration "$DURATION" \
	-interval "${SOAK_INTERVAL:-10s}" -rate "${SOAK_RATE:-150}" \
	-cold-every "${SOAK_COLD_EVERY:-40s}" -restart-every "${SOAK_RESTART_EVERY:-30s}" "${keep[@]}" &
PID=$!
rc=0
wait "$PID" || rc=$?
PID=
log "took $((SECONDS - start)) s (exit $rc)"
exit "$rc"
