#!/usr/bin/env bash
# Quick start, second command: installs what is missing, builds, and runs
# every test. Arguments go to ctest (for example -L comm for one area).
# The tests play GT_FAULT's faults, so the build has its fault points
# (GIANT_FAULTS=ON); GIANT_CMAKE_ARGS comes after and may turn them off.
set -euo pipefail
GIANT_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
. "$GIANT_ROOT/tools/deps.sh"
giant_install_deps
giant_install_py_deps
BUILD="${GIANT_BUILD_DIR:-$GIANT_ROOT/build}"
mkdir -p "$BUILD"
giant_build "$BUILD" -DGIANT_FAULTS=ON ${GIANT_CMAKE_ARGS:-}
cd "$BUILD"
# One test more than there are cores: about half of a test's time is
# waiting (on leases, peers, processes starting), which the extra one fills.
# Tests that judge speeds hold a lock or run alone (tests/resilience).
# ctest also writes what it ran to a JUnit file, for tools/skipped.sh.
junit="$BUILD/Testing/ctest-junit.xml"
rm -f "$junit"
rc=0
ctest --output-on-failure -j"$(( $(nproc) + 1 ))" --timeout 600 --output-junit "$junit" "$@" || rc=$?
# The tests that could not run here (exit 77: no GPU, not root...), with
# their reasons, whatever ctest's verdict. Under CI=true, one this machine
# should have run fails the run (tools/skipped.sh says which may skip).
if [ -f "$junit" ]; then
  check=""
  [ "${CI:-}" = "true" ] && check="--check"
  bash "$GIANT_ROOT/tools/skipped.sh" $check "$BUILD" || { [ "$rc" -ne 0 ] || rc=1; }
fi
exit "$rc"
