#!/usr/bin/env bash
# Quick start, first command: installs what is missing, builds, and trains
# the example GPT on the text of Debian's fortunes with giantrun in
# standalone mode: 4 worker processes, hybrid parallel (2 data-parallel
# replicas x 2 tensor-parallel ranks), on the CPU. Extra arguments go to the
# example (try --help); GIANT_PLAN and GIANT_NPROC change the layout.
set -euo pipefail
GIANT_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
. "$GIANT_ROOT/tools/deps.sh"
giant_install_deps
mkdir -p "$GIANT_ROOT/build"
# A production build: no fault points, and GT_FAULT refused. Said here
# because build/ may hold tools/test.sh's build, which has them.
giant_build "$GIANT_ROOT/build" -DGIANT_FAULTS=OFF
cd "$GIANT_ROOT"
exec ./build/launch/giantrun --standalone --nproc-per-node "${GIANT_NPROC:-4}" --plan "${GIANT_PLAN:-dp=2,tp=2}" \
  ./build/examples/gpt --data build/data/fortunes.tok --metrics build/gpt-metrics.jsonl "$@"
