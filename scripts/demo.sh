#!/usr/bin/env bash
# Runs Aperio end to end on this machine: a demo backend, aperio-server on
# its embedded store, and aperio-client publishing the backend as
# demo.localhost. Visit http://demo.localhost:$PORT/ (any *.localhost name
# resolves to this machine). Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."

PORT=${PORT:-8080}
BIN=${BIN:-bin}

# port_taken says whether something holds 127.0.0.1:$1: a bind (python3's)
# also sees a port bound and not listening; without python3, a connect
# sees a listener.
port_taken() {
  if command -v python3 >/dev/null 2>&1; then
    ! python3 -c 'import socket,sys; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null
  else
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
  fi
}

# A port already in use would leave the server unable to listen while the
# rest of the demo talks to whatever holds it: stop here instead, before
# anything is built or started. --check-port stops after this check
# (make demo runs it before the build).
if port_taken "$PORT"; then
  echo "demo: port $PORT on 127.0.0.1 is in use; stop what holds it, or pick another port: PORT=9000 make demo" >&2
  exit 1
fi
if [ "${1:-}" = --check-port ]; then
  exit 0
fi

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 3000; }
BACKEND_PORT=$(free_port)
TOKEN=demo-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')

"$BIN/aperio-demo" --listen "127.0.0.1:$BACKEND_PORT" &
pids+=($!)
APERIO_SERVER_TOKEN=$TOKEN APERIO_PORT=$PORT APERIO_HOST=127.0.0.1 APERIO_DATA_DIR="$work/data" \
  "$BIN/aperio-server" &
server_pid=$!
pids+=($server_pid)
APERIO_SERVER_TOKEN=$TOKEN "$BIN/aperio-client" "127.0.0.1:$BACKEND_PORT" --hostname demo.localhost \
  --server-url "http://127.0.0.1:$PORT" &
pids+=($!)

url="http://127.0.0.1:$PORT/"
for _ in $(seq 1 100); do
  code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Host: demo.localhost' "$url" || true)
  [ "$code" = 200 ] && break
  kill -0 "$server_pid" 2>/dev/null || { echo "demo: aperio-server exited; see its log above" >&2; exit 1; }
  sleep 0.1
done
if [ "$code" != 200 ]; then
  echo "demo: no answer through the tunnel after 10 s (last status $code)" >&2
  exit 1
fi
echo
echo "== a request through the tunnel: curl -H 'Host: demo.localhost' $url"
curl -s -H 'Host: demo.localhost' "$url"
echo "== what the backend saw: curl -H 'Host: demo.localhost' ${url}echo"
curl -s -H 'Host: demo.localhost' "${url}echo"
echo
echo "Aperio is running: open http://demo.localhost:$PORT/ in a browser, or"
echo "  curl -H 'Host: demo.localhost' $url"
echo
echo "Dashboard: http://127.0.0.1:$PORT/aperio/"
echo "  log in with the master token: $TOKEN"
echo "Press Ctrl-C to stop."
wait
