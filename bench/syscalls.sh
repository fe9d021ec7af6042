#!/usr/bin/env bash
# bench/syscalls.sh: the syscalls aperio-server and aperio-client make per
# proxied request, before and after a change, in one run (#43).
#
#   bash bench/syscalls.sh BASE [ROUNDS] [N]
#   make bench-syscalls BASE=<rev>
#
# builds aperio-server and aperio-client at git revision BASE (in a
# temporary worktree) and from the working tree, and bench/reqcount; then,
# ROUNDS times (default 2), for each build in turn: starts a server and a
# client on loopback in front of a reqcount backend and sends N requests
# (default 5000) of each row: GET / (19 bytes with a length) over 1 and
# over 64 connections, GET /chunked (3,000 bytes, chunked) over 1. Each
# row is sent twice after a warm-up of 500: once to read the read and
# write syscalls of both processes from /proc/PID/io (syscr, syscw: every
# read and write, the runtime's eventfd wake-ups included), once under
# `strace -f -c` (if installed) for the count of each kind (read with its
# EAGAINs, write, futex, epoll_pwait). The first pass also reads, per
# process, the CPU time (utime + stime from /proc/PID/stat, in µs) and,
# from each process's debug_listen /debug/metrics, the goroutines it
# created (/sched/goroutines-created:goroutines) and the heap objects it
# allocated (/gc/heap/allocs:objects). It prints one line per row and
# process, divided by N. Counts are what a shared machine's load barely
# moves (CPU time less so); req/s is printed beside them and is not a
# result.
#
# Everything listens on 127.0.0.1; an EXIT trap stops what it started.
set -euo pipefail

BASE=${1:?usage: bench/syscalls.sh BASE [ROUNDS] [N]}
ROUNDS=${2:-2}
N=${3:-5000}
[[ $ROUNDS =~ ^[0-9]+$ ]] && ((ROUNDS >= 1)) || { echo "syscalls: ROUNDS must be a positive count" >&2; exit 2; }
[[ $N =~ ^[0-9]+$ ]] && ((N >= 100)) || { echo "syscalls: N must be 100 or more" >&2; exit 2; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
base_rev=$(git rev-parse --short "$BASE^{commit}")
head_rev="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- || echo +dirty)"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/aperio-syscalls.XXXXXX")
PIDS=()
cleanup() {
	local p
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	git worktree remove --force "$TMP/src" >/dev/null 2>&1 || true
	rm -rf "$TMP"
}
trap cleanup EXIT
log() { echo "syscalls: $*" >&2; }

log "building $base_rev and $head_rev"
git worktree add --detach "$TMP/src" "$base_rev" >/dev/null 2>&1
mkdir -p "$TMP/base" "$TMP/head"
(cd "$TMP/src" && CGO_ENABLED=0 go build -trimpath -o "$TMP/base/" ./cmd/aperio-server ./cmd/aperio-client)
CGO_ENABLED=0 go build -trimpath -o "$TMP/head/" ./cmd/aperio-server ./cmd/aperio-client
go build -o "$TMP/reqcount" ./bench/reqcount
RC=$TMP/reqcount
STRACE=$(command -v strace || true)
[[ -n $STRACE ]] || log "strace not installed: /proc counts only"

TOKEN=bench-master-token-0123456789abcdef
BPORT=$("$RC" port)
"$RC" backend "127.0.0.1:$BPORT" & PIDS+=($!)

# cpu PID prints the utime + stime of PID in clock ticks.
cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# rt PORT prints "goroutines-created heap-allocs" of the process whose
# debug_listen is 127.0.0.1:PORT.
rt() {
	curl -sf --max-time 5 "http://127.0.0.1:$1/debug/metrics" |
		jq -r '[."/sched/goroutines-created:goroutines", ."/gc/heap/allocs:objects"] | map(. // 0) | @tsv'
}
# us A B prints the clock ticks B-A in µs per request.
us() { awk -v a="$1" -v b="$2" -v n="$N" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.0f", (b - a) * 1e6 / hz / n }'; }

# io PID prints "syscr syscw" of PID.
io() { awk '/^syscr/ { r = $2 } /^syscw/ { w = $2 } END { print r, w }' "/proc/$1/io"; }
# per A B prints (B-A)/N with two decimals.
per() { awk -v a="$1" -v b="$2" -v n="$N" 'BEGIN { printf "%.2f", (b - a) / n }'; }

# start BUILD starts a server and a client of BUILD and waits until a
# request goes through; it sets SP, CP and SPORT.
start() {
	SPORT=$("$RC" port)
	SDBG=$("$RC" port)
	CDBG=$("$RC" port)
	rm -rf "$TMP/data" && mkdir -p "$TMP/data"
	env APERIO_SERVER_TOKEN=$TOKEN APERIO_HOST=127.0.0.1 APERIO_PORT="$SPORT" APERIO_DATA_DIR="$TMP/data" \
		APERIO_DEBUG_LISTEN="127.0.0.1:$SDBG" \
		APERIO_LOG_LEVEL=warn APERIO_MAX_CONCURRENT_REQUESTS=1000 \
		APERIO_IP_LIMIT_MAX=100000000 APERIO_IP_LIMIT_REFILL=100000000 \
		"$TMP/$1/aperio-server" >"$TMP/$1-server.log" 2>&1 &
	SP=$!
	PIDS+=("$SP")
	env APERIO_SERVER_TOKEN=$TOKEN APERIO_DEBUG_LISTEN="127.0.0.1:$CDBG" "$TMP/$1/aperio-client" "127.0.0.1:$BPORT" --hostname bench.local \
		--server-url "http://127.0.0.1:$SPORT" --max-concurrent 256 --log-level warn >"$TMP/$1-client.log" 2>&1 &
	CP=$!
	PIDS+=("$CP")
	local i
	for i in $(seq 150); do
		"$RC" load "http://127.0.0.1:$SPORT/" bench.local 1 1 >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	log "$1 not ready; server: $(tail -3 "$TMP/$1-server.log"); client: $(tail -3 "$TMP/$1-client.log")"
	exit 1
}

# traced KIND PID OUT runs strace -c on PID into OUT in the background and
# sets TP.
traced() {
	"$STRACE" -f -c -e trace=read,write,writev,futex,epoll_pwait -o "$3" -p "$2" 2>/dev/null &
	TP=$!
}

# kinds FILE prints the calls per request of each syscall in FILE, a
# strace -c summary (read_eagain: the reads that found nothing).
kinds() {
	awk -v n="$N" '$NF ~ /^(read|write|writev|futex|epoll_pwait)$/ {
		printf " %s=%.2f", $NF, $4 / n
		if ($NF == "read" && NF == 6) printf " read_eagain=%.2f", $5 / n
	} END { print "" }' "$1"
}

printf '# N=%s per row; base %s, head %s\n' "$N" "$base_rev" "$head_rev"
for ((r = 1; r <= ROUNDS; r++)); do
	for b in base head; do
		start "$b"
		for row in "/ 1" "/ 64" "/chunked 1"; do
			read -r path c <<<"$row"
			url="http://127.0.0.1:$SPORT$path"
			"$RC" load "$url" bench.local 500 "$c" >/dev/null
			read -r sg0 sa0 < <(rt "$SDBG")
			read -r cg0 ca0 < <(rt "$CDBG")
			read -r sr0 sw0 < <(io "$SP")
			read -r cr0 cw0 < <(io "$CP")
			st0=$(cpu "$SP") ct0=$(cpu "$CP")
			read -r _ rps _ < <("$RC" load "$url" bench.local "$N" "$c")
			st1=$(cpu "$SP") ct1=$(cpu "$CP")
			read -r sr1 sw1 < <(io "$SP")
			read -r cr1 cw1 < <(io "$CP")
			read -r sg1 sa1 < <(rt "$SDBG")
			read -r cg1 ca1 < <(rt "$CDBG")
			printf 'round=%d build=%s path=%s c=%s req/s=%s proc server: read=%s write=%s; client: read=%s write=%s\n' \
				"$r" "$b" "$path" "$c" "$rps" "$(per "$sr0" "$sr1")" "$(per "$sw0" "$sw1")" "$(per "$cr0" "$cr1")" "$(per "$cw0" "$cw1")"
			printf 'round=%d build=%s path=%s c=%s runtime server: cpu_us=%s goroutines=%s allocs=%s; client: cpu_us=%s goroutines=%s allocs=%s\n' \
				"$r" "$b" "$path" "$c" "$(us "$st0" "$st1")" "$(per "$sg0" "$sg1")" "$(per "$sa0" "$sa1")" \
				"$(us "$ct0" "$ct1")" "$(per "$cg0" "$cg1")" "$(per "$ca0" "$ca1")"
			[[ -n $STRACE ]] || continue
			traced "$b" "$SP" "$TMP/st-server"
			t1=$TP
			traced "$b" "$CP" "$TMP/st-client"
			t2=$TP
			sleep 1 # strace attaches
			"$RC" load "$url" bench.local "$N" "$c" >/dev/null
			kill -INT "$t1" "$t2"
			wait "$t1" "$t2" 2>/dev/null || true
			printf 'round=%d build=%s path=%s c=%s strace server:%s\n' "$r" "$b" "$path" "$c" "$(kinds "$TMP/st-server")"
			printf 'round=%d build=%s path=%s c=%s strace client:%s\n' "$r" "$b" "$path" "$c" "$(kinds "$TMP/st-client")"
		done
		kill "$CP" "$SP"
		wait "$CP" "$SP" 2>/dev/null || true
	done
done
