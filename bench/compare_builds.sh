#!/usr/bin/env bash
# bench/compare_builds.sh: two builds of Giant, the same benchmarks, one run.
#
# Runs bench_train_step (and, with COMPARE_COMM=1, bench_comm's 64 MiB
# two-rank all-reduce) from build A and build B, alternating build by build
# for ROUNDS rounds (the machine's speed drifts), and prints each round, the
# medians and the ratios:
#   train_step_b_vs_a=<A ms / B ms>       (above 1: B is faster)
#   allreduce_b_vs_a=<B GB/s / A GB/s>    (with COMPARE_COMM=1)
# The builds must exist. Extra arguments go to bench_train_step.
# A_ENV and B_ENV are environment assignments for one side only
# (A_ENV="GT_CPU_KERNELS=avx2").
#
# usage: bash bench/compare_builds.sh A_BUILD_DIR B_BUILD_DIR [ROUNDS] [bench_train_step options...]
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,15p' "$0"; exit 2; }
a="$1" b="$2"
shift 2
rounds="${1:-5}"
[ $# -gt 0 ] && shift
for d in "$a" "$b"; do
  [ -x "$d/bench/bench_train_step" ] || { echo "no $d/bench/bench_train_step: build it first"; exit 2; }
done

log="$(mktemp)"
trap 'rm -f "$log"' EXIT

# side DIR ENV CMD...: runs a benchmark of build DIR with ENV (words of
# NAME=value, maybe none), its output appended to the log.
side() {
  local dir="$1" envs="$2"
  shift 2
  # shellcheck disable=SC2086
  env -u GT_CPU_KERNELS $envs "$dir/bench/$@" 2>>"$log" | tee -a "$log"
}
step_ms() { side "$1" "$2" bench_train_step --no-torch --rounds 3 --steps 3 "${@:3}" | sed -n 's/^giant: *\([0-9.]*\) ms\/step.*/\1/p'; }
allreduce() { side "$1" "$2" bench_comm --no-gloo --ranks 2 --max-size 64M | sed -n 's/^allreduce_64MiB_2ranks_GBps=\([0-9.]*\).*/\1/p'; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

ta="" tb="" ca="" cb=""
for r in $(seq 1 "$rounds"); do
  x=$(step_ms "$a" "${A_ENV:-}" "$@") || true
  y=$(step_ms "$b" "${B_ENV:-}" "$@") || true
  [ -n "$x" ] && [ -n "$y" ] || { cat "$log"; echo "bench_train_step printed no timing"; exit 1; }
  line="round $r: train step A $x ms, B $y ms"
  ta="$ta $x" tb="$tb $y"
  if [ "${COMPARE_COMM:-0}" = 1 ]; then
    u=$(allreduce "$a" "${A_ENV:-}") || true
    v=$(allreduce "$b" "${B_ENV:-}") || true
    [ -n "$u" ] && [ -n "$v" ] || { cat "$log"; echo "bench_comm printed no all-reduce figure"; exit 1; }
    line="$line | all-reduce 64 MiB x 2 ranks A $u GB/s, B $v GB/s"
    ca="$ca $u" cb="$cb $v"
  fi
  echo "$line"
done
echo "A: $a ${A_ENV:-}"
echo "B: $b ${B_ENV:-}"
grep -m1 '^config:' "$log" || true
grep '^kernels:' "$log" | sort | uniq -c || true
mta=$(echo "$ta" | median) mtb=$(echo "$tb" | median)
echo "median over $rounds rounds: train step A $mta ms, B $mtb ms"
awk -v a="$mta" -v b="$mtb" 'BEGIN {printf "train_step_b_vs_a=%.3f\n", a / b}'
if [ "${COMPARE_COMM:-0}" = 1 ]; then
  mca=$(echo "$ca" | median) mcb=$(echo "$cb" | median)
  echo "median over $rounds rounds: all-reduce A $mca GB/s, B $mcb GB/s"
  awk -v a="$mca" -v b="$mcb" 'BEGIN {printf "allreduce_b_vs_a=%.3f\n", b / a}'
fi
