#!/usr/bin/env bash
# Fuzzing (docs/fuzzing.md): builds the libFuzzer harnesses of tests/fuzz
# with clang into build-fuzz (GIANT_FUZZ=ON), then runs every target for
# --seconds over a copy of its seed corpus (tests/fuzz/corpus/<target>,
# never written to), --jobs targets at a time. One line per target, then
# the totals as the last line; exits 1 when any target crashed. Crash
# inputs are kept in build-fuzz/crashes/<target>/.
#
#   bash tests/fuzz/fuzz.sh [--seconds N] [--jobs J] [TARGET...]
set -euo pipefail
GIANT_ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
seconds=20
jobs=1
only=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown flag $1" >&2; exit 2 ;;
    *) only+=("$1"); shift ;;
  esac
done
case "$seconds$jobs" in *[!0-9]*) echo "fuzz.sh: --seconds and --jobs take whole numbers" >&2; exit 2 ;; esac
[ "$jobs" -ge 1 ] || jobs=1

. "$GIANT_ROOT/tools/deps.sh"
giant_install_fuzz_deps
BUILD="${GIANT_FUZZ_BUILD_DIR:-$GIANT_ROOT/build-fuzz}"
mkdir -p "$BUILD"
# clang 14 knows no "x86-64-v4" in __builtin_cpu_supports, which the run-time
# choice of CPU kernels asks (cpu_isa.c, cpu_gemm_amx.c); the kernels are not
# what is fuzzed: one baseline level, no AMX. Warnings stop only the harnesses
# (tests/fuzz): the library is kept warning-free for gcc, and clang 14 warns
# where gcc does not. The fault points are in, for fuzz_fault's parser.
if ! CC=clang cmake -S "$GIANT_ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DGIANT_FUZZ=ON -DGIANT_TESTS=OFF \
  -DGIANT_FAULTS=ON -DGIANT_CUDA=OFF -DGIANT_MARCH=x86-64 -DGIANT_CC_HAS_AMX=OFF -DGIANT_WERROR=OFF >"$BUILD/configure.log" 2>&1; then
  cat "$BUILD/configure.log"
  exit 1
fi
if ! cmake --build "$BUILD" -j"$jobs" --target giant_fuzz >"$BUILD/build.log" 2>&1; then
  grep -E -A3 "error|warning" "$BUILD/build.log" | head -60
  echo "fuzz.sh: the build failed; the whole log is $BUILD/build.log" >&2
  exit 1
fi
if [ ${#only[@]} -gt 0 ]; then targets=("${only[@]}"); else mapfile -t targets <"$BUILD/fuzz_targets.txt"; fi

export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
export OMP_NUM_THREADS=1
runs="$BUILD/fuzz-runs"
rm -rf "$runs"
mkdir -p "$runs"

# count_inputs DIR: the inputs libFuzzer kept in DIR for a crash, a leak,
# a timeout or running out of memory.
count_inputs() {
  find "$1" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l
}

# run_target T: one libFuzzer run of T; writes $runs/T.result. Its
# temporary files (TMPDIR) go to a directory removed afterwards, in memory
# when /dev/shm is there.
run_target() {
  local t="$1" dir="$runs/$1" crashes="$BUILD/crashes/$1" shm=/dev/shm
  [ -d "$shm" ] && [ -w "$shm" ] || shm="$BUILD"
  mkdir -p "$dir/corpus" "$crashes"
  if [ -d "$GIANT_ROOT/tests/fuzz/corpus/$t" ]; then cp -r "$GIANT_ROOT/tests/fuzz/corpus/$t/." "$dir/corpus/"; fi
  local tmp
  tmp="$(mktemp -d "$shm/giant-fuzz-$t.XXXXXX")"
  local before
  before="$(count_inputs "$crashes")"
  local rc=0 dict=()
  : >"$dir/log.start"
  # A dictionary (tests/fuzz/dict/<target>.dict) gives the mutator the
  # format's words: keys and numbers at the edges of what is allowed.
  [ -f "$GIANT_ROOT/tests/fuzz/dict/$t.dict" ] && dict=(-dict="$GIANT_ROOT/tests/fuzz/dict/$t.dict")
  # -close_fd_mask=3: the library's and the programs' own messages go
  # nowhere; libFuzzer's lines and the sanitizers' reports stay.
  TMPDIR="$tmp" "$BUILD/tests/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -close_fd_mask=3 -artifact_prefix="$crashes/" "${dict[@]}" "$dir/corpus" \
    </dev/null >"$dir/log" 2>&1 || rc=$?
  rm -rf "$tmp"
  local execs cov ft found
  execs="$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$dir/log" | tail -1)"
  [ -n "$execs" ] || execs="$(sed -n 's/^#\([0-9]*\).*/\1/p' "$dir/log" | tail -1)"
  cov="$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' "$dir/log" | tail -1)"
  ft="$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' "$dir/log" | tail -1)"
  found=$(($(count_inputs "$crashes") - before))
  # A failed run that left no input (a crash outside any input) still counts.
  [ "$rc" -ne 0 ] && [ "$found" -eq 0 ] && found=1
  echo "fuzz $t: execs=${execs:-0} cov=${cov:-0} crashes=$found ft=${ft:-0} seconds=$seconds" >"$runs/$t.result"
  [ "$found" -eq 0 ] || report_crash "$t" "$dir/log" "$crashes"
}

# report_crash T LOG DIR: says where T's evidence is, and prints it, since
# CI's machine and its files are gone once the run ends: the sanitizer's
# or libFuzzer's report from the log, and each new input in hex.
report_crash() {
  local t="$1" log="$2" dir="$3"
  echo "fuzz.sh: $t crashed; its log is $log, its inputs are in $dir/" >&2
  grep -n -m1 -E "^==[0-9]+==|ERROR: libFuzzer|runtime error|SUMMARY:" "$log" >/dev/null &&
    sed -n "$(grep -n -m1 -E '^==[0-9]+==|ERROR: libFuzzer|runtime error' "$log" | cut -d: -f1),+40p" "$log" >&2
  find "$dir" -maxdepth 1 -type f -newer "$log.start" | head -3 | while read -r f; do
    echo "fuzz.sh: input $f ($(stat -c %s "$f") bytes, the first 1024 in hex):" >&2
    head -c 1024 "$f" | od -A d -t x1 -v >&2
  done
}

running=0
for t in "${targets[@]}"; do
  [ -x "$BUILD/tests/fuzz/$t" ] || { echo "fuzz.sh: no target $t in $BUILD" >&2; exit 2; }
  echo "fuzz.sh: running $t for ${seconds}s" >&2
  run_target "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

total_execs=0
total_crashes=0
for t in "${targets[@]}"; do
  line="$(cat "$runs/$t.result")"
  echo "$line"
  e="${line#*execs=}"
  c="${line#*crashes=}"
  total_execs=$((total_execs + ${e%% *}))
  total_crashes=$((total_crashes + ${c%% *}))
done
echo "fuzz_targets=${#targets[@]} execs=$total_execs crashes=$total_crashes"
[ "$total_crashes" -eq 0 ]
