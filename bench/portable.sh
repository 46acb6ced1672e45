#!/usr/bin/env bash
# bench/portable.sh: the portable build against a build for this CPU only.
#
# A portable build (the default) compiles its CPU kernels once per
# instruction-set level and picks one at run time; a -march=native build
# compiles everything for the machine it runs on. This runs
# bench_train_step from both, alternating build by build for ROUNDS rounds
# (the machine's speed drifts), and prints each round, the medians, and
# portable_vs_native=<native ms / portable ms> (1.0 = as fast; above 0.95
# is within 5%).
#
# usage: bash bench/portable.sh [ROUNDS] [bench_train_step options...]
#   builds build/ (portable) and build-native/ (-DGIANT_NATIVE=ON) when
#   missing; GIANT_BUILD_DIR and GIANT_NATIVE_BUILD_DIR choose others.
#   GT_CPU_KERNELS applies to the portable build alone (the native build
#   has one level), so GT_CPU_KERNELS=avx2 shows what a CPU without
#   AVX-512 would run.
set -euo pipefail
GIANT_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
. "$GIANT_ROOT/tools/deps.sh"
rounds="${1:-5}"
[ $# -gt 0 ] && shift
portable="${GIANT_BUILD_DIR:-$GIANT_ROOT/build}"
native="${GIANT_NATIVE_BUILD_DIR:-$GIANT_ROOT/build-native}"
[ -x "$portable/bench/bench_train_step" ] || giant_build "$portable" >/dev/null
[ -x "$native/bench/bench_train_step" ] || giant_build "$native" -DGIANT_NATIVE=ON -DGIANT_CUDA=OFF >/dev/null

# One measurement: the median ms/step bench_train_step reports for Giant.
step_ms() {
  local env=()
  [ "$1" = "$native" ] && env=(env -u GT_CPU_KERNELS)
  "${env[@]}" "$1/bench/bench_train_step" --no-torch --rounds 3 --steps 3 "${@:2}" 2>>"$log" | tee -a "$log" |
    sed -n 's/^giant: *\([0-9.]*\) ms\/step.*/\1/p'
}
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
p_all="" n_all=""
for r in $(seq 1 "$rounds"); do
  p=$(step_ms "$portable" "$@") || true
  n=$(step_ms "$native" "$@") || true
  [ -n "$p" ] && [ -n "$n" ] || { cat "$log"; echo "bench_train_step printed no timing"; exit 1; }
  echo "round $r: portable $p ms/step | native $n ms/step"
  p_all="$p_all $p" n_all="$n_all $n"
done
grep -m1 '^config:' "$log"
echo "portable: $(grep -m1 '^kernels:' "$log" | cut -d' ' -f2-) (chosen at run time); native: -march=native"
pm=$(echo $p_all | tr ' ' '\n' | median)
nm=$(echo $n_all | tr ' ' '\n' | median)
echo "median over $rounds rounds: portable $pm ms/step, native $nm ms/step"
awk -v p="$pm" -v n="$nm" 'BEGIN {printf "portable_vs_native=%.3f\n", n / p}'
