#!/usr/bin/env bash
# Throwaway PostgreSQL for the store tests: a private cluster in a temp dir,
# listening on a random free port on 127.0.0.1, with its socket in that dir.
#
#   eval "$(bash scripts/postgres-test.sh start)"   # exports APERIO_TEST_POSTGRES_DSN and APERIO_TEST_PG_DIR
#   go test -race ./store/...
#   bash scripts/postgres-test.sh stop "$APERIO_TEST_PG_DIR"
#
# Subcommands:
#   start      install Debian's postgresql if initdb is missing, create and
#              start a cluster, print the export lines (stdout; all else
#              goes to stderr)
#   stop DIR   stop the cluster in DIR and remove DIR (a DIR that is gone is
#              not an error)
#   down DIR   stop the server but keep its files (outage tests)
#   up DIR     start it again on the same port
#
# Works as root (the server runs as the postgres user through runuser, since
# PostgreSQL refuses to run as root) and as an ordinary user (the server runs
# as that user). Never touches a cluster it did not create: DIR must hold the
# marker file that start writes.
set -euo pipefail

marker=.aperio-pg-test

log() { echo "postgres-test: $*" >&2; }
die() { log "$*"; exit 1; }

# pgbin prints the bin directory of the newest installed PostgreSQL.
pgbin() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$d" ] && [ -x "$d/initdb" ]; then
    echo "$d"
    return
  fi
  if command -v initdb >/dev/null 2>&1; then
    dirname "$(readlink -f "$(command -v initdb)")"
    return
  fi
  return 1
}

install_postgres() {
  [ "$(id -u)" -eq 0 ] || die "initdb not found and not root: install Debian's postgresql package"
  log "initdb not found: installing Debian's postgresql package"
  # Only the binaries are wanted: no default cluster on port 5432.
  mkdir -p /etc/postgresql-common/createcluster.d
  echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/aperio-test.conf
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
}

# as_owner runs a command as the user that owns the cluster.
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# port_busy succeeds when something accepts connections on 127.0.0.1:$1.
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

check_dir() {
  local dir=$1
  [ -f "$dir/$marker" ] || die "$dir is not a cluster made by this script (no $marker)"
}

# start_failed runs when start fails: it removes the half-made cluster and
# prints `false`, so that `eval "$(… start)"` fails too instead of going on
# with no server.
start_failed() {
  local rc=$?
  trap - EXIT
  if [ "$rc" -ne 0 ]; then
    if [ -n "${dir:-}" ] && [ -f "$dir/$marker" ]; then
      [ -f "$dir/server.log" ] && tail -n 20 "$dir/server.log" >&2
      stop "$dir" || true
    fi
    echo "false # postgres-test.sh start failed"
  fi
  exit "$rc"
}

start() {
  local bin port tries
  dir=
  trap start_failed EXIT
  bin=$(pgbin) || { install_postgres; bin=$(pgbin) || die "initdb still missing after install"; }
  if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin postgres
  fi

  dir=$(mktemp -d "${TMPDIR:-/tmp}/aperio-pg.XXXXXX")
  touch "$dir/$marker"
  chmod 0755 "$dir"
  if [ "$(id -u)" -eq 0 ]; then chown postgres: "$dir"; fi

  as_owner "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C --no-sync >"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log" >&2; die "initdb failed"; }

  for tries in 1 2 3 4 5 6 7 8 9 10; do
    port=$(( 20000 + RANDOM % 40000 ))
    port_busy "$port" && continue
    # Test-only settings: durability is worth nothing here, speed is.
    cat >"$dir/data/postgresql.auto.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
    if [ "$(id -u)" -eq 0 ]; then chown postgres: "$dir/data/postgresql.auto.conf"; fi
    if as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >&2; then
      break
    fi
    log "start on port $port failed (attempt $tries); trying another port"
    port=
  done
  [ -n "${port:-}" ] || die "could not start postgres"
  echo "$port" >"$dir/port"

  for tries in $(seq 1 100); do
    if "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -U postgres; then
      echo "export APERIO_TEST_POSTGRES_DSN='postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable'"
      echo "export APERIO_TEST_PG_DIR='$dir'"
      echo "# stop with: bash scripts/postgres-test.sh stop '$dir'"
      log "postgres listening on 127.0.0.1:$port (dir $dir)"
      trap - EXIT
      return
    fi
    sleep 0.1
  done
  die "postgres on port $port did not accept connections"
}

down() {
  local dir=$1 bin
  check_dir "$dir"
  bin=$(pgbin) || die "initdb not found"
  if [ -f "$dir/data/postmaster.pid" ]; then
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >&2
  fi
}

up() {
  local dir=$1 bin
  check_dir "$dir"
  bin=$(pgbin) || die "initdb not found"
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >&2
}

stop() {
  local dir=$1
  if [ ! -e "$dir" ]; then
    log "$dir is already gone"
    return
  fi
  check_dir "$dir"
  if [ -f "$dir/data/postmaster.pid" ]; then
    down "$dir" || log "stop failed; removing $dir anyway"
  fi
  rm -rf "$dir"
}

cmd=${1:-}
case "$cmd" in
start) start ;;
stop | down | up)
  [ $# -eq 2 ] && [ -n "$2" ] || die "usage: $0 $cmd DIR"
  "$cmd" "$2"
  ;;
*)
  echo "usage: $0 start | stop DIR | down DIR | up DIR" >&2
  exit 2
  ;;
esac
