#!/usr/bin/env bash
# Runs Aperio end to end on this machine: a demo backend, aperio-server on
# its embedded store, and aperio-client publishing the backend as
# demo.localhost. Visit http://demo.localhost:$PORT/ (any *.localhost name
# resolves to this machine). Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."

PORT=${PORT:-8080}
BIN=${BIN:-bin}
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
pids+=($!)
APERIO_SERVER_TOKEN=$TOKEN "$BIN/aperio-client" "127.0.0.1:$BACKEND_PORT" --hostname demo.localhost \
  --server-url "http://127.0.0.1:$PORT" &
pids+=($!)

url="http://127.0.0.1:$PORT/"
for _ in $(seq 1 100); do
  code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Host: demo.localhost' "$url" || true)
  [ "$code" = 200 ] && break
  sleep 0.1
done
echo
echo "== a request through the tunnel: curl -H 'Host: demo.localhost' $url"
curl -s -H 'Host: demo.localhost' "$url"
echo "== what the backend saw: curl -H 'Host: demo.localhost' ${url}echo"
curl -s -H 'Host: demo.localhost' "${url}echo"
echo
echo "Aperio is running: open http://demo.localhost:$PORT/ in a browser, or"
echo "  curl -H 'Host: demo.localhost' $url"
echo "Press Ctrl-C to stop."
wait
