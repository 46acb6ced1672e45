#!/usr/bin/env bash
# Turns the per-rank metrics files of one run (gpt --metrics 'run.%r.jsonl')
# into a step trace for the fail-slow tests: one CSV line per (step, rank)
# with the telemetry fields, after '#' lines naming the run and the peak
# FLOP/s it measured (the predictor's prior needs it).
#
# usage: tests/data/trace_from_metrics.sh OUT.csv "DESCRIPTION" run.0.jsonl [run.1.jsonl ...]
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,8p' "$0"; exit 2; }
out="$1" desc="$2"
shift 2
awk -v desc="$desc" -v nfiles="$#" '
  # The value of "key": in one flat JSON line.
  function val(line, key,    m) {
    if (!match(line, "\"" key "\":[-+0-9.eE]+")) { print FILENAME ":" FNR ": no " key > "/dev/stderr"; exit 1 }
    m = substr(line, RSTART, RLENGTH)
    return substr(m, length(key) + 4)
  }
  FNR == 1 { f++ }
  { lines[f, FNR] = $0; if (!(f in n) || FNR > n[f]) n[f] = FNR }
  END {
    steps = n[1]
    for (i = 2; i <= nfiles; i++) if (n[i] < steps) steps = n[i]
    first = lines[1, 1]
    peak = val(first, "flops") / val(first, "step_time_s") / val(first, "mfu")
    printf "# %s\n# ranks=%d steps=%d peak_flops=%.6e\n", desc, nfiles, steps, peak
    print "step,rank,layers,micro_batches,rank_tokens,seq_sq,compute_s,data_s,dp_wait_s,pp_wait_s"
    for (s = 1; s <= steps; s++)
      for (i = 1; i <= nfiles; i++) {
        l = lines[i, s]
        printf "%d,%d,%d,%d,%d,%d,%.6f,%.6f,%.6f,%.6f\n", val(l, "step"), val(l, "rank"), val(l, "layers"),
               val(l, "micro_batches"), val(l, "rank_tokens"), val(l, "seq_sq"), val(l, "compute_s"),
               val(l, "data_s"), val(l, "dp_wait_s"), val(l, "pp_wait_s")
      }
  }' "$@" >"$out"
