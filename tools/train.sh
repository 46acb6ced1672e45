#!/usr/bin/env bash
# Quick start, first command: installs what is missing, builds, and trains
# the example GPT on the text of Debian's fortunes. Extra arguments go to the
# example (try --help).
set -euo pipefail
GIANT_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
. "$GIANT_ROOT/tools/deps.sh"
giant_install_deps
mkdir -p "$GIANT_ROOT/build"
giant_build "$GIANT_ROOT/build"
cd "$GIANT_ROOT"
exec ./build/examples/gpt --data build/data/fortunes.tok --metrics build/gpt-metrics.jsonl "$@"
