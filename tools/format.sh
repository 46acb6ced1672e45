#!/usr/bin/env bash
# Formats Giant's C and CUDA sources with clang-format 14 and .clang-format.
#
#   bash tools/format.sh            rewrite every file that is off
#   bash tools/format.sh --check    change nothing; name each file that is
#                                   off, with the lines, and fail (CI)
#
# The version is pinned: another clang-format formats some lines otherwise.
set -euo pipefail
GIANT_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
. "$GIANT_ROOT/tools/deps.sh"
giant_install_deps "$GIANT_STYLE_PACKAGES"
cd "$GIANT_ROOT"
mode="${1:-}"
case "$mode" in
  "" | --check) ;;
  *) echo "usage: bash tools/format.sh [--check]" >&2; exit 2 ;;
esac
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu')
if [ "$mode" = --check ]; then
  if ! clang-format-14 --dry-run --Werror "${files[@]}"; then
    echo "some files are not in .clang-format's style: run bash tools/format.sh" >&2
    exit 1
  fi
  echo "${#files[@]} files in style"
else
  clang-format-14 -i "${files[@]}"
fi
