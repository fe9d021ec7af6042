#!/usr/bin/env bash
# Builds Aperio's container images on this machine, with no registry:
# every image is FROM scratch, built from a small temporary context that
# holds only the files it needs.
#
#   bash deploy/images/build.sh [IMAGE...]
#
# IMAGE is one of: server client provider postgres e2e-app e2e-oidc
# e2e-pebble (default: all but the e2e suite's e2e-app, e2e-oidc and
# e2e-pebble). Each image is tagged twice:
#
#   aperio-<image>:<hash>   hash = first 12 hex digits of the sha256 of its
#                           build context, so a repeat run with the same
#                           inputs finds the tag and skips the build
#   aperio-<image>:local    what deploy/docker-compose.yml runs
#
# It prints one line per image on stdout, "IMAGE=aperio-<image>:<hash>", with
# IMAGE the upper-case name and dashes as underscores (SERVER, E2E_APP,
# E2E_OIDC), ready for eval; progress goes to stderr.
#
# For a cluster: IMAGE_PREFIX (a registry and path, such as
# registry.example.com/team/) tags server, client and provider as well
# <IMAGE_PREFIX>aperio-<image>:<IMAGE_TAG>, IMAGE_TAG defaulting to
# VERSION without its "v" and with "+" as "-" (a Docker tag holds no "+"),
# which is the Helm chart's appVersion for a tagged release; IMAGE_PUSH=1
# pushes those tags. `make images IMAGE_PREFIX=... IMAGE_PUSH=1` does both.
#
# Needs: Go (binaries are built static, CGO_ENABLED=0), Docker, the host's
# CA bundle (/etc/ssl/certs/ca-certificates.crt, Debian's ca-certificates)
# and, for the postgres image, Debian's postgresql package: its binaries,
# share files and the shared libraries they load are copied into the image
# (the e2e-pebble image is made the same way from Debian's pebble).
# Missing Debian packages are installed with apt-get when running as root.
#
# Every image carries the OCI labels org.opencontainers.image.revision
# (COMMIT), .version (VERSION), .source, .title and .created (the commit's
# time, not the build's, so that the build context, and so the tag, stays
# the same for the same commit); the Go binaries are stamped with COMMIT
# too (internal/buildinfo.commit). COMMIT and VERSION default to git's
# view of the tree and may be set from outside (a build from an export).
set -euo pipefail
cd "$(dirname "$0")/../.."

GO=${GO:-go}
VERSION=${VERSION:-$(sh scripts/version.sh)}
COMMIT=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
CREATED=${CREATED:-$(git log -1 --format=%cI HEAD 2>/dev/null || echo 1970-01-01T00:00:00Z)}
SOURCE=https://github.com/aperio-dev/aperio
LDFLAGS="-s -w -X github.com/aperio-dev/aperio/internal/buildinfo.version=$VERSION -X github.com/aperio-dev/aperio/internal/buildinfo.commit=$COMMIT"
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt

# The unprivileged user every Aperio image runs as, and PostgreSQL's.
APERIO_UID=65532
PG_UID=999

log() { echo "images: $*" >&2; }
die() { log "$*"; exit 1; }

apt_install() {
  [ "$(id -u)" -eq 0 ] || die "missing Debian package(s) $*: install them or run as root"
  log "installing $*"
  # Only the binaries are wanted: no default PostgreSQL cluster.
  mkdir -p /etc/postgresql-common/createcluster.d
  echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/aperio-images.conf
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# gobuild OUT PKG builds one static binary.
gobuild() {
  CGO_ENABLED=0 "$GO" build -trimpath -ldflags "$LDFLAGS" -o "$1" "$2"
}

# base_context DIR lays out what every Aperio image has: the CA bundle, an
# /etc/passwd and /etc/group naming the unprivileged user, and a writable
# /tmp and /data owned by it.
base_context() {
  local dir=$1
  [ -r "$CA_BUNDLE" ] || apt_install ca-certificates
  mkdir -p "$dir/rootfs/etc/ssl/certs" "$dir/owned/tmp" "$dir/owned/data"
  cp "$CA_BUNDLE" "$dir/rootfs/etc/ssl/certs/ca-certificates.crt"
  echo "aperio:x:$APERIO_UID:$APERIO_UID:aperio:/data:/nonexistent" >"$dir/rootfs/etc/passwd"
  echo "aperio:x:$APERIO_UID:" >"$dir/rootfs/etc/group"
}

# content_hash DIR prints a hash of every file name, mode and byte in DIR.
content_hash() {
  (cd "$1" && find . -print0 | LC_ALL=C sort -z |
    xargs -0 stat -c '%n %a %F' && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) |
    sha256sum | cut -c1-12
}

# publish TAG NAME tags TAG as ${IMAGE_PREFIX}aperio-NAME:${IMAGE_TAG}
# when IMAGE_PREFIX is set, and pushes it when IMAGE_PUSH=1.
IMAGE_PREFIX=${IMAGE_PREFIX:-}
IMAGE_TAG=${IMAGE_TAG:-}
publish() {
  local tag=$1 name=$2 dest
  [ -n "$IMAGE_PREFIX" ] || return 0
  if [ -z "$IMAGE_TAG" ]; then
    IMAGE_TAG=${VERSION#v}
    IMAGE_TAG=${IMAGE_TAG//+/-}
  fi
  dest="${IMAGE_PREFIX}aperio-$name:$IMAGE_TAG"
  docker tag "$tag" "$dest"
  log "tagged $dest"
  if [ "${IMAGE_PUSH:-}" = 1 ]; then
    log "pushing $dest"
    docker push "$dest" >&2
  fi
}

# build NAME DIR builds DIR/Dockerfile as aperio-NAME unless an image with
# the same content hash exists, then tags it :local and prints the tag.
build() {
  local name=$1 dir=$2 hash tag var
  hash=$(content_hash "$dir")
  tag="aperio-$name:$hash"
  if docker image inspect "$tag" >/dev/null 2>&1; then
    log "$tag is up to date"
  else
    log "building $tag ($(du -sh "$dir" | cut -f1) context)"
    DOCKER_BUILDKIT=0 docker build -q -t "$tag" "$dir" >&2
  fi
  docker tag "$tag" "aperio-$name:local"
  case $name in
  server | client | provider) publish "$tag" "$name" ;;
  esac
  var=$(echo "$name" | tr 'a-z-' 'A-Z_')
  echo "$var=$tag"
}

# The Docker health checks. A scratch image has no shell or curl, so each
# binary checks itself; the probe runs in the container with its
# environment and working directory, and so reads the same configuration.
# The server GETs its own /aperio/readyz (3 s timeout, 503 while it drains);
# the client asks the running client over its status socket (in /tmp),
# which says the process is up, not that a tunnel is (docs/docker.md).
# Docker 20.10 runs the first check one interval after the start.
SERVER_HEALTHCHECK='HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 CMD ["/aperio-server", "--healthcheck"]'
CLIENT_HEALTHCHECK='HEALTHCHECK --interval=10s --timeout=6s --start-period=10s --retries=3 CMD ["/aperio-client", "status", "--require-connected"]'
# The e2e app's instances live for seconds: check them every 2 s.
E2E_APP_HEALTHCHECK='HEALTHCHECK --interval=2s --timeout=6s --retries=3 CMD ["/aperio-client", "status", "--require-connected"]'
# The e2e OpenID provider fetches its own discovery document (3 s timeout).
E2E_OIDC_HEALTHCHECK='HEALTHCHECK --interval=2s --timeout=5s --retries=3 CMD ["/oidcprovider", "--healthcheck"]'

# aperio_image NAME BINARY PKG PORT [HEALTHCHECK] builds a one-binary image,
# with HEALTHCHECK (a Dockerfile line) when given.
aperio_image() {
  local name=$1 bin=$2 pkg=$3 port=$4 health=${5:-} dir="$work/$1"
  base_context "$dir"
  gobuild "$dir/rootfs/$bin" "$pkg"
  scratch_dockerfile "$dir" "EXPOSE $port
$health
ENTRYPOINT [\"/$bin\"]"
  build "$name" "$dir"
}

# oci_labels NAME prints the Dockerfile LABEL line of image NAME. It is
# part of the Dockerfile, so of the hashed build context: a new commit or
# version makes a new tag.
oci_labels() {
  printf 'LABEL org.opencontainers.image.title="aperio-%s" org.opencontainers.image.source="%s" org.opencontainers.image.revision="%s" org.opencontainers.image.version="%s" org.opencontainers.image.created="%s"\n' \
    "$1" "$SOURCE" "$COMMIT" "$VERSION" "$CREATED"
}

# scratch_dockerfile DIR LINES writes DIR/Dockerfile: the non-root scratch
# base every Aperio image shares, the image's own LINES, then its labels
# (the image is named after DIR). The labels come last so that a new
# commit with the same files reuses the COPY layers.
scratch_dockerfile() {
  cat >"$1/Dockerfile" <<EOF
FROM scratch
COPY rootfs/ /
COPY --chown=$APERIO_UID:$APERIO_UID owned/ /
USER $APERIO_UID:$APERIO_UID
WORKDIR /data
ENV HOME=/data
$2
$(oci_labels "$(basename "$1")")
EOF
}

server_image() {
  # The server listens on 0.0.0.0:8080 by default and keeps its embedded
  # store in ./data, which is /data/data here (a volume in the compose file).
  aperio_image server aperio-server ./cmd/aperio-server 8080 "$SERVER_HEALTHCHECK"
}

client_image() {
  aperio_image client aperio-client ./cmd/aperio-client 8080 "$CLIENT_HEALTHCHECK"
}

provider_image() {
  aperio_image provider aperio-docker-provider ./examples/docker-provider 9000
}

# e2e_app_image: the test suite's app, aperio-client beside a backend
# (test/e2eapp supervises both, since a scratch image has no shell).
e2e_app_image() {
  local dir="$work/e2e-app"
  base_context "$dir"
  gobuild "$dir/rootfs/aperio-client" ./cmd/aperio-client
  gobuild "$dir/rootfs/e2eapp" ./test/e2eapp
  scratch_dockerfile "$dir" "$E2E_APP_HEALTHCHECK
ENTRYPOINT [\"/e2eapp\", \"--client\", \"/aperio-client\"]"
  build e2e-app "$dir"
}

# e2e_oidc_image: the test suite's OpenID provider (test/oidcprovider,
# mockoidc behind a fixed issuer). Test-only: no product image carries it.
e2e_oidc_image() {
  aperio_image e2e-oidc oidcprovider ./test/oidcprovider 9400 "$E2E_OIDC_HEALTHCHECK"
}

# copy_with_libs ROOT FILE... copies each FILE and every shared library it
# loads (as ldd resolves them on this host) into ROOT at the same paths.
copy_with_libs() {
  local root=$1 f lib
  shift
  for f in "$@"; do
    mkdir -p "$root$(dirname "$f")"
    cp -L "$f" "$root$f"
    { ldd "$f" 2>/dev/null || true; } | { grep -oE '/[^ ]+' || true; } | while read -r lib; do
      [ -e "$root$lib" ] && continue
      mkdir -p "$root$(dirname "$lib")"
      cp -L "$lib" "$root$lib"
    done
  done
}

# postgres_image: PostgreSQL from the host's Debian package. The binaries,
# share files and the shared libraries ldd lists; /bin/sh (dash, which
# initdb runs postgres through); the UTC zone; a postgres user; and an
# entrypoint script that runs initdb on first start.
postgres_image() {
  local dir="$work/postgres" pgdir root f
  pgdir=$(ls -d /usr/lib/postgresql/*/ 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -z "$pgdir" ] || [ ! -x "$pgdir/bin/initdb" ]; then
    apt_install postgresql
    pgdir=$(ls -d /usr/lib/postgresql/*/ | sort -V | tail -n 1)
  fi
  pgdir=${pgdir%/}
  local major=${pgdir##*/}
  root="$dir/rootfs"
  mkdir -p "$root/bin" "$root/etc" "$root/usr/share/zoneinfo" "$dir/owned/var/lib/postgresql/data" \
    "$dir/owned/var/run/postgresql" "$dir/owned/tmp"
  # The JIT pulls in LLVM (hundreds of MB); the image runs with jit=off.
  local files=("$pgdir/bin/postgres" "$pgdir/bin/initdb" "$pgdir/bin/pg_ctl" "$pgdir/bin/pg_isready")
  for f in "$pgdir"/lib/*.so; do
    case $f in */llvmjit*) continue ;; esac
    files+=("$f")
  done
  copy_with_libs "$root" "${files[@]}" /bin/dash
  ln -s dash "$root/bin/sh"
  mkdir -p "$root/usr/share/postgresql"
  cp -r "/usr/share/postgresql/$major" "$root/usr/share/postgresql/"
  cp -L /usr/share/zoneinfo/UTC "$root/usr/share/zoneinfo/UTC"
  mkdir -p "$root/usr/share/zoneinfo/Etc"
  cp -L /usr/share/zoneinfo/UTC "$root/usr/share/zoneinfo/Etc/UTC"
  echo "postgres:x:$PG_UID:$PG_UID:PostgreSQL:/var/lib/postgresql:/bin/sh" >"$root/etc/passwd"
  echo "postgres:x:$PG_UID:" >"$root/etc/group"
  cat >"$root/entrypoint.sh" <<EOF
#!/bin/sh
# First start: create the cluster with the password from POSTGRES_PASSWORD
# (default "aperio") and let every host on the network log in with it.
set -e
export PGDATA=/var/lib/postgresql/data/pgdata
if [ ! -s "\$PGDATA/PG_VERSION" ]; then
  echo "\${POSTGRES_PASSWORD:-aperio}" >/tmp/pwfile
  $pgdir/bin/initdb -D "\$PGDATA" -U "\${POSTGRES_USER:-aperio}" --pwfile=/tmp/pwfile \\
    --auth-local=trust --auth-host=scram-sha-256 --locale=C --encoding=UTF8 >/dev/null
  : >/tmp/pwfile
  echo "host all all all scram-sha-256" >>"\$PGDATA/pg_hba.conf"
fi
exec $pgdir/bin/postgres -D "\$PGDATA" -c listen_addresses='*' -c jit=off \\
  -c unix_socket_directories=/var/run/postgresql "\$@"
EOF
  chmod 755 "$root/entrypoint.sh"
  cat >"$dir/Dockerfile" <<EOF
FROM scratch
COPY rootfs/ /
COPY --chown=$PG_UID:$PG_UID owned/ /
USER $PG_UID:$PG_UID
ENV TZ=UTC PATH=$pgdir/bin:/bin
EXPOSE 5432
STOPSIGNAL SIGINT
HEALTHCHECK --interval=2s --timeout=2s --retries=30 CMD ["$pgdir/bin/pg_isready", "-h", "/var/run/postgresql", "-U", "aperio", "-d", "postgres", "-q"]
ENTRYPOINT ["/entrypoint.sh"]
$(oci_labels postgres)
EOF
  build postgres "$dir"
}

# e2e_pebble_image: Pebble, the ACME test CA, from the host's Debian
# package (its binary and the libraries ldd lists), for the e2e suite's
# ACME scenario only. Its configuration is in the image; the certificate
# and key of its own HTTPS API are not: the suite makes them at each run
# (for the name "pebble") and mounts them at /certs, so that no private
# key sits in an image and the build context stays the same from run to
# run. Pebble validates challenges on the ACME servers' ports (8080 for
# HTTP-01, 8443 for TLS-ALPN-01) and resolves names with Docker's embedded
# DNS, which knows the compose network's aliases. PEBBLE_VA_NOSLEEP drops
# its random wait before validating; PEBBLE_WFE_NONCEREJECT=0 stops it
# rejecting good nonces at random, and PEBBLE_AUTHZREUSE=0 reusing
# authorizations, so that every order really validates. Its certificates
# live 90 s (certificateValidityPeriod), so that the suite sees one
# renewed within a step (test/acme_test.go, pebbleValidity).
e2e_pebble_image() {
  local dir="$work/e2e-pebble"
  [ -x /usr/bin/pebble ] || apt_install pebble
  base_context "$dir"
  copy_with_libs "$dir/rootfs" /usr/bin/pebble
  mkdir -p "$dir/rootfs/etc/pebble"
  cat >"$dir/rootfs/etc/pebble/pebble.json" <<'EOF'
{"pebble": {
  "listenAddress": "0.0.0.0:14000",
  "managementListenAddress": "0.0.0.0:15000",
  "certificate": "/certs/cert.pem",
  "privateKey": "/certs/key.pem",
  "httpPort": 8080,
  "tlsPort": 8443,
  "ocspResponderURL": "",
  "externalAccountBindingRequired": false,
  "certificateValidityPeriod": 90
}}
EOF
  scratch_dockerfile "$dir" 'ENV PEBBLE_VA_NOSLEEP=1 PEBBLE_WFE_NONCEREJECT=0 PEBBLE_AUTHZREUSE=0
EXPOSE 14000 15000
ENTRYPOINT ["/usr/bin/pebble", "-config", "/etc/pebble/pebble.json", "-dnsserver", "127.0.0.11:53"]'
  build e2e-pebble "$dir"
}

images=("$@")
[ ${#images[@]} -gt 0 ] || images=(server client provider postgres)
for image in "${images[@]}"; do
  case $image in
  server) server_image ;;
  client) client_image ;;
  provider) provider_image ;;
  postgres) postgres_image ;;
  e2e-app) e2e_app_image ;;
  e2e-oidc) e2e_oidc_image ;;
  e2e-pebble) e2e_pebble_image ;;
  *) die "unknown image $image (server, client, provider, postgres, e2e-app, e2e-oidc, e2e-pebble)" ;;
  esac
done
