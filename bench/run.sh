#!/usr/bin/env bash
# bench/run.sh: the `make bench` harness. It builds aperio-demo, aperio-server,
# aperio-client, Caddy and frp, then measures in one run on this machine:
#
#   (a) wrk straight to aperio-demo
#   (b) wrk through one nginx reverse-proxy hop
#   (b) caddy: wrk through one Caddy reverse_proxy hop (a Go reverse
#       proxy, keep-alive pool of 256 idle connections to the backend)
#   (c) wrk through aperio-server + aperio-client
#   (c) tcp: the same with the client on the tcp transport
#       (server.transport: tcp, yamux without WebSocket framing)
#   (d) wrk through frps + frpc (HTTP vhost mode)
#
# each with 1 and 64 connections, BENCH_ROUNDS times (3), the rows
# alternating (a b caddy d c tcp, a b caddy d c tcp, ...), each row's
# proxy started for its run and stopped after it. Each run also takes the
# CPU time (utime + stime from /proc/PID/stat) of the row's own processes
# (the proxy's, and their children such as nginx's workers; for (a) the
# backend's) over the measured wrk run, divided by the requests wrk
# completed: CPU µs per request, a figure the neighbours' load moves far
# less than req/s. The table prints each row's median and its spread
# (min-max) over the rounds, and Aperio's and frp's CPU split by process.
# Then, once: (c) with one subscriber of the live event stream (a
# dashboard open), a 1 GiB download and upload through Aperio on each
# transport (throughput and peak RSS growth) and Aperio's idle RSS. It
# prints one table on stdout and progress on stderr, and takes about 8
# minutes once the binaries are cached.
#
# Everything listens on free random ports on 127.0.0.1 and lives in a mktemp
# directory; an EXIT trap stops every process the script started. A row whose
# proxy cannot be built or never becomes ready prints "skipped: <reason>" and
# the script still exits 0. Only a broken aperio-demo, which every row needs,
# or a missing wrk/nginx/curl makes it exit non-zero.
#
# Autoscaling (release of held requests, provider calls per cold start
# with several servers, a flapping load) is measured by bench/scaling.sh,
# `make bench-scaling`; docs/benchmarks.md holds its figures.
#
# Knobs, for quick iterations only (the defaults are the published numbers):
#   BENCH_DURATION=10s        length of each measured wrk run
#   BENCH_WARMUP=2s           length of the warm-up run before each row
#   BENCH_ROUNDS=3            how many times each row runs, alternating
#   BENCH_STREAM_BYTES=1073741824  size of the streamed download and upload
#   BENCH_KEEP_TMP=1          keep the work dir (configs and logs) and print it
set -euo pipefail

readonly FRP_VERSION=v0.65.0
readonly CADDY_VERSION=v2.11.9
readonly VHOST=bench.local
readonly DURATION=${BENCH_DURATION:-10s}
readonly WARMUP=${BENCH_WARMUP:-2s}
readonly ROUNDS=${BENCH_ROUNDS:-3}
readonly STREAM_BYTES=${BENCH_STREAM_BYTES:-1073741824}
readonly READY_TIMEOUT=20 # seconds to wait for a proxy to answer 200
readonly STREAM_MAX_TIME=180 # seconds curl may spend on one streamed transfer

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly ROOT
cd "$ROOT"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/aperio-bench.XXXXXX")
readonly TMP BIN="$TMP/bin" LOG="$TMP/log"
mkdir -p "$BIN" "$LOG"

FRP_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/aperio-bench/frp-$FRP_VERSION"
readonly FRP_CACHE
CADDY_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/aperio-bench/caddy-$CADDY_VERSION"
readonly CADDY_CACHE

# ---------------------------------------------------------------------------
# Process bookkeeping.

PIDS=() # every background process this script started, oldest first

# cleanup stops what start_bg started: SIGTERM, up to 5 s of grace, then
# SIGKILL. It runs on every exit path through the EXIT trap.
cleanup() {
	local pid i alive
	trap - EXIT INT TERM
	for pid in "${PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for ((i = 0; i < 50; i++)); do
		alive=0
		for pid in "${PIDS[@]}"; do
			kill -0 "$pid" 2>/dev/null && alive=1
		done
		((alive)) || break
		sleep 0.1
	done
	for pid in "${PIDS[@]}"; do
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	if [[ ${BENCH_KEEP_TMP:-} == 1 ]]; then
		echo "bench: work dir kept in $TMP" >&2
	else
		rm -rf "$TMP"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log() { echo "bench: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

# start_bg NAME CMD... runs CMD in the background with stdout and stderr in
# $LOG/NAME.log, records its PID in PIDS and sets BG_PID to it.
start_bg() {
	local name=$1
	shift
	"$@" </dev/null >"$LOG/$name.log" 2>&1 &
	BG_PID=$!
	PIDS+=("$BG_PID")
}

# stop_bg PID... stops processes started by start_bg early (to keep idle
# proxies from competing for the two cores).
stop_bg() {
	local pid i
	for pid in "$@"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "$@"; do
		for ((i = 0; i < 50; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	forget_pids "$@"
}

# forget_pids PID... drops reaped PIDs from PIDS, so that cleanup never
# signals a recycled PID.
forget_pids() {
	local pid keep=()
	for pid in "${PIDS[@]}"; do
		[[ " $* " == *" $pid "* ]] || keep+=("$pid")
	done
	PIDS=("${keep[@]}")
}

# run_wait CMD... runs CMD to completion and returns its status. CMD runs in
# the background with a wait, because bash defers INT and TERM traps until a
# foreground command ends, and wrk runs or 1 GiB transfers should not delay a
# Ctrl-C; cleanup then stops CMD like any other process.
run_wait() {
	local pid rc=0
	"$@" &
	pid=$!
	PIDS+=("$pid")
	wait "$pid" || rc=$?
	forget_pids "$pid"
	return "$rc"
}

# last_log NAME prints the last non-empty line of $LOG/NAME.log, for skip reasons.
last_log() {
	local line
	line=$(sed 's/\x1b\[[0-9;]*m//g' "$LOG/$1.log" 2>/dev/null | grep -v '^[[:space:]]*$' | tail -n 1) || true
	echo "${line:-<empty log>}" | cut -c1-160
}

# ---------------------------------------------------------------------------
# Ports.

USED_PORTS=" "

# free_port VAR sets VAR to a TCP port on 127.0.0.1 that no socket uses now.
# Ports come from 20000-32767, below Linux's ephemeral range (32768-60999), so
# the outgoing connections of wrk and the proxies never collide with them, and
# never repeat within one run.
free_port() {
	local p i
	for ((i = 0; i < 200; i++)); do
		p=$((20000 + RANDOM % 12768))
		[[ $USED_PORTS == *" $p "* ]] && continue
		if [[ -n $(ss -Htan "( sport = :$p )" 2>/dev/null) ]]; then
			continue
		fi
		USED_PORTS+="$p "
		printf -v "$1" '%s' "$p"
		return 0
	done
	die "no free port found"
}

# wait_ready URL TIMEOUT PID... polls URL with Host: $VHOST until it answers
# 200, for at most TIMEOUT seconds. It fails early when one of the PIDs exits,
# and sets READY_ERR to the reason on failure.
wait_ready() {
	local url=$1 timeout=$2 code deadline pid
	shift 2
	READY_ERR=
	deadline=$((SECONDS + timeout))
	while ((SECONDS < deadline)); do
		for pid in "$@"; do
			if ! kill -0 "$pid" 2>/dev/null; then
				READY_ERR="process $pid exited"
				return 1
			fi
		done
		code=$(curl -s -o /dev/null -m 2 -w '%{http_code}' -H "Host: $VHOST" "$url" 2>/dev/null) || true
		[[ $code == 200 ]] && return 0
		sleep 0.2
	done
	READY_ERR="no 200 from $url within ${timeout}s (last status ${code:-none})"
	return 1
}

# wait_listen PORT TIMEOUT PID waits until something accepts TCP connections
# on 127.0.0.1:PORT, for at most TIMEOUT seconds or until PID exits.
wait_listen() {
	local port=$1 timeout=$2 pid=$3 deadline
	READY_ERR=
	deadline=$((SECONDS + timeout))
	while ((SECONDS < deadline)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			READY_ERR="process $pid exited"
			return 1
		fi
		if [[ -n $(ss -Htln "( sport = :$port )" 2>/dev/null) ]]; then
			return 0
		fi
		sleep 0.1
	done
	READY_ERR="nothing listening on 127.0.0.1:$port within ${timeout}s"
	return 1
}

# ---------------------------------------------------------------------------
# Memory.

# status_kb PID FIELD prints FIELD (VmRSS, RssAnon: heap, stacks and
# runtime data, without the binary's pages) of /proc/PID/status in KiB, or
# 0 if PID is gone.
status_kb() {
	local k v rest kib=0
	if [[ -r /proc/$1/status ]]; then
		while read -r k v rest; do
			if [[ $k == "$2:" ]]; then
				kib=$v
				break
			fi
		done <"/proc/$1/status" 2>/dev/null || true
	fi
	echo "$kib"
}

# rss_kb PID prints the VmRSS of PID in KiB, or 0 if it is gone.
rss_kb() { status_kb "$1" VmRSS; }

# rss_sampler PID FILE writes the highest VmRSS of PID seen so far (KiB) to
# FILE, sampling every 100 ms until killed or PID exits.
rss_sampler() {
	local pid=$1 out=$2 max v
	max=$(rss_kb "$pid")
	echo "$max" >"$out"
	while [[ -e /proc/$pid ]]; do
		v=$(rss_kb "$pid")
		if ((v > max)); then
			max=$v
			echo "$max" >"$out"
		fi
		sleep 0.1
	done
}

kib_to_mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

# ---------------------------------------------------------------------------
# Builds.

build_demo_and_aperio() {
	log "building aperio-demo"
	if ! CGO_ENABLED=0 go build -o "$BIN/" ./cmd/aperio-demo >"$LOG/build-demo.log" 2>&1; then
		cat "$LOG/build-demo.log" >&2
		die "aperio-demo does not build"
	fi
	log "building aperio-server and aperio-client"
	APERIO_SKIP=
	# The flags of `make build` and the release builds: what users run.
	if ! CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN/" ./cmd/aperio-server ./cmd/aperio-client ./cmd/aperio-demo >"$LOG/build-aperio.log" 2>&1; then
		APERIO_SKIP="build failed: $(grep -v '^#' "$LOG/build-aperio.log" | head -n 1 | cut -c1-120)"
		log "aperio rows will be skipped: $APERIO_SKIP"
	fi
}

# fetch_module MODULE@VERSION CACHE downloads the module's source through
# the Go module proxy and copies it, writable, to CACHE (with an empty
# CACHE/bin for the build). The download runs outside any module, so that
# it cannot touch this repo's go.mod or go.sum. On failure it sets
# FETCH_ERR and returns 1.
fetch_module() {
	local mod=$1 cache=$2 name dir src
	name=$(basename "$cache")
	FETCH_ERR=
	if ! dir=$(cd "$TMP" && GO111MODULE=on go mod download -json "$mod" 2>"$LOG/$name-download.log"); then
		FETCH_ERR="go mod download failed: $(last_log "$name-download")"
		return 1
	fi
	src=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$dir")
	if [[ -z $src || ! -d $src ]]; then
		FETCH_ERR="go mod download gave no module Dir"
		return 1
	fi
	rm -rf "$cache"
	mkdir -p "$(dirname "$cache")"
	cp -R "$src" "$cache"
	chmod -R u+w "$cache"
	mkdir -p "$cache/bin"
}

# build_frp leaves frps and frpc in $FRP_CACHE/bin, reusing them when a
# previous run built them. On failure it sets FRP_SKIP.
build_frp() {
	FRP_SKIP=
	FRPS=$FRP_CACHE/bin/frps
	FRPC=$FRP_CACHE/bin/frpc
	if [[ -x $FRPS && -x $FRPC ]] && "$FRPS" --version >/dev/null 2>&1; then
		log "using cached frp $FRP_VERSION from $FRP_CACHE/bin"
		return 0
	fi
	log "building frp $FRP_VERSION (once; cached in $FRP_CACHE)"
	local goflags
	if ! fetch_module "github.com/fatedier/frp@$FRP_VERSION" "$FRP_CACHE"; then
		FRP_SKIP=$FETCH_ERR
		return 0
	fi
	# frp's go.mod has a replace directive, so `go install pkg@version`
	# refuses it; building in a copy with -mod=mod works.
	goflags="$(go env GOFLAGS) -mod=mod"
	if ! (cd "$FRP_CACHE" &&
		GOFLAGS=$goflags CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -tags frps,noweb -o bin/frps.tmp ./cmd/frps &&
		GOFLAGS=$goflags CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -tags frpc,noweb -o bin/frpc.tmp ./cmd/frpc) >"$LOG/frp-build.log" 2>&1; then
		FRP_SKIP="build failed: $(grep -v '^go: downloading' "$LOG/frp-build.log" | head -n 1 | cut -c1-120)"
		return 0
	fi
	mv "$FRP_CACHE/bin/frps.tmp" "$FRPS"
	mv "$FRP_CACHE/bin/frpc.tmp" "$FRPC"
}

# build_caddy leaves caddy in $CADDY_CACHE/bin, reusing it when a previous
# run built it, the way build_frp does frp. On failure it sets CADDY_SKIP.
build_caddy() {
	CADDY_SKIP=
	CADDY=$CADDY_CACHE/bin/caddy
	if [[ -x $CADDY ]] && "$CADDY" version >/dev/null 2>&1; then
		log "using cached caddy $CADDY_VERSION from $CADDY_CACHE/bin"
		return 0
	fi
	log "building caddy $CADDY_VERSION (once; cached in $CADDY_CACHE)"
	if ! fetch_module "github.com/caddyserver/caddy/v2@$CADDY_VERSION" "$CADDY_CACHE"; then
		CADDY_SKIP=$FETCH_ERR
		return 0
	fi
	# cmd/caddy is the standard build (every standard module), what
	# `caddy` users run; its go.sum is the module's own.
	if ! (cd "$CADDY_CACHE" &&
		GOFLAGS="$(go env GOFLAGS) -mod=mod" CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o bin/caddy.tmp ./cmd/caddy) >"$LOG/caddy-build.log" 2>&1; then
		CADDY_SKIP="build failed: $(grep -v '^go: downloading' "$LOG/caddy-build.log" | head -n 1 | cut -c1-120)"
		return 0
	fi
	mv "$CADDY_CACHE/bin/caddy.tmp" "$CADDY"
}

# ---------------------------------------------------------------------------
# wrk.

# Per run: RPS, P50, P99, NON2XX, ERRS and CPU (µs per request) are keyed
# ROW,CONNS,ROUND; CPUP (the same by process) ROW,CONNS,ROUND,NAME; FAIL
# ROW,CONNS,ROUND holds why a run has no figures. SKIP[ROW] is why a row
# did not run at all (from then on, in later rounds too).
declare -A RPS P50 P99 NON2XX ERRS CPU CPUP FAIL SKIP
declare -A CPU_NAMES # ROW -> the process names of its CPU split, in order

ROUND=1 # the round bench_row records its figures under
CLK_TCK=$(getconf CLK_TCK)
readonly CLK_TCK

# parse_wrk FILE prints "req/s p50_ms p99_ms non2xx socket_errors requests",
# or nothing when FILE has no Requests/sec line. wrk prints latencies as
# us, ms, s, m or h.
parse_wrk() {
	awk '
	function ms(v,   n, u) {
		n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
		if (u == "us") return n / 1000
		if (u == "ms") return n
		if (u == "s") return n * 1000
		if (u == "m") return n * 60000
		if (u == "h") return n * 3600000
		return -1
	}
	$1 == "50%" { p50 = ms($2) }
	$1 == "99%" { p99 = ms($2) }
	/ requests in / { reqs = $1 }
	/^Requests\/sec:/ { rps = $2; seen = 1 }
	/Non-2xx or 3xx responses:/ { non = $NF }
	/Socket errors:/ { gsub(/,/, ""); errs = $4 + $6 + $8 + $10 }
	END { if (seen) printf "%.0f %.3f %.3f %d %d %d\n", rps, p50, p99, non, errs, reqs }
	' "$1"
}

# cpu_ticks PID... prints the CPU time (utime + stime, in clock ticks) the
# PIDs and their direct children (nginx's workers) have used so far; a
# process that is gone counts 0.
cpu_ticks() {
	local f line rest pid ppid total=0
	local -a fields
	for f in /proc/[0-9]*/stat; do
		pid=${f#/proc/}
		pid=${pid%/stat}
		read -r line 2>/dev/null <"$f" || continue
		# Fields after the command name, which may hold spaces: state,
		# ppid, ... utime (14th of the line) is rest's 12th.
		rest=${line##*) }
		read -ra fields <<<"$rest"
		ppid=${fields[1]}
		if [[ " $* " == *" $pid "* || " $* " == *" $ppid "* ]]; then
			total=$((total + fields[11] + fields[12]))
		fi
	done
	echo "$total"
}

# bench_row ROW URL NAME=PID[,PID...]... runs the warm-up and the measured
# wrk runs for ROW, recording this ROUND's figures. The NAME=PIDS groups
# are the row's own processes: their CPU over each measured run, divided
# by the requests wrk completed, is the row's CPU per request (each
# group's share too, when there are several).
bench_row() {
	local row=$1 url=$2 conns threads out parsed reqs group name pids
	shift 2
	local -a groups=("$@")
	local -A before
	log "$row: warm-up ${WARMUP} (round $ROUND of $ROUNDS)"
	run_wait wrk -t2 -c64 -d"$WARMUP" -H "Host: $VHOST" "$url" >"$LOG/wrk-$row-r$ROUND-warmup.log" 2>&1 || true
	CPU_NAMES[$row]=
	for group in "${groups[@]}"; do
		CPU_NAMES[$row]+="${group%%=*} "
	done
	for conns in 1 64; do
		# wrk needs at least as many connections as threads.
		threads=$((conns < 2 ? conns : 2))
		out="$LOG/wrk-$row-c$conns-r$ROUND.log"
		for group in "${groups[@]}"; do
			pids=${group#*=}
			before[${group%%=*}]=$(cpu_ticks ${pids//,/ })
		done
		log "$row: wrk -t$threads -c$conns -d$DURATION (round $ROUND of $ROUNDS)"
		run_wait wrk -t"$threads" -c"$conns" -d"$DURATION" --latency -H "Host: $VHOST" "$url" >"$out" 2>&1 || true
		local key=$row,$conns,$ROUND total=0 ticks
		for group in "${groups[@]}"; do
			name=${group%%=*}
			pids=${group#*=}
			ticks=$(($(cpu_ticks ${pids//,/ }) - ${before[$name]}))
			CPUP[$key,$name]=$ticks
			total=$((total + ticks))
		done
		parsed=$(parse_wrk "$out")
		if [[ -z $parsed ]]; then
			FAIL[$key]="wrk: $(last_log "wrk-$row-c$conns-r$ROUND")"
			continue
		fi
		read -r "RPS[$key]" "P50[$key]" "P99[$key]" "NON2XX[$key]" "ERRS[$key]" reqs <<<"$parsed"
		# Ticks to µs per request; the split likewise.
		CPU[$key]=$(awk -v t="$total" -v hz="$CLK_TCK" -v n="$reqs" 'BEGIN { if (n > 0) printf "%.1f", t / hz * 1e6 / n; else print "-" }')
		for group in "${groups[@]}"; do
			name=${group%%=*}
			CPUP[$key,$name]=$(awk -v t="${CPUP[$key,$name]}" -v hz="$CLK_TCK" -v n="$reqs" 'BEGIN { if (n > 0) printf "%.1f", t / hz * 1e6 / n; else print "-" }')
		done
	done
}

# ---------------------------------------------------------------------------
# The rows.

start_demo() {
	free_port DEMO_PORT
	start_bg demo "$BIN/aperio-demo" --listen "127.0.0.1:$DEMO_PORT" --log-level warn
	DEMO_PID=$BG_PID
	wait_ready "http://127.0.0.1:$DEMO_PORT/healthz" "$READY_TIMEOUT" "$DEMO_PID" ||
		die "aperio-demo not ready: $READY_ERR; log: $(last_log demo)"
}

row_direct() {
	bench_row direct "http://127.0.0.1:$DEMO_PORT/" "aperio-demo=$DEMO_PID"
}

row_nginx() {
	[[ -n ${SKIP[nginx]:-} ]] && return 0
	local port dir user=
	free_port port
	dir=$TMP/nginx
	mkdir -p "$dir"
	# As root, nginx would run its workers as nobody, who cannot enter the
	# 0700 temp dir.
	[[ $(id -u) == 0 ]] && user="user root;"
	cat >"$dir/nginx.conf" <<-EOF
		$user
		daemon off;
		worker_processes auto;
		pid $dir/nginx.pid;
		error_log $dir/error.log warn;
		events { worker_connections 4096; }
		http {
		    access_log off;
		    client_body_temp_path $dir/client_body;
		    proxy_temp_path $dir/proxy;
		    fastcgi_temp_path $dir/fastcgi;
		    uwsgi_temp_path $dir/uwsgi;
		    scgi_temp_path $dir/scgi;
		    keepalive_requests 1000000;
		    upstream demo {
		        server 127.0.0.1:$DEMO_PORT;
		        keepalive 64;
		        keepalive_requests 1000000;
		    }
		    server {
		        listen 127.0.0.1:$port;
		        location / {
		            proxy_pass http://demo;
		            proxy_http_version 1.1;
		            proxy_set_header Connection "";
		            proxy_set_header Host \$host;
		        }
		    }
		}
	EOF
	start_bg nginx nginx -p "$dir/" -c "$dir/nginx.conf" -e "$dir/error.log"
	bench_proxy nginx "$BG_PID" "http://127.0.0.1:$port/" nginx_why "$dir"
}

# nginx_why DIR prints the last line of nginx's error log in DIR, for skip
# reasons.
nginx_why() { tail -n 1 "$1/error.log" 2>/dev/null || last_log nginx; }

# bench_proxy ROW PID URL WHY... waits until the one-hop proxy PID (with
# its children) answers at URL, runs ROW through it and stops it. Not
# ready, it sets SKIP[ROW] to the reason and what WHY prints.
bench_proxy() {
	local row=$1 pid=$2 url=$3
	shift 3
	if ! wait_ready "$url" "$READY_TIMEOUT" "$pid"; then
		SKIP[$row]="not ready: $READY_ERR; $("$@")"
		stop_bg "$pid"
		return 0
	fi
	bench_row "$row" "$url" "$row=$pid"
	stop_bg "$pid"
}

# row_caddy runs one Caddy hop: reverse_proxy to aperio-demo over a
# keep-alive pool of 256 idle connections, HTTP/1.1 only, admin endpoint
# and logs off, its state in the work dir.
row_caddy() {
	if [[ -n $CADDY_SKIP ]]; then
		SKIP[caddy]=$CADDY_SKIP
		return 0
	fi
	[[ -n ${SKIP[caddy]:-} ]] && return 0
	local port dir
	free_port port
	dir=$TMP/caddy
	mkdir -p "$dir"
	cat >"$dir/Caddyfile" <<-EOF
		{
		    admin off
		    auto_https off
		    log {
		        output discard
		    }
		    servers {
		        protocols h1
		    }
		}
		http://:$port {
		    bind 127.0.0.1
		    reverse_proxy 127.0.0.1:$DEMO_PORT {
		        transport http {
		            keepalive 90s
		            keepalive_idle_conns 256
		            keepalive_idle_conns_per_host 256
		        }
		    }
		}
	EOF
	start_bg caddy env HOME="$dir" XDG_CONFIG_HOME="$dir/config" XDG_DATA_HOME="$dir/data" \
		"$CADDY" run --config "$dir/Caddyfile" --adapter caddyfile
	bench_proxy caddy "$BG_PID" "http://127.0.0.1:$port/" last_log caddy
}

row_frp() {
	if [[ -n $FRP_SKIP ]]; then
		SKIP[frp]=$FRP_SKIP
		return 0
	fi
	[[ -n ${SKIP[frp]:-} ]] && return 0
	local bind vhost dir spid cpid
	free_port bind
	free_port vhost
	dir=$TMP/frp
	mkdir -p "$dir"
	cat >"$dir/frps.toml" <<-EOF
		bindAddr = "127.0.0.1"
		bindPort = $bind
		vhostHTTPPort = $vhost
		log.to = "console"
		log.level = "warn"
		log.disablePrintColor = true
	EOF
	cat >"$dir/frpc.toml" <<-EOF
		serverAddr = "127.0.0.1"
		serverPort = $bind
		transport.protocol = "tcp"
		log.to = "console"
		log.level = "warn"
		log.disablePrintColor = true

		[[proxies]]
		name = "bench"
		type = "http"
		localIP = "127.0.0.1"
		localPort = $DEMO_PORT
		customDomains = ["$VHOST"]
	EOF
	start_bg frps "$FRPS" -c "$dir/frps.toml"
	spid=$BG_PID
	# frpc gives up for good when its first login fails, so frps must be up first.
	if ! wait_listen "$bind" "$READY_TIMEOUT" "$spid"; then
		SKIP[frp]="frps not ready: $READY_ERR; $(last_log frps)"
		stop_bg "$spid"
		return 0
	fi
	start_bg frpc "$FRPC" -c "$dir/frpc.toml"
	cpid=$BG_PID
	if ! wait_ready "http://127.0.0.1:$vhost/" "$READY_TIMEOUT" "$spid" "$cpid"; then
		SKIP[frp]="not ready: $READY_ERR; frps: $(last_log frps); frpc: $(last_log frpc)"
		stop_bg "$cpid" "$spid"
		return 0
	fi
	bench_row frp "http://127.0.0.1:$vhost/" "frps=$spid" "frpc=$cpid"
	stop_bg "$cpid" "$spid"
}

# start_aperio_client NAME PORT [FLAG...] starts an aperio-client named NAME
# (its log's name) for $VHOST to aperio-demo, tunneled to the server on
# PORT, with FLAGs added, and sets APERIO_CLIENT_PID.
start_aperio_client() {
	local name=$1 sport=$2
	shift 2
	start_bg "$name" env APERIO_SERVER_TOKEN=bench-master-token-0123456789abcdef \
		"$BIN/aperio-client" "127.0.0.1:$DEMO_PORT" \
		--hostname "$VHOST" \
		--server-url "http://127.0.0.1:$sport" \
		--max-concurrent 256 \
		--log-level warn "$@"
	APERIO_CLIENT_PID=$BG_PID
}

# start_aperio NAME [FLAG...] starts aperio-server and an aperio-client
# (its log named NAME, with FLAGs added) and waits until a request goes
# through them. It sets APERIO_SERVER_PID, APERIO_CLIENT_PID and
# APERIO_SPORT; on failure it sets READY_ERR to the reason, with both
# logs, stops what it started and returns 1.
start_aperio() {
	local name=$1 sport
	shift
	free_port sport
	rm -rf "$TMP/data"
	mkdir -p "$TMP/data"
	start_bg aperio-server env \
		APERIO_SERVER_TOKEN=bench-master-token-0123456789abcdef \
		APERIO_HOST=127.0.0.1 \
		APERIO_PORT="$sport" \
		APERIO_DATA_DIR="$TMP/data" \
		APERIO_LOG_LEVEL=warn \
		APERIO_MAX_CONCURRENT_REQUESTS=1000 \
		APERIO_IP_LIMIT_MAX=100000000 \
		APERIO_IP_LIMIT_REFILL=100000000 \
		APERIO_MAX_BODY_SIZE=2GiB \
		"$BIN/aperio-server"
	APERIO_SERVER_PID=$BG_PID
	start_aperio_client "$name" "$sport" "$@"
	APERIO_SPORT=$sport
	if ! wait_ready "http://127.0.0.1:$sport/" "$READY_TIMEOUT" "$APERIO_SERVER_PID" "$APERIO_CLIENT_PID"; then
		READY_ERR="$READY_ERR; server: $(last_log aperio-server); client: $(last_log "$name")"
		stop_bg "$APERIO_CLIENT_PID" "$APERIO_SERVER_PID"
		return 1
	fi
}

# row_aperio ROW NAME [FLAG...] runs ROW's wrk runs through aperio-server
# and an aperio-client (its log NAME, with FLAGs added: the tcp transport
# for (c) tcp), both started for it and stopped after.
row_aperio() {
	local row=$1 name=$2
	shift 2
	if [[ -n $APERIO_SKIP ]]; then
		SKIP[$row]=$APERIO_SKIP
		return 0
	fi
	[[ -n ${SKIP[$row]:-} ]] && return 0
	if ! start_aperio "$name" "$@"; then
		SKIP[$row]="not ready: $READY_ERR"
		return 0
	fi
	bench_row "$row" "http://127.0.0.1:$APERIO_SPORT/" "aperio-server=$APERIO_SERVER_PID" "aperio-client=$APERIO_CLIENT_PID"
	stop_bg "$APERIO_CLIENT_PID" "$APERIO_SERVER_PID"
}

# aperio_once runs what is measured once, after the rounds: Aperio's idle
# RSS, the wrk row with a dashboard's live stream open, and the streamed
# transfers on each transport.
aperio_once() {
	if [[ -n ${SKIP[aperio]:-} ]]; then
		SKIP[aperio_sse]="skipped with (c) aperio"
		return 0
	fi
	if ! start_aperio aperio-client-once; then
		SKIP[aperio_sse]="not ready: $READY_ERR"
		STREAM_SKIP="not ready: $READY_ERR"
		return 0
	fi
	local sport=$APERIO_SPORT

	# Idle RSS: after startup plus one request and a 2 s settle.
	curl -s -o /dev/null -m 5 -H "Host: $VHOST" "http://127.0.0.1:$sport/" || true
	sleep 2
	IDLE_SERVER_KIB=$(rss_kb "$APERIO_SERVER_PID")
	IDLE_CLIENT_KIB=$(rss_kb "$APERIO_CLIENT_PID")
	IDLE_SERVER_ANON_KIB=$(status_kb "$APERIO_SERVER_PID" RssAnon)
	IDLE_CLIENT_ANON_KIB=$(status_kb "$APERIO_CLIENT_PID" RssAnon)

	# A dashboard open: one subscriber of the live stream
	# (GET /aperio/api/stream), receiving an access event per request.
	# One run: the rounds' spread of (c) is what it is read against.
	start_bg aperio-sse curl -sN -o /dev/null \
		-H "Authorization: Bearer bench-master-token-0123456789abcdef" \
		"http://127.0.0.1:$sport/aperio/api/stream?type=access"
	local sse_pid=$BG_PID
	sleep 0.5
	if kill -0 "$sse_pid" 2>/dev/null; then
		ROUND=1 bench_row aperio_sse "http://127.0.0.1:$sport/" "aperio-server=$APERIO_SERVER_PID" "aperio-client=$APERIO_CLIENT_PID"
		stop_bg "$sse_pid"
	else
		SKIP[aperio_sse]="the stream subscriber did not stay connected: $(last_log aperio-sse)"
	fi
	stream_aperio "$sport"

	stop_bg "$APERIO_CLIENT_PID"
	start_aperio_client aperio-client-once-tcp "$sport" --server-transport tcp
	if ! wait_ready "http://127.0.0.1:$sport/" "$READY_TIMEOUT" "$APERIO_SERVER_PID" "$APERIO_CLIENT_PID"; then
		STREAM_TCP_SKIP="not ready: $READY_ERR; client: $(last_log aperio-client-once-tcp)"
	else
		CHECK_BODY='' stream_transfer download_tcp stream_download "$sport"
		CHECK_BODY=$TMP/upload.json stream_transfer upload_tcp stream_upload "$sport"
	fi
	stop_bg "$APERIO_CLIENT_PID" "$APERIO_SERVER_PID"
}

declare -A STREAM_MBPS STREAM_SRV STREAM_CLI STREAM_FAIL
STREAM_SKIP=     # why no transfer ran
STREAM_TCP_SKIP= # why no transfer ran on the tcp transport

# stream_transfer KIND CMD... runs CMD (which prints "http_code size speed")
# while sampling the RSS of aperio-server and aperio-client, and records
# throughput and peak RSS growth for KIND. CHECK_BODY, when set, names a
# file whose content must be {"bytes":STREAM_BYTES}; otherwise size must be
# STREAM_BYTES.
stream_transfer() {
	local kind=$1 out code size speed sbefore cbefore ssamp csamp smax cmax
	shift
	sbefore=$(rss_kb "$APERIO_SERVER_PID")
	cbefore=$(rss_kb "$APERIO_CLIENT_PID")
	rss_sampler "$APERIO_SERVER_PID" "$TMP/rss-$kind-server" &
	ssamp=$!
	rss_sampler "$APERIO_CLIENT_PID" "$TMP/rss-$kind-client" &
	csamp=$!
	PIDS+=("$ssamp" "$csamp")
	log "aperio: streaming $kind of $STREAM_BYTES bytes"
	run_wait "$@" >"$LOG/stream-$kind.out" 2>"$LOG/stream-$kind.err" || true
	stop_bg "$ssamp" "$csamp"
	out=$(cat "$LOG/stream-$kind.out")
	smax=$(cat "$TMP/rss-$kind-server" 2>/dev/null || echo 0)
	cmax=$(cat "$TMP/rss-$kind-client" 2>/dev/null || echo 0)
	read -r code size speed <<<"$out" || true
	if [[ $code != 200 ]]; then
		STREAM_FAIL[$kind]="status ${code:-none} after $size bytes; $(head -c 120 "$LOG/stream-$kind.err" 2>/dev/null)"
		return 0
	fi
	if [[ -n ${CHECK_BODY:-} ]]; then
		# curl's size_upload counts chunked framing, so trust the origin's count.
		if [[ $(tr -d ' \n' <"$CHECK_BODY" 2>/dev/null) != "{\"bytes\":$STREAM_BYTES}" ]]; then
			STREAM_FAIL[$kind]="origin answered $(head -c 80 "$CHECK_BODY" 2>/dev/null)"
			return 0
		fi
	elif [[ $size != "$STREAM_BYTES" ]]; then
		STREAM_FAIL[$kind]="got $size of $STREAM_BYTES bytes"
		return 0
	fi
	STREAM_MBPS[$kind]=$(awk -v s="$speed" 'BEGIN { printf "%.1f", s / 1e6 }')
	STREAM_SRV[$kind]=$(kib_to_mib $((smax - sbefore)))
	STREAM_CLI[$kind]=$(kib_to_mib $((cmax - cbefore)))
}

# stream_download and stream_upload exec curl, so that run_wait's PID is
# curl itself and cleanup can stop a transfer midway.
stream_download() {
	exec curl -s -o /dev/null -m "$STREAM_MAX_TIME" -w '%{http_code} %{size_download} %{speed_download}' \
		-H "Host: $VHOST" "http://127.0.0.1:$1/bytes?n=$STREAM_BYTES"
}

stream_upload() {
	exec curl -s -T - -o "$TMP/upload.json" -m "$STREAM_MAX_TIME" -w '%{http_code} %{size_upload} %{speed_upload}' \
		-H "Host: $VHOST" "http://127.0.0.1:$1/upload" < <(head -c "$STREAM_BYTES" /dev/zero)
}

declare -A DIRECT_MBPS

# stream_direct makes the same transfers straight to aperio-demo: the
# figures Aperio's are read against.
stream_direct() {
	local kind code size speed
	for kind in download upload; do
		log "direct: streaming $kind of $STREAM_BYTES bytes"
		run_wait "stream_$kind" "$DEMO_PORT" >"$LOG/direct-$kind.out" 2>"$LOG/direct-$kind.err" || true
		read -r code size speed <"$LOG/direct-$kind.out" || true
		if [[ $code == 200 ]]; then
			DIRECT_MBPS[$kind]=$(awk -v s="$speed" 'BEGIN { printf "%.1f", s / 1e6 }')
		else
			DIRECT_MBPS[$kind]="failed (status ${code:-none})"
		fi
	done
}

stream_aperio() {
	local sport=$1
	CHECK_BODY='' stream_transfer download stream_download "$sport"
	CHECK_BODY=$TMP/upload.json stream_transfer upload stream_upload "$sport"
}

# ---------------------------------------------------------------------------
# Report.

ratio() { # ratio NUM DEN prints NUM/DEN as "1.23x", or "-"
	if [[ ! $1 =~ ^[0-9.]+$ || ! $2 =~ ^[0-9.]+$ || $2 == 0 ]]; then
		echo "-"
	else
		awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'
	fi
}

# stats VALUE... prints "median min max" of the numeric VALUEs ("-" for
# each when there is none); the median of an even count is the mean of
# the middle two.
stats() {
	printf '%s\n' "$@" | awk '
	/^[0-9.]+$/ { v[n++] = $1 + 0 }
	END {
		if (n == 0) { print "- - -"; exit }
		for (i = 1; i < n; i++) for (j = i; j > 0 && v[j-1] > v[j]; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
		m = (n % 2) ? v[int(n/2)] : (v[n/2-1] + v[n/2]) / 2
		printf "%s %s %s\n", m, v[0], v[n-1]
	}'
}

# fmt_num VALUE DECIMALS prints VALUE rounded, or "-".
fmt_num() {
	if [[ $1 =~ ^[0-9.]+$ ]]; then
		printf "%.${2}f" "$1"
	else
		echo "-"
	fi
}

# row_stats ROW CONNS sets, over the rounds that have figures, RUNS and
# the median and range of req/s (RPS_MED, RPS_RANGE), p50 and p99
# (medians) and CPU per request (CPU_MED, CPU_RANGE), and the sums of
# non-2xx and socket errors.
row_stats() {
	local row=$1 conns=$2 r key med lo hi
	local -a rps=() p50=() p99=() cpu=()
	RUNS=0 NON_SUM=0 ERR_SUM=0
	for ((r = 1; r <= ROUNDS; r++)); do
		key=$row,$conns,$r
		[[ -n ${RPS[$key]:-} ]] || continue
		RUNS=$((RUNS + 1))
		rps+=("${RPS[$key]}")
		p50+=("${P50[$key]}")
		p99+=("${P99[$key]}")
		cpu+=("${CPU[$key]}")
		NON_SUM=$((NON_SUM + ${NON2XX[$key]}))
		ERR_SUM=$((ERR_SUM + ${ERRS[$key]}))
	done
	read -r med lo hi <<<"$(stats "${rps[@]}")"
	RPS_MED=$(fmt_num "$med" 0) RPS_RANGE="$(fmt_num "$lo" 0)-$(fmt_num "$hi" 0)"
	read -r med lo hi <<<"$(stats "${p50[@]}")"
	P50_MED=$(fmt_num "$med" 3)
	read -r med lo hi <<<"$(stats "${p99[@]}")"
	P99_MED=$(fmt_num "$med" 3)
	read -r med lo hi <<<"$(stats "${cpu[@]}")"
	CPU_MED=$(fmt_num "$med" 0) CPU_RANGE="$(fmt_num "$lo" 0)-$(fmt_num "$hi" 0)"
}

# cpu_split ROW CONNS prints "name median, name median" of ROW's CPU per
# request by process, over the rounds that have figures.
cpu_split() {
	local row=$1 conns=$2 name r out= med lo hi
	local -a v
	for name in ${CPU_NAMES[$row]:-}; do
		v=()
		for ((r = 1; r <= ROUNDS; r++)); do
			[[ -n ${RPS[$row,$conns,$r]:-} ]] && v+=("${CPUP[$row,$conns,$r,$name]:-}")
		done
		read -r med lo hi <<<"$(stats "${v[@]}")"
		out+="${out:+, }$name $(fmt_num "$med" 0)"
	done
	echo "$out"
}

print_report() {
	local row label conns key r fails
	local -A labels=([direct]="(a) direct" [nginx]="(b) nginx" [caddy]="(b) caddy" [aperio]="(c) aperio" [aperio_sse]="(c) +stream" [aperio_tcp]="(c) tcp" [frp]="(d) frp")
	local -A med_rps
	echo
	echo "== HTTP GET / (19-byte body), wrk ${DURATION} per run after a ${WARMUP} warm-up at 64 conns;"
	echo "   $ROUNDS rounds, the rows alternating; median of the rounds, (min-max) their spread"
	printf '%-12s %5s %4s %8s %13s %8s %8s %7s %9s %7s %6s %7s %9s\n' row conns runs req/s "(min-max)" p50_ms p99_ms cpu_us "(min-max)" non-2xx errors vs_frp vs_direct
	# The medians first, for the ratios.
	for row in direct nginx caddy aperio aperio_tcp aperio_sse frp; do
		for conns in 1 64; do
			row_stats "$row" "$conns"
			med_rps[$row,$conns]=$RPS_MED
		done
	done
	for row in direct nginx caddy aperio aperio_tcp aperio_sse frp; do
		label=${labels[$row]}
		if [[ $row == aperio_* && -n ${SKIP[aperio]:-} ]]; then
			SKIP[$row]="skipped with (c) aperio"
		fi
		if [[ -n ${SKIP[$row]:-} ]]; then
			printf '%-12s skipped: %s\n' "$label" "${SKIP[$row]}"
			continue
		fi
		for conns in 1 64; do
			row_stats "$row" "$conns"
			fails=
			for ((r = 1; r <= ROUNDS; r++)); do
				key=$row,$conns,$r
				[[ -n ${FAIL[$key]:-} ]] && fails+="${fails:+; }round $r: ${FAIL[$key]}"
			done
			if ((RUNS == 0)); then
				printf '%-12s %5s failed: %s\n' "$label" "$conns" "${fails:-no run}"
				continue
			fi
			printf '%-12s %5s %4s %8s %13s %8s %8s %7s %9s %7s %6s %7s %9s\n' "$label" "$conns" "$RUNS" \
				"$RPS_MED" "($RPS_RANGE)" "$P50_MED" "$P99_MED" "$CPU_MED" "($CPU_RANGE)" "$NON_SUM" "$ERR_SUM" \
				"$(ratio "$RPS_MED" "${med_rps[frp,$conns]:-}")" \
				"$(ratio "$RPS_MED" "${med_rps[direct,$conns]:-}")"
			[[ -n $fails ]] && printf '%-12s %5s failed runs: %s\n' "" "" "$fails"
		done
	done
	echo "(c1 runs use wrk -t1: wrk needs connections >= threads; c64 runs use -t2."
	echo " cpu_us: CPU µs per request of the row's own processes (for (a), the backend's), utime+stime from /proc/PID/stat"
	echo " over the measured run; non-2xx and errors are summed over the runs; (c) +stream runs once, after the rounds)"
	echo
	echo "== CPU µs per request by process (median of the rounds)"
	for row in aperio aperio_tcp aperio_sse frp; do
		[[ -n ${SKIP[$row]:-} ]] && continue
		for conns in 1 64; do
			printf '%-12s %5s %s\n' "${labels[$row]}" "$conns" "$(cpu_split "$row" "$conns")"
		done
	done
	echo
	echo "== Aperio streaming, $STREAM_BYTES bytes each way via curl (MB/s = 10^6 bytes/s; RSS growth = peak VmRSS sampled every 100 ms minus VmRSS before)"
	if [[ -n ${SKIP[aperio]:-} || -n $STREAM_SKIP ]]; then
		echo "skipped: ${SKIP[aperio]:-$STREAM_SKIP}"
	else
		printf '%-12s %9s %12s %9s %18s %18s\n' direction MB/s direct_MB/s vs_direct server_rss_+MiB client_rss_+MiB
		for kind in download upload download_tcp upload_tcp; do
			if [[ $kind == *_tcp && -n $STREAM_TCP_SKIP ]]; then
				printf '%-12s skipped: %s\n' "$kind" "$STREAM_TCP_SKIP"
				continue
			fi
			if [[ -n ${STREAM_FAIL[$kind]:-} ]]; then
				printf '%-12s failed: %s\n' "$kind" "${STREAM_FAIL[$kind]}"
				continue
			fi
			printf '%-12s %9s %12s %9s %18s %18s\n' "$kind" "${STREAM_MBPS[$kind]}" "${DIRECT_MBPS[${kind%_tcp}]:--}" \
				"$(ratio "${STREAM_MBPS[$kind]}" "${DIRECT_MBPS[${kind%_tcp}]:-}")" "${STREAM_SRV[$kind]}" "${STREAM_CLI[$kind]}"
		done
		echo "(download/upload: the websocket transport, the default; *_tcp: server.transport tcp)"
	fi

	echo
	echo "== Aperio idle RSS (after startup, one request, 2 s settle)"
	if [[ -n ${SKIP[aperio]:-} || -n $STREAM_SKIP ]]; then
		echo "skipped: ${SKIP[aperio]:-$STREAM_SKIP}"
	else
		printf '%-14s %9s %10s %14s\n' process RSS_MiB anon_MiB binary_MiB
		printf '%-14s %9s %10s %14s\n' aperio-server "$(kib_to_mib "$IDLE_SERVER_KIB")" "$(kib_to_mib "$IDLE_SERVER_ANON_KIB")" \
			"$(kib_to_mib $(($(stat -c %s "$BIN/aperio-server") / 1024)))"
		printf '%-14s %9s %10s %14s\n' aperio-client "$(kib_to_mib "$IDLE_CLIENT_KIB")" "$(kib_to_mib "$IDLE_CLIENT_ANON_KIB")" \
			"$(kib_to_mib $(($(stat -c %s "$BIN/aperio-client") / 1024)))"
		echo "(RSS - anon = the binary's pages mapped in; docs/performance.md explains why they are most of it)"
	fi
}

# ---------------------------------------------------------------------------

print_header() {
	local frp_version="not built ($FRP_SKIP)"
	if [[ -z $FRP_SKIP ]]; then
		frp_version="$("$FRPS" --version 2>&1 | head -n 1 || true) (frps+frpc $FRP_VERSION)"
	fi
	local caddy_version="not built ($CADDY_SKIP)"
	if [[ -z $CADDY_SKIP ]]; then
		# Built from the module's own tree, caddy cannot tell its version.
		caddy_version="$CADDY_VERSION (cmd/caddy; reverse_proxy, keep-alive pool 256)"
	fi
	echo "== aperio bench, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "nproc:  $(nproc)"
	echo "load:   $LOADAVG_START (1/5/15 min load average when the script started; other work on the machine skews every figure)"
	echo "cpu:    $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1 || true)"
	echo "go:     $(go version)"
	echo "wrk:    $(wrk --version 2>&1 | head -n 1 | sed 's/ Copyright.*//' || true)"
	echo "nginx:  $(nginx -v 2>&1 | head -n 1 || true) (worker_processes auto)"
	echo "caddy:  $caddy_version"
	echo "frp:    $frp_version"
	echo "curl:   $(curl --version | head -n 1 | cut -d' ' -f1-2 || true)"
}

main() {
	local tool report=$TMP/report.txt
	LOADAVG_START=$(cut -d' ' -f1-3 /proc/loadavg)
	[[ $ROUNDS =~ ^[1-9][0-9]?$ ]] || die "BENCH_ROUNDS=$ROUNDS is not a count of 1 to 99"
	for tool in go wrk nginx curl ss awk getconf; do
		command -v "$tool" >/dev/null || die "$tool not found in PATH"
	done

	build_demo_and_aperio
	build_frp
	if [[ -n $FRP_SKIP ]]; then
		log "frp rows will be skipped: $FRP_SKIP"
	fi
	build_caddy
	if [[ -n $CADDY_SKIP ]]; then
		log "caddy rows will be skipped: $CADDY_SKIP"
	fi
	print_header | tee "$report"

	start_demo
	# The rows alternate, so that a slow minute of the shared machine
	# lands on one run of each rather than on all runs of one row.
	for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
		row_direct
		row_nginx
		row_caddy
		row_frp
		row_aperio aperio aperio-client
		row_aperio aperio_tcp aperio-client-tcp --server-transport tcp
	done
	ROUND=1
	aperio_once
	stream_direct
	print_report | tee -a "$report"

	# A copy for comparing runs; bench/out/ is git-ignored.
	mkdir -p "$ROOT/bench/out"
	cp "$report" "$ROOT/bench/out/latest.txt"
	log "report saved to bench/out/latest.txt"
}

main "$@"
