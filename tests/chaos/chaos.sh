#!/usr/bin/env bash
# The chaos suite's full matrix (docs/chaos.md): installs what is missing,
# builds, and runs every case of the fault table on emulated nodes, three
# times in a row unless told otherwise, against each program that trains
# through the run API: examples/gpt, then examples/custom_layer. Needs root
# (network namespaces).
#
#   bash tests/chaos/chaos.sh                          every case, 3 runs each, both programs
#   bash tests/chaos/chaos.sh --program custom_layer   one program
#   bash tests/chaos/chaos.sh --case partition         one case (repeatable flag)
#   bash tests/chaos/chaos.sh --quick                  the CI subset
#   bash tests/chaos/chaos.sh --random --seed S --minutes M [--per-minute F]
#
# The last line of each program's run is its summary:
#   chaos_cases=<n> passed=<p> ettr=<e> max_recover_ms=<m> leftovers=<k>
# or, in random mode,
#   chaos_random faults=<n> recovered=<r> steps_lost=<l> ettr=<e> max_recover_ms=<m> leftovers=<k>
set -euo pipefail
GIANT_ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
. "$GIANT_ROOT/tools/deps.sh"
giant_install_deps
BUILD="${GIANT_BUILD_DIR:-$GIANT_ROOT/build}"
mkdir -p "$BUILD"
# Every case plays GT_FAULT's faults: a build with the fault points.
giant_build "$BUILD" -DGIANT_FAULTS=ON ${GIANT_CMAKE_ARGS:-}
args=("$@")
case " ${args[*]-} " in
  *" --random "* | *" --repeat "* | *" --list "*) ;;
  *) args+=(--repeat 3) ;;
esac
programs=(gpt custom_layer)
case " ${args[*]-} " in
  *" --program "*) programs=("") ;; # the runner takes the one named
esac
cd "$BUILD"
rc=0
for p in "${programs[@]}"; do
  [ -z "$p" ] || echo "== chaos: examples/$p"
  GT_BUILD_DIR="$BUILD" OMP_NUM_THREADS=1 "$BUILD/tests/chaos/chaos_run" ${p:+--program "$p"} "${args[@]}" || rc=$?
done
exit "$rc"
