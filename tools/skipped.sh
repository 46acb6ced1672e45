#!/usr/bin/env bash
# The tests the last ctest run skipped (exit 77), each with the reason it
# printed: tools/skipped.sh [--check] BUILD_DIR
#
# Reads BUILD_DIR/Testing/ctest-junit.xml, which tools/test.sh has ctest
# write (ctest --output-junit). Prints the skipped tests, one a line.
# --check (CI): exits 1 when a test was skipped that this machine should
# have run. Allowed to skip are only
#  - the CUDA tests (LABELS cuda), where the build has no CUDA or the
#    machine no GPU, and test_offload_cuda2 where it has one GPU;
#  - the kernel suite at an instruction-set level this CPU lacks
#    (test_kernels_cpu_<level>, tests/core/CMakeLists.txt), read from
#    /proc/cpuinfo, so that an AVX-512 machine must run the AVX-512 tests;
#  - the names GIANT_SKIP_ALLOW matches (an extended regex, whole names),
#    for a machine CI does not know.
# A test that cannot run for any other reason (no root, no etcd, no
# openssl) fails the check: CI installs what the tests need and runs as
# root.
set -euo pipefail

check=0
if [ "${1:-}" = "--check" ]; then
  check=1
  shift
fi
[ $# -eq 1 ] || {
  echo "usage: tools/skipped.sh [--check] BUILD_DIR" >&2
  exit 2
}
build="$1"
junit="$build/Testing/ctest-junit.xml"
if [ ! -f "$junit" ]; then
  echo "skipped.sh: no $junit: run the tests with tools/test.sh first" >&2
  exit 2
fi

# name<TAB>reason for each test skipped by its exit code (ctest's message
# SKIP_RETURN_CODE=77). A test ctest could not start is also "notrun" in the
# file, but ctest fails the run for it, so it is not listed here. The
# reason: the lines of the test's output that say it skipped ("skipped:
# why", "why: skipping"), but not CMocka's own [  SKIPPED ] lines.
skips=$(awk '
  function unxml(s) {
    gsub(/&lt;/, "<", s); gsub(/&gt;/, ">", s); gsub(/&quot;/, "\"", s); gsub(/&apos;/, "\047", s)
    gsub(/&amp;/, "\\&", s)
    return s
  }
  /<testcase / {
    match($0, /name="[^"]*"/)
    name = substr($0, RSTART + 6, RLENGTH - 7)
    skipped = 0; why = ""
  }
  /<skipped message="SKIP_/ { skipped = 1 }
  {
    line = $0
    sub(/.*<system-out>/, "", line)
    sub(/<\/system-out>.*/, "", line)
    sub(/^[ \t]+/, "", line)
    if (line ~ /(skipped: |skipping)/ && line !~ /^\[/ && index(why, unxml(line)) == 0)
      why = why (why == "" ? "" : "; ") unxml(line)
  }
  /<\/testcase>/ { if (skipped) printf "%s\t%s\n", name, why == "" ? "(no reason printed)" : why }
' "$junit")

if [ -z "$skips" ]; then
  echo "skipped tests: none"
  exit 0
fi
echo "skipped tests:"
while IFS=$'\t' read -r name why; do
  printf '  %-32s %s\n' "$name" "$why"
done <<<"$skips"
[ "$check" -eq 1 ] || exit 0

# What this machine may skip, as one extended regex of whole names.
allow=()
# CUDA: a build without it, or a machine without a GPU, skips them all.
cuda_build=0
if grep -q '^CMAKE_CUDA_COMPILER:[A-Z]*=.' "$build/CMakeCache.txt" 2>/dev/null &&
  ! grep -q '^CMAKE_CUDA_COMPILER:[A-Z]*=.*NOTFOUND' "$build/CMakeCache.txt" &&
  ! grep -q '^GIANT_CUDA:[A-Z]*=OFF$' "$build/CMakeCache.txt"; then
  cuda_build=1
fi
gpus=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU' || true)
if [ "$cuda_build" -eq 0 ] || [ "$gpus" -eq 0 ]; then
  while read -r t; do allow+=("$t"); done < <(cd "$build" && ctest -N -L '^cuda$' | sed -n 's/^ *Test *#[0-9]*: //p')
elif [ "$gpus" -lt 2 ]; then
  # The parallel layouts of offloading need two GPUs.
  allow+=("test_offload_cuda2")
fi
# CPU levels: the flags of /proc/cpuinfo each level's code needs (as
# core/cpu/cpu_isa.c asks __builtin_cpu_supports; lzcnt shows as abm). A
# level not known here must run.
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
level_flags() {
  case "$1" in
    sse2) echo "sse2" ;;
    avx2) echo "avx2 fma f16c bmi1 bmi2 abm movbe" ;;
    avx512) echo "avx512f avx512bw avx512cd avx512dq avx512vl" ;;
    *) echo "" ;;
  esac
}
while read -r name; do
  level="${name#test_kernels_cpu_}"
  need=$(level_flags "$level")
  [ -n "$need" ] || continue
  for f in $need; do
    if [[ "$flags" != *" $f "* ]]; then
      allow+=("$name")
      break
    fi
  done
done < <(cut -f1 <<<"$skips" | grep '^test_kernels_cpu_' || true)

bad=0
while IFS=$'\t' read -r name why; do
  ok=0
  for a in ${allow[@]+"${allow[@]}"}; do [ "$a" = "$name" ] && ok=1; done
  if [ -n "${GIANT_SKIP_ALLOW:-}" ] && [[ "$name" =~ ^(${GIANT_SKIP_ALLOW})$ ]]; then ok=1; fi
  if [ "$ok" -eq 0 ]; then
    echo "skipped, but this machine should run it: $name ($why)"
    bad=1
  fi
done <<<"$skips"
if [ "$bad" -eq 1 ]; then
  echo "skipped tests this machine should run (allowed here: CUDA without a GPU or CUDA build, CPU levels it lacks," \
    "GIANT_SKIP_ALLOW)"
  exit 1
fi
echo "every skipped test is one this machine cannot run"
