#!/usr/bin/env bash
# The whole test suite, several times in a row, while a CPU hog keeps every
# core busy: the tests' time bounds must hold on a loaded machine, not only
# on a quiet one (CI runs them under sanitizers, one test more than there
# are cores at a time, as tools/test.sh does).
#
#   bash tests/stress.sh [--runs N] [--hogs H] [-- CTEST_ARGS...]
#
# Builds as tools/test.sh does (GIANT_BUILD_DIR, GIANT_CMAKE_ARGS), starts
# H busy loops (default: one per core) at the tests' own priority, then
# runs ctest as tools/test.sh does N times (default 5). One line per run, then
# `stress runs=N passed=P` as the last line; exits 1 unless every run
# passed. The failed tests' output is kept in $BUILD/stress/run-K.log.
set -euo pipefail
GIANT_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
runs=5
hogs=""
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --hogs) hogs="$2"; shift 2 ;;
    --) shift; ctest_args=("$@"); break ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "stress-tests.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$hogs" ] || hogs="$(nproc)"
case "$runs$hogs" in *[!0-9]*) echo "stress-tests.sh: --runs and --hogs take whole numbers" >&2; exit 2 ;; esac

. "$GIANT_ROOT/tools/deps.sh"
giant_install_deps
BUILD="${GIANT_BUILD_DIR:-$GIANT_ROOT/build}"
giant_build "$BUILD" -DGIANT_FAULTS=ON ${GIANT_CMAKE_ARGS:-} # as tools/test.sh: the tests play faults
mkdir -p "$BUILD/stress"

# The hog: busy shells, killed on every way out of this script.
hog_pids=()
stop_hogs() {
  [ ${#hog_pids[@]} -eq 0 ] || kill "${hog_pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap stop_hogs EXIT
trap 'exit 130' INT TERM
for _ in $(seq "$hogs"); do
  bash -c 'while :; do :; done' &
  hog_pids+=($!)
done
echo "stress-tests.sh: $hogs busy loops on $(nproc) cores, $runs runs of the suite" >&2

passed=0
cd "$BUILD"
for k in $(seq "$runs"); do
  start=$(date +%s)
  log="$BUILD/stress/run-$k.log"
  rc=0
  ctest --output-on-failure -j"$(( $(nproc) + 1 ))" --timeout 600 "${ctest_args[@]}" >"$log" 2>&1 || rc=$?
  took=$(($(date +%s) - start))
  summary="$(grep -E '^[0-9]+% tests passed' "$log" | tail -1)"
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1))
    echo "run $k: passed in ${took} s (${summary:-no summary})"
  else
    echo "run $k: FAILED in ${took} s (${summary:-no summary}); output in $log"
    sed -n '/The following tests FAILED/,$p' "$log"
  fi
done
echo "stress runs=$runs passed=$passed"
[ "$passed" -eq "$runs" ]
