#!/usr/bin/env bash
# Runs every native fuzz target in the module, one after another, for
# FUZZTIME each (default 10s; CI runs 5s each, a local soak e.g. 10m).
# ONLY=regexp limits the run to matching target names. Minimizing a new
# input is capped at 100 runs (the default, 60 s, can stall a short run).
# Exits non-zero on the first crash; the failing input is left in the
# package's testdata/fuzz/ directory, as go test does.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10s}
only=${ONLY:-.}
parallel=${FUZZ_PARALLEL:-2}

targets=$(grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' . |
  grep -v '^./test/' | sort | while read -r file; do
    dir=$(dirname "$file")
    grep -oE '^func Fuzz[A-Za-z0-9_]+' "$file" | sed 's/^func //' | while read -r name; do
      echo "$dir $name"
    done
  done)

count=0
while read -r dir name; do
  [ -n "$dir" ] || continue
  [[ "$name" =~ $only ]] || continue
  echo "fuzz: $dir $name for $fuzztime"
  out=$(mktemp)
  if ! go test -run "^$" -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime 100x -parallel "$parallel" "$dir" >"$out" 2>&1; then
    cat "$out"
    rm -f "$out"
    echo "fuzz: $dir $name FAILED; the input is under $dir/testdata/fuzz/$name"
    exit 1
  fi
  tail -n 3 "$out"
  rm -f "$out"
  count=$((count + 1))
done <<<"$targets"
echo "fuzz: $count targets, no crash"
