#!/usr/bin/env bash
# Runs every native fuzz target in the module, one after another, for
# FUZZTIME each (default 10s; CI runs 5s each, a local soak e.g. 10m).
# ONLY=regexp limits the run to matching target names. FUZZ_BUDGET=N
# (seconds) stops starting targets once N seconds have passed, beginning
# at a target that moves every hour, so that short CI runs cover every
# target over a day while each stays time-boxed. Minimizing a new
# input is capped at 100 runs (the default, 60 s, can stall a short run).
# Exits non-zero on the first crash; the failing input is left in the
# package's testdata/fuzz/ directory, as go test does.
#
# Targets of nested modules (examples/kubernetes-provider: client-go) are
# left out unless FUZZ_NESTED=1: instrumenting client-go for coverage
# takes minutes, and their seed corpora already run under make test.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10s}
only=${ONLY:-.}
parallel=${FUZZ_PARALLEL:-2}
nested=${FUZZ_NESTED:-0}
budget=${FUZZ_BUDGET:-0}

# moduleroot DIR prints the directory of the go.mod that DIR belongs to.
moduleroot() {
  local d=$1
  while [ "$d" != "." ] && [ ! -f "$d/go.mod" ]; do
    d=$(dirname "$d")
  done
  echo "$d"
}

targets=$(grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' . |
  grep -v '^./test/' | sort | while read -r file; do
    dir=$(dirname "$file")
    if [ "$(moduleroot "$dir")" != "." ] && [ "$nested" != 1 ]; then
      continue
    fi
    grep -oE '^func Fuzz[A-Za-z0-9_]+' "$file" | sed 's/^func //' | while read -r name; do
      echo "$dir $name"
    done
  done)

# With a budget, start at a target that moves every hour (the list is
# rotated), so that consecutive time-boxed runs fuzz different targets.
if [ "$budget" -gt 0 ]; then
  n=$(grep -c . <<<"$targets" || true)
  if [ "$n" -gt 0 ]; then
    off=$(( $(date +%s) / 3600 % n ))
    targets=$( (tail -n +$((off + 1)) <<<"$targets"; head -n "$off" <<<"$targets") | grep .)
  fi
fi
start=$SECONDS
count=0
skipped=0
while read -r dir name; do
  [ -n "$dir" ] || continue
  [[ "$name" =~ $only ]] || continue
  if [ "$budget" -gt 0 ] && [ $((SECONDS - start)) -ge "$budget" ]; then
    skipped=$((skipped + 1))
    continue
  fi
  echo "fuzz: $dir $name for $fuzztime"
  out=$(mktemp)
  # From the package's own directory, so that a nested module's package
  # is built by its module.
  run() { (cd "$dir" && go test -run "^$" -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime 100x -parallel "$parallel" .) >"$out" 2>&1; }
  ok=1
  run || ok=0
  # The fuzzing engine itself sometimes ends a run at its deadline with
  # "context deadline exceeded" and no failing input: no crash was found,
  # so the run is repeated once. A crash always writes its input.
  if [ "$ok" = 0 ] && grep -q "context deadline exceeded" "$out" && ! grep -q "Failing input written" "$out"; then
    echo "fuzz: $dir $name: the engine stopped at its deadline without a failing input; running it again"
    ok=1
    run || ok=0
  fi
  if [ "$ok" = 0 ]; then
    cat "$out"
    rm -f "$out"
    echo "fuzz: $dir $name FAILED; the input is under $dir/testdata/fuzz/$name"
    exit 1
  fi
  tail -n 3 "$out"
  rm -f "$out"
  count=$((count + 1))
done <<<"$targets"
if [ "$skipped" -gt 0 ]; then
  echo "fuzz: $count targets, no crash; $skipped left for a later run (FUZZ_BUDGET=${budget}s)"
else
  echo "fuzz: $count targets, no crash"
fi
