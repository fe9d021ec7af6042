#!/usr/bin/env bash
# bench/scaling.sh: the `make bench-scaling` harness. It builds
# aperio-server, aperio-client and the bench/scaling program, then measures
# autoscaling with every part a process of its own (server, client,
# backend, visitors and provider):
#
#   (a) release: instance connected_at -> first held request at the
#       backend, bursts of 1, 100 and 1000, 100 runs each after a warm-up
#       (so that p99, by nearest rank, is the 99th run and not the
#       largest); provider calls per cold start, every answer's status,
#       time to the last answer
#   (b) calls: provider calls per cold start decision with 2 and 3 servers
#       on one PostgreSQL, a burst of 100 split across them, while the
#       provider holds each call 2 s before it answers: the other servers
#       meet the caller's live lease (the lease row in the shared store),
#       not only its recorded outcome. The target is exactly 1 call per
#       decision; the table also counts, from the servers' logs, the
#       decisions deferred on the lease and dropped for the other call
#   (c) flap, only with FLAP=1: one client of max_concurrent 50, target
#       0.8 (scale out at utilization >= 0.8 for a 15 s window, scale in
#       below 0.4 for four windows). Phase 1, ten minutes, steps every
#       window between 21 and 38 in flight (utilization 0.42 and 0.76:
#       within 5% of the scale-in and scale-out thresholds, on the quiet
#       side; zero calls expected); phase 2, four steps just past them:
#       42 in flight on one client (0.84, one scale_out) and 38 on two
#       (0.38, one scale_in), one call each. About 17 minutes; see
#       `scaling flap -h` (-margin, -duration)
#
# The 1/5/15-minute load average goes into the report at the start and
# the end of each mode: the machine may be shared, and other work skews
# every figure.
#
# Tables go to stdout and to bench/out/scaling-latest.txt; progress to
# stderr. (a) and (b) take a few minutes once built.
#
# (b) uses $APERIO_TEST_POSTGRES_DSN when set; otherwise it starts a
# throwaway cluster with scripts/postgres-test.sh (which installs Debian's
# postgresql as root if initdb is missing) and stops it at exit. When no
# PostgreSQL can be had, (b) prints "skipped: <reason>" and the script
# still exits 0. A database another harness run used does not do: its
# servers stored their signing keys under that run's master token, and
# this run's servers refuse to start on it.
#
# Knobs:
#   SCALING_RUNS=100         measured runs per burst size in (a)
#   SCALING_CALLS_RUNS=3     cold starts per number of servers in (b)
#   SCALING_PROVIDER_DELAY=2s  how long the provider holds each call in (b)
#                            (0s..30s; the servers' call timeout is 10s)
#   FLAP=1                   run (c) too
#   FLAP_ARGS="-duration 2m" extra flags for (c) (see: scaling flap -h)
#   BENCH_KEEP_TMP=1         keep the work dir (every process's log)
#
# Every process runs in its own process group and is stopped by the
# program on every exit path (and, on Linux, dies with it); an EXIT trap
# stops PostgreSQL and removes the work dir.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly ROOT
cd "$ROOT"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/aperio-bench-scaling.XXXXXX")
readonly TMP BIN="$TMP/bin"
mkdir -p "$BIN"
PG_DIR=

cleanup() {
	trap - EXIT INT TERM
	if [[ -n $PG_DIR ]]; then
		bash scripts/postgres-test.sh stop "$PG_DIR" >/dev/null 2>&1 || true
	fi
	if [[ ${BENCH_KEEP_TMP:-} == 1 ]]; then
		echo "bench-scaling: work dir kept in $TMP" >&2
	else
		rm -rf "$TMP"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log() { echo "bench-scaling: $*" >&2; }

# load_note WHAT appends the load average now to the report.
load_note() {
	echo "load:   $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) at the $1" | tee -a "$TMP/report.txt"
}

# run_wait CMD... runs CMD in the background and waits for it, so that a
# Ctrl-C reaches the traps at once; the program stops its own children.
run_wait() {
	local pid rc=0
	"$@" &
	pid=$!
	wait "$pid" || rc=$?
	return "$rc"
}

main() {
	local report=$TMP/report.txt keep=() dsn=${APERIO_TEST_POSTGRES_DSN:-} env_out
	[[ ${BENCH_KEEP_TMP:-} == 1 ]] && keep=(-keep -work-dir "$TMP/work")
	log "building aperio-server, aperio-client and bench/scaling"
	CGO_ENABLED=0 go build -o "$BIN/" ./cmd/aperio-server ./cmd/aperio-client ./bench/scaling
	local bins=(-server "$BIN/aperio-server" -client "$BIN/aperio-client")
	{
		echo "== aperio bench-scaling, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
		echo "nproc:  $(nproc)"
		echo "load:   $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min load average at the start; other work on the machine skews every figure)"
		echo "cpu:    $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1 || true)"
		echo "go:     $(go version)"
	} | tee "$report"

	load_note "start of (a) release"
	run_wait "$BIN/scaling" release "${bins[@]}" "${keep[@]}" -runs "${SCALING_RUNS:-100}" | tee -a "$report"
	load_note "end of (a) release"

	if [[ -z $dsn ]]; then
		log "no APERIO_TEST_POSTGRES_DSN: starting a throwaway PostgreSQL"
		if env_out=$(bash scripts/postgres-test.sh start 2>"$TMP/postgres.log"); then
			PG_DIR=$(sed -n "s/^export APERIO_TEST_PG_DIR='\(.*\)'$/\1/p" <<<"$env_out")
			dsn=$(sed -n "s/^export APERIO_TEST_POSTGRES_DSN='\(.*\)'$/\1/p" <<<"$env_out")
		fi
	fi
	if [[ -z $dsn ]]; then
		printf '\n== Provider calls per cold start decision\nskipped: no PostgreSQL (%s)\n' \
			"$(tail -n 1 "$TMP/postgres.log" 2>/dev/null | cut -c1-160)" | tee -a "$report"
	else
		# In the environment, not on the command line: it may hold a password.
		export APERIO_TEST_POSTGRES_DSN=$dsn
		load_note "start of (b) calls"
		run_wait "$BIN/scaling" calls "${bins[@]}" "${keep[@]}" \
			-servers 2,3 -runs "${SCALING_CALLS_RUNS:-3}" \
			-provider-delay "${SCALING_PROVIDER_DELAY:-2s}" | tee -a "$report"
		load_note "end of (b) calls"
	fi

	if [[ ${FLAP:-} == 1 ]]; then
		# shellcheck disable=SC2086 # FLAP_ARGS is a list of flags
		load_note "start of (c) flap${FLAP_ARGS:+ ($FLAP_ARGS)}"
		run_wait "$BIN/scaling" flap "${bins[@]}" "${keep[@]}" ${FLAP_ARGS:-} | tee -a "$report"
		load_note "end of (c) flap"
	fi

	# A copy for comparing runs; bench/out/ is git-ignored.
	mkdir -p "$ROOT/bench/out"
	cp "$report" "$ROOT/bench/out/scaling-latest.txt"
	log "report saved to bench/out/scaling-latest.txt"
}

main "$@"
