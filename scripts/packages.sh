#!/usr/bin/env bash
# scripts/packages.sh: `make packages`. Linux packages in dist/packages:
# .deb and .rpm of both binaries for amd64 and arm64, with hardened
# systemd units, man pages and shell completions (generated once from the
# command trees, internal/clidoc) and the licenses of what the binaries
# link (deploy/packages). Each step is printed with the time since the
# start, so a slow one shows; each binary is built once per
# architecture.
#
# Environment (the Makefile passes them): GO, BIN, VERSION, LDFLAGS.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
BIN=${BIN:-bin}
VERSION=${VERSION:-$(sh scripts/version.sh)}
LDFLAGS=${LDFLAGS:-}
start=$(date +%s)
step() { printf 'packages: [%4ss] %s\n' "$(( $(date +%s) - start ))" "$*" >&2; }

step "version $VERSION; man pages and completions, once for both architectures"
rm -rf "$BIN/docs"
"$GO" run -ldflags "$LDFLAGS" ./cmd/aperio-server __gendocs "$BIN/docs"
"$GO" run -ldflags "$LDFLAGS" ./cmd/aperio-client __gendocs "$BIN/docs"
for arch in amd64 arm64; do
	dir="$BIN/linux_$arch"
	mkdir -p "$dir"
	step "linux/$arch: building aperio-server and aperio-client"
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch "$GO" build -trimpath -ldflags "$LDFLAGS -buildid=" -o "$dir/" ./cmd/aperio-server ./cmd/aperio-client
	step "linux/$arch: the licenses of what they link"
	"$GO" run ./deploy/release -targets "linux/$arch" -licenses "$dir/LICENSE-THIRD-PARTY.txt"
	rm -rf "$dir/docs" && cp -R "$BIN/docs" "$dir/docs"
	step "linux/$arch: .deb and .rpm"
	abs=$(realpath "$dir")
	out=$(realpath -m dist/packages)
	(cd deploy/packages && "$GO" run . -bin "$abs" -arch "$arch" -version "$VERSION" -out "$out")
done
step "done:"
ls -1 dist/packages | sed 's/^/  /' >&2
