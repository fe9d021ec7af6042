#!/usr/bin/env bash
# bench/ab.sh: one Go benchmark, before and after a change, in one run.
#
#   bash bench/ab.sh BASE [PKG] [BENCH] [RUNS] [BENCHTIME]
#   make bench-ab BASE=5d2ad7d
#
# builds PKG's test binary (default ./router) at git revision BASE (in a
# temporary worktree) and from the working tree, then runs BENCH (default
# ^BenchmarkServeHTTP$) RUNS times (default 10) with each, alternating
# base and head, so that the machine's drift over the run hits both alike.
# It prints every run, then the median and the minimum of ns/op, and B/op
# and allocs/op, side by side. Nothing is asserted: read the figures.
set -euo pipefail

BASE=${1:?usage: bench/ab.sh BASE [PKG] [BENCH] [RUNS] [BENCHTIME]}
PKG=${2:-./router}
BENCH=${3:-^BenchmarkServeHTTP\$}
RUNS=${4:-10}
BENCHTIME=${5:-200000x}
[[ $RUNS =~ ^[0-9]+$ ]] && ((RUNS >= 1 && RUNS <= 100)) || { echo "ab: RUNS must be 1..100" >&2; exit 2; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
base_rev=$(git rev-parse --short "$BASE^{commit}")
head_rev="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- || echo +dirty)"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/aperio-ab.XXXXXX")
cleanup() {
	git worktree remove --force "$TMP/base" >/dev/null 2>&1 || true
	rm -rf "$TMP"
}
trap cleanup EXIT

echo "ab: building $PKG at $base_rev and at $head_rev" >&2
git worktree add --detach "$TMP/base" "$base_rev" >/dev/null 2>&1
(cd "$TMP/base" && go test -c -o "$TMP/base.test" "$PKG")
go test -c -o "$TMP/head.test" "$PKG"

run() { # run BIN: prints "ns B allocs" of one run
	"$1" -test.run '^$' -test.bench "$BENCH" -test.benchtime "$BENCHTIME" -test.benchmem |
		awk '/^Benchmark/ { for (i = 1; i <= NF; i++) { if ($i == "ns/op") ns = $(i-1); if ($i == "B/op") b = $(i-1); if ($i == "allocs/op") a = $(i-1) } } END { if (ns == "") exit 1; print ns, b, a }'
}

: >"$TMP/base.txt"
: >"$TMP/head.txt"
printf '%-4s %-22s %12s %8s %10s\n' run build ns/op B/op allocs/op
for ((i = 1; i <= RUNS; i++)); do
	for side in base head; do
		r=$(run "$TMP/$side.test") || { echo "ab: $side run $i printed no benchmark line" >&2; exit 1; }
		echo "$r" >>"$TMP/$side.txt"
		read -r ns b a <<<"$r"
		rev=$base_rev
		[[ $side == head ]] && rev=$head_rev
		printf '%-4s %-22s %12s %8s %10s\n' "$i" "$side $rev" "$ns" "$b" "$a"
	done
done

summary() { # summary FILE: median and min ns/op, median B/op and allocs/op
	sort -n -k1,1 "$1" | awk '{ ns[NR] = $1; b[NR] = $2; a[NR] = $3 } END {
		m = (NR % 2) ? ns[(NR + 1) / 2] : (ns[NR / 2] + ns[NR / 2 + 1]) / 2
		printf "%12.0f %12.0f %8s %10s", m, ns[1], b[int((NR + 1) / 2)], a[int((NR + 1) / 2)] }'
}
echo
printf '%-20s %12s %12s %8s %10s\n' "$BENCH" "median ns" "min ns" "B/op" "allocs/op"
printf '%-20s %s\n' "base $base_rev" "$(summary "$TMP/base.txt")"
printf '%-20s %s\n' "head $head_rev" "$(summary "$TMP/head.txt")"
