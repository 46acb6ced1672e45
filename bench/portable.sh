#!/usr/bin/env bash
# bench/portable.sh: the portable build against a build for this CPU only.
#
# A portable build (the default) compiles its CPU kernels once per
# instruction-set level and picks one at run time; a -march=native build
# compiles everything for the machine it runs on. This builds both when
# missing (build/ and build-native/; GIANT_BUILD_DIR and
# GIANT_NATIVE_BUILD_DIR choose others) and runs bench_train_step from
# each, alternating (bench/compare_builds.sh, A = native, B = portable), so
# its train_step_b_vs_a is native ms / portable ms: 1.0 = as fast, above
# 0.95 = within 5%. GT_CPU_KERNELS applies to the portable build alone (the
# native build has one level), so GT_CPU_KERNELS=avx2 shows what a CPU
# without AVX-512 would run.
#
# usage: bash bench/portable.sh [ROUNDS] [bench_train_step options...]
set -euo pipefail
GIANT_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
. "$GIANT_ROOT/tools/deps.sh"
portable="${GIANT_BUILD_DIR:-$GIANT_ROOT/build}"
native="${GIANT_NATIVE_BUILD_DIR:-$GIANT_ROOT/build-native}"
[ -x "$portable/bench/bench_train_step" ] || giant_build "$portable" >/dev/null
[ -x "$native/bench/bench_train_step" ] || giant_build "$native" -DGIANT_NATIVE=ON -DGIANT_CUDA=OFF >/dev/null
B_ENV="${GT_CPU_KERNELS:+GT_CPU_KERNELS=$GT_CPU_KERNELS}" exec bash "$GIANT_ROOT/bench/compare_builds.sh" "$native" "$portable" "$@"
