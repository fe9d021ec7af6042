# bench/scale-lib.sh: what bench/scale-visitors.sh and bench/scale-held.sh
# share, sourced by both (not run on its own): the build into a mktemp
# dir, process bookkeeping with an EXIT trap that stops every process
# started, waits with deadlines, and the server's memory from /proc.
# The sourcing script sets NAME (its log prefix) first.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/aperio-$NAME.XXXXXX")
PIDS=()
cleanup() {
	trap - EXIT
	local p
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	sleep 0.5
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	if [[ ${BENCH_KEEP_TMP:-} == 1 ]]; then log "work dir kept in $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
log() { echo "$NAME: $*" >&2; }
die() { log "$*"; tail -n 5 "$TMP"/*.log >&2 2>/dev/null || true; exit 1; }

# stop PID... stops processes this script started, and waits for them.
stop() {
	local p
	kill "$@" 2>/dev/null || true
	for p in "$@"; do
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
}

# wait_line FILE REGEX SECS waits for a line of FILE matching REGEX and
# sets LINE to it; it ends the script after SECS seconds without one.
LINE=
wait_line() {
	local deadline=$((SECONDS + $3))
	while ((SECONDS < deadline)); do
		if LINE=$(grep -E -m1 "$2" "$1" 2>/dev/null); then
			return 0
		fi
		sleep 0.2
	done
	die "no line /$2/ in $1 after $3 s"
}

# wait_http URL HOST SECS waits until a GET of URL for HOST answers 200.
wait_http() {
	local deadline=$((SECONDS + $3))
	until [[ $(curl -s -o /dev/null -w '%{http_code}' -m 2 -H "Host: $2" "$1") == 200 ]]; do
		((SECONDS < deadline)) || die "$1 for $2 not 200 after $3 s"
		sleep 0.2
	done
}

# mem PID prints "VmRSS RssAnon" of PID in KiB.
mem() { awk '/^VmRSS:/ { r = $2 } /^RssAnon:/ { a = $2 } END { print r + 0, a + 0 }' "/proc/$1/status"; }

log "building aperio-server, aperio-client and bench/scalevisitors"
CGO_ENABLED=0 go build -o "$TMP/" ./cmd/aperio-server ./cmd/aperio-client ./bench/scalevisitors
SV=$TMP/scalevisitors
TOKEN=bench-scale-master-$RANDOM$RANDOM-0123456789abcdef
METRICS_TOKEN=bench-scale-metrics-$RANDOM$RANDOM

# The backend (and scaling provider, POST /scale).
"$SV" backend >"$TMP/backend.out" 2>"$TMP/backend.log" & PIDS+=($!)
wait_line "$TMP/backend.out" '^listening ' 20
BACKEND=${LINE#listening }

# The server's file descriptor limit: one per visitor connection, beyond
# the shell's hard limit (20,000 here) when prlimit may raise it (root
# with CAP_SYS_RESOURCE; Linux caps it at fs.nr_open). Without that
# capability the server runs with the hard limit, and FD_NOTE says so.
NOFILE=$(( $(cat /proc/sys/fs/nr_open) < 200000 ? $(cat /proc/sys/fs/nr_open) : 200000 ))
FD_WRAP=(prlimit --nofile="$NOFILE:$NOFILE")
FD_NOTE="raised to $NOFILE with prlimit"
if ! prlimit --nofile="$NOFILE:$NOFILE" true 2>/dev/null; then
	NOFILE=$(ulimit -Hn)
	FD_WRAP=()
	FD_NOTE="$NOFILE, the hard limit: prlimit may not raise it here (no CAP_SYS_RESOURCE)"
fi

# start_server VAR=VALUE... starts aperio-server on a free port of
# 127.0.0.1 with a fresh data dir, the common settings and the extra
# ones, and sets SERVER_PID and PORT (from its "server listening" line;
# prlimit, when it may, raises the fd limit and execs it).
SERVERS=0
start_server() {
	SERVERS=$((SERVERS + 1))
	local log=$TMP/server$SERVERS.log
	env APERIO_SERVER_TOKEN="$TOKEN" APERIO_METRICS_TOKEN="$METRICS_TOKEN" APERIO_HOST=127.0.0.1 \
		APERIO_PORT=0 APERIO_DATA_DIR="$TMP/data$SERVERS" APERIO_LOG_LEVEL=info "$@" \
		"${FD_WRAP[@]}" "$TMP/aperio-server" 2>"$log" & PIDS+=($!)
	SERVER_PID=$!
	wait_line "$log" 'msg="server listening"' 30
	PORT=$(sed -n 's/.* addr=127\.0\.0\.1:\([0-9]*\).*/\1/p' <<<"$LINE")
	[[ -n $PORT ]] || die "no port in the server's listening line"
}

# start_client PORT HOST FLAG... starts aperio-client for the backend
# with HOST on the server at PORT and sets CLIENT_PID.
CLIENTS=0
start_client() {
	local port=$1 host=$2
	shift 2
	CLIENTS=$((CLIENTS + 1))
	APERIO_SERVER_TOKEN=$TOKEN "$TMP/aperio-client" "$BACKEND" --hostname "$host" \
		--server-url "http://127.0.0.1:$port" --status-socket off --log-level warn "$@" \
		2>"$TMP/client$CLIENTS.log" & PIDS+=($!)
	CLIENT_PID=$!
}

# load HOST C DURATION RUNS runs a fixed load on the server at PORT
# (bench/scalevisitors load: C keep-alive connections for DURATION) RUNS
# times, and sets RPS to the best run's req/s (the one least disturbed
# by other work on the machine) and BAD to the non-200 answers plus
# errors of all runs.
load() {
	local out r non200 errs i
	RPS=0 BAD=0
	for ((i = 0; i < $4; i++)); do
		out=$(timeout 120 "$SV" load -addr "127.0.0.1:$PORT" -host "$1" -c "$2" -d "$3") || die "load failed"
		read -r _ r non200 errs <<<"$out"
		((r > RPS)) && RPS=$r
		BAD=$((BAD + non200 + errs))
	done
	return 0
}

# per KIB_AFTER KIB_BEFORE N prints (after - before) / N in KiB, 2 decimals.
per() { awk -v a="$1" -v b="$2" -v n="$3" 'BEGIN { printf "%.2f", (a - b) / n }'; }
# mib KIB prints KIB in MiB, 1 decimal.
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
