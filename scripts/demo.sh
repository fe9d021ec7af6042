#!/usr/bin/env bash
# Runs Aperio end to end on this machine: a demo backend, aperio-server on
# its embedded store, and aperio-client publishing the backend as
# demo.localhost with a scoped token, then a cold start from zero of
# app.localhost, whose instance the demo origin (playing the scaling
# provider) starts when the server asks. Visit http://demo.localhost:$PORT/
# (any *.localhost name resolves to this machine). Ctrl-C stops everything.
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

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo "$1"; }
BACKEND_PORT=$(free_port 3000)
APP_PORT=$(free_port 3001)
TOKEN=demo-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
PROVIDER_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
server="http://127.0.0.1:$PORT"
bin=$(cd "$BIN" && pwd)

# wait_for WHAT CMD...: runs CMD every 0.1 s until it succeeds, for at
# most 10 s; stops the demo if the server exited meanwhile.
wait_for() {
  local what=$1; shift
  for _ in $(seq 1 100); do
    "$@" && return 0
    kill -0 "$server_pid" 2>/dev/null || { echo "demo: aperio-server exited; see its log above" >&2; exit 1; }
    sleep 0.1
  done
  echo "demo: $what: nothing after 10 s" >&2
  exit 1
}

# The server, on its embedded store, with autoscaling on; the demo's
# provider is plain http on loopback, which the server calls only when
# told it may.
APERIO_SERVER_TOKEN=$TOKEN APERIO_PORT=$PORT APERIO_HOST=127.0.0.1 APERIO_DATA_DIR="$work/data" \
  APERIO_SCALING=true APERIO_SCALING_ALLOW_HTTP=true APERIO_SCALING_ALLOW_PRIVATE=true \
  "$bin/aperio-server" &
server_pid=$!
pids+=($server_pid)
wait_for "the server's readyz" sh -c "[ \"\$(curl -s -o /dev/null -w '%{http_code}' $server/aperio/readyz)\" = 200 ]"

# The clients get a scoped token: the master token administers
# everything and stays with the operator (the API calls below).
SCOPED=$(APERIO_API_KEY=$TOKEN "$bin/aperio-client" api tokens create --name demo \
  --hostname demo.localhost --hostname app.localhost --server-url "$server" 2>/dev/null | awk '$1 == "token" {print $2}')
[ -n "$SCOPED" ] || { echo "demo: could not mint a client token" >&2; exit 1; }

# The demo origin serves demo.localhost and plays the scaling provider:
# POST /scale runs instance.sh, which starts app.localhost's backend and
# its client, in a process group the origin stops when it stops.
{
  echo '#!/bin/sh'
  echo "\"$bin/aperio-demo\" --listen 127.0.0.1:$APP_PORT &"
  echo "exec env APERIO_SERVER_TOKEN=$SCOPED APERIO_NAME=app-instance \"$bin/aperio-client\" 127.0.0.1:$APP_PORT --hostname app.localhost --server-url $server"
} >"$work/instance.sh"
chmod +x "$work/instance.sh"
DEMO_PROVIDER_SECRET=$PROVIDER_SECRET "$bin/aperio-demo" --listen "127.0.0.1:$BACKEND_PORT" --provider-run "$work/instance.sh" &
pids+=($!)
APERIO_SERVER_TOKEN=$SCOPED "$bin/aperio-client" "127.0.0.1:$BACKEND_PORT" --hostname demo.localhost \
  --server-url "$server" &
pids+=($!)

url="$server/"
# Ready once the server lists the client (asking the admin API, not the
# hostname, so no 502 from before the client connected reaches the log).
wait_for "the client to connect" sh -c "curl -sf -H 'Authorization: Bearer $TOKEN' $server/aperio/api/clients | grep -q '\"demo.localhost\"'"
echo
echo "== the client's token may bind demo.localhost and app.localhost only:"
echo "   aperio-client api tokens create --name demo --hostname demo.localhost --hostname app.localhost"
echo "== a request through the tunnel: curl -H 'Host: demo.localhost' $url"
curl -s -H 'Host: demo.localhost' "$url"
echo "== what the backend saw: curl -H 'Host: demo.localhost' ${url}echo"
curl -s -H 'Host: demo.localhost' "${url}echo"
echo

# A cold start from zero: app.localhost gets a scaling record and has no
# instance. The server holds the first request, calls the provider, and
# answers once the instance it started has connected.
echo "== autoscaling, armed with no instance running:"
echo "   aperio-client api scaling create app.localhost --url http://127.0.0.1:$BACKEND_PORT/scale --min 0 --max 1"
printf '%s' "$PROVIDER_SECRET" >"$work/provider.secret"
if ! APERIO_API_KEY=$TOKEN "$bin/aperio-client" api scaling create app.localhost --server-url "$server" \
  --url "http://127.0.0.1:$BACKEND_PORT/scale" --secret-file "$work/provider.secret" --min 0 --max 1 --cold-start 30s >/dev/null; then
  echo "demo: could not arm app.localhost" >&2
  exit 1
fi
echo "== a cold start: curl -H 'Host: app.localhost' $url"
curl -s -w '(%{http_code} after %{time_total} s: the server held the request and called the provider,\n which started an instance; the answer came once it had connected)\n' \
  -H 'Host: app.localhost' "$url"
echo
echo "Aperio is running: open http://demo.localhost:$PORT/ or http://app.localhost:$PORT/"
echo "in a browser, or curl -H 'Host: demo.localhost' $url"
echo
echo "Dashboard: http://127.0.0.1:$PORT/aperio/"
echo "  log in with the master token: $TOKEN"
echo "Press Ctrl-C to stop."
wait
