#!/usr/bin/env bash
# bench/scaling.sh: the `make bench-scaling` harness. It builds
# aperio-server, aperio-client and the bench/scaling program, then measures
# autoscaling with every part a process of its own (server, client,
# backend, visitors and provider):
#
#   (a) release: instance connected_at -> first held request at the
#       backend, bursts of 1, 100 and 1000, 20 runs each after a warm-up;
#       provider calls per cold start, every answer's status, time to the
#       last answer
#   (b) calls: provider calls per cold start decision with 2 and 3 servers
#       on one PostgreSQL, a burst of 100 split across them
#   (c) flap, only with FLAP=1: ten minutes of load stepping between 45% and
#       75% of capacity (target 0.8: zero calls expected), then four steps
#       across the band (one call each); about 17 minutes
#
# Tables go to stdout and to bench/out/scaling-latest.txt; progress to
# stderr. (a) and (b) take a minute or two once built.
#
# (b) uses $APERIO_TEST_POSTGRES_DSN when set; otherwise it starts a
# throwaway cluster with scripts/postgres-test.sh (which installs Debian's
# postgresql as root if initdb is missing) and stops it at exit. When no
# PostgreSQL can be had, (b) prints "skipped: <reason>" and the script
# still exits 0.
#
# Knobs:
#   SCALING_RUNS=20          measured runs per burst size in (a)
#   SCALING_CALLS_RUNS=3     cold starts per number of servers in (b)
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

	run_wait "$BIN/scaling" release "${bins[@]}" "${keep[@]}" -runs "${SCALING_RUNS:-20}" | tee -a "$report"

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
		run_wait "$BIN/scaling" calls "${bins[@]}" "${keep[@]}" \
			-servers 2,3 -runs "${SCALING_CALLS_RUNS:-3}" | tee -a "$report"
	fi

	if [[ ${FLAP:-} == 1 ]]; then
		# shellcheck disable=SC2086 # FLAP_ARGS is a list of flags
		run_wait "$BIN/scaling" flap "${bins[@]}" "${keep[@]}" ${FLAP_ARGS:-} | tee -a "$report"
	fi

	# A copy for comparing runs; bench/out/ is git-ignored.
	mkdir -p "$ROOT/bench/out"
	cp "$report" "$ROOT/bench/out/scaling-latest.txt"
	log "report saved to bench/out/scaling-latest.txt"
}

main "$@"
