#!/usr/bin/env python3
"""Turns the per-rank metrics files of one run (gpt --metrics 'run.%r.jsonl')
into a step trace for the fail-slow tests: one CSV line per (step, rank)
with the telemetry fields, after '#' lines naming the run.

usage: trace_from_metrics.py OUT.csv "DESCRIPTION" run.0.jsonl [run.1.jsonl ...]
"""
import json
import sys

FIELDS = ["step", "rank", "layers", "micro_batches", "rank_tokens", "seq_sq", "compute_s", "data_s",
          "dp_wait_s", "pp_wait_s"]


def main():
    out, desc, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    ranks = [[json.loads(line) for line in open(f)] for f in files]
    steps = min(len(r) for r in ranks)
    first = ranks[0][0]
    # The measured peak the run's MFU was computed against: the predictor's
    # prior needs it.
    peak = first["flops"] / first["step_time_s"] / first["mfu"]
    with open(out, "w") as f:
        f.write("# %s\n# ranks=%d steps=%d peak_flops=%.6e\n" % (desc, len(files), steps, peak))
        f.write(",".join(FIELDS) + "\n")
        for i in range(steps):
            for r in ranks:
                d = r[i]
                f.write("%d,%d,%d,%d,%d,%d,%.6f,%.6f,%.6f,%.6f\n" % tuple(d[k] for k in FIELDS))


if __name__ == "__main__":
    main()
