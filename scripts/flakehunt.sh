#!/usr/bin/env bash
# Flake hunt: runs each package's tests COUNT times (default 20) with the
# race detector while BURN busy loops (default: one per core) load the
# machine, and prints a table: package, runs, failures, and the first
# failing test names. Packages are arguments (go list patterns), default
# every package of the module. A package whose tests fail here fails
# about once in COUNT runs on a loaded CI machine; fix the cause, never
# retry (docs/testing.md).
#
#   bash scripts/flakehunt.sh ./router/... ./internal/visitor/...
#   COUNT=5 BURN=0 bash scripts/flakehunt.sh ./internal/server
set -uo pipefail
cd "$(dirname "$0")/.."
count=${COUNT:-20}
burn=${BURN:-$(nproc)}
timeout=${TIMEOUT:-30m}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
pkgs=$(go list "${@:-./...}")

burners=()
for ((i = 0; i < burn; i++)); do
  (while :; do :; done) &
  burners+=($!)
done
trap 'kill "${burners[@]}" 2>/dev/null' EXIT

printf '%-55s %5s %8s  %s\n' package runs failures "failing tests"
for p in $pkgs; do
  log="$out/$(echo "$p" | tr / _).log"
  go test -race -count="$count" -timeout "$timeout" "$p" >"$log" 2>&1
  rc=$?
  if grep -q "no test files" "$log"; then
    continue
  fi
  fails=$(grep -c '^--- FAIL' "$log")
  names=$(grep '^--- FAIL' "$log" | awk '{print $3}' | sort | uniq -c | awk '{printf "%s×%s ", $2, $1}')
  if [ "$rc" != 0 ] && [ "$fails" = 0 ]; then
    names="(exit $rc: $(grep -m1 -E 'panic|timed out|FAIL' "$log"))"
  fi
  printf '%-55s %5s %8s  %s\n' "${p#github.com/aperio-dev/aperio/}" "$count" "$fails" "$names"
done
echo "logs: $out"
