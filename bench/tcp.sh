#!/usr/bin/env bash
# bench/tcp.sh: throughput of a public TCP port (#23), side by side with
# the same transfer straight to the backend, in one run on this machine.
# It builds aperio-server, aperio-client and bench/tcpbench, starts a
# tcpbench sink, a server with one port in tcp_port_range and a client in
# quick mode (`aperio-client tcp`), then moves BYTES up (visitor to
# backend, half-closed, the backend counts) and down (backend to
# visitor), direct and through the tunnel, and prints one table.
#
#   bash bench/tcp.sh [BYTES]        default 1073741824 (1 GiB)
#
# Everything listens on 127.0.0.1; an EXIT trap stops what it started.
set -euo pipefail

BYTES=${1:-1073741824}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/aperio-tcpbench.XXXXXX")
PIDS=()
cleanup() {
	local p
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$TMP"
}
trap cleanup EXIT
log() { echo "bench-tcp: $*" >&2; }

# free_port VAR sets VAR to a port nothing on 127.0.0.1 listens on now
# and that no earlier call picked.
USED=" "
free_port() {
	local p i
	for ((i = 0; i < 200; i++)); do
		p=$((20000 + RANDOM % 12768))
		if [[ $USED != *" $p "* && -z $(ss -Htan "( sport = :$p )" 2>/dev/null) ]]; then
			USED+="$p "
			printf -v "$1" '%s' "$p"
			return 0
		fi
	done
	log "no free port"
	exit 1
}

# wait_port PORT waits up to 20 s for something to accept on it.
wait_port() {
	local deadline=$((SECONDS + 20))
	until (: </dev/tcp/127.0.0.1/"$1") 2>/dev/null; do
		if ((SECONDS >= deadline)); then
			log "nothing listens on $1 after 20 s"; sed -n '1,40p' "$TMP"/*.log >&2; exit 1
		fi
		sleep 0.1
	done
}

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

log "building"
CGO_ENABLED=0 go build -o "$TMP/" ./cmd/aperio-server ./cmd/aperio-client ./bench/tcpbench

free_port SINK
free_port SPORT
free_port PUB
"$TMP/tcpbench" serve "127.0.0.1:$SINK" & PIDS+=($!)
TOKEN=bench-tcp-master-0123456789abcdef
APERIO_SERVER_TOKEN=$TOKEN APERIO_HOST=127.0.0.1 APERIO_PORT=$SPORT APERIO_DATA_DIR="$TMP/data" \
	APERIO_TCP_PORT_RANGE=$PUB APERIO_LOG_LEVEL=warn "$TMP/aperio-server" 2>"$TMP/server.log" & PIDS+=($!)
SERVER_PID=$!
wait_port "$SPORT"
"$TMP/aperio-client" tcp "127.0.0.1:$SINK" --remote-port "$PUB" --server-url "http://127.0.0.1:$SPORT" \
	--server-token "$TOKEN" --log-level info 2>"$TMP/client.log" & PIDS+=($!)
CLIENT_PID=$!
wait_port "$SINK"
wait_port "$PUB"
log "idle RSS: server $(rss_kib $SERVER_PID) KiB, client $(rss_kib $CLIENT_PID) KiB"

declare -A MBPS
for path in direct aperio; do
	port=$SINK
	[[ $path == aperio ]] && port=$PUB
	for dir in up down; do
		log "$path $dir: $BYTES bytes"
		read -r got secs mbps < <("$TMP/tcpbench" "$dir" "127.0.0.1:$port" "$BYTES")
		[[ $got == "$BYTES" ]] || { log "$path $dir moved $got of $BYTES bytes"; exit 1; }
		MBPS[$path-$dir]=$mbps
	done
done
SRV_RSS=$(rss_kib $SERVER_PID) CLI_RSS=$(rss_kib $CLIENT_PID)

echo
echo "== public TCP port, $BYTES bytes each way, one connection (MB/s = 10^6 bytes/s)"
printf '%-8s %10s %10s\n' path up_MB/s down_MB/s
for path in direct aperio; do
	printf '%-8s %10s %10s\n' "$path" "${MBPS[$path-up]}" "${MBPS[$path-down]}"
done
printf '%-8s %10s %10s\n' ratio \
	"$(awk -v a="${MBPS[aperio-up]}" -v b="${MBPS[direct-up]}" 'BEGIN { printf "%.2f", a / b }')" \
	"$(awk -v a="${MBPS[aperio-down]}" -v b="${MBPS[direct-down]}" 'BEGIN { printf "%.2f", a / b }')"
echo "RSS after the transfers: server $((SRV_RSS / 1024)) MiB, client $((CLI_RSS / 1024)) MiB"
