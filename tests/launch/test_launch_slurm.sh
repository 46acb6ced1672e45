#!/usr/bin/env bash
# giantrun under a real Slurm (tools/slurm_cluster.sh: 3 emulated nodes):
# examples/slurm/train.sbatch trains the GPT on 3 nodes, each giantrun
# taking its flags from Slurm and meeting on the first node's etcd, and
# the loss must be finite and fall; then the same with one rank killed
# mid-job (GT_FAULT) under --reshape, which must reshape and finish.
# Exits 77 (skipped) without root, ip, or Slurm's packages (tools/deps.sh's
# GIANT_SLURM_PACKAGES, which CI installs). The cluster comes down however
# the test ends.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${GT_BUILD_DIR:?GT_BUILD_DIR names the build directory}"
JOB_TIMEOUT_S=300 # a job takes ~30 s on two loaded cores

skip() {
  echo "skipped: $*"
  exit 77
}
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"
command -v ip >/dev/null || skip "no ip command (iproute2)"
for b in slurmctld slurmd munged sbatch scontrol srun sinfo nsenter etcd; do
  command -v "$b" >/dev/null || skip "no $b: install tools/deps.sh's GIANT_SLURM_PACKAGES"
done

export GIANT_SLURM_DIR
GIANT_SLURM_DIR="$(mktemp -d /tmp/giant-slurm-test.XXXXXX)"
WORK="$(mktemp -d /tmp/giant-slurm-work.XXXXXX)"
cleanup() {
  bash "$ROOT/tools/slurm_cluster.sh" down
  rm -rf "$WORK"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*"
  exit 1
}

timeout 120 bash "$ROOT/tools/slurm_cluster.sh" up || fail "the cluster did not come up"
export SLURM_CONF="$GIANT_SLURM_DIR/slurm.conf"
cd "$WORK" || fail "no work directory"

# The agents' private files (etcd's data, the credentials' copies) go
# here, where the test can see that none is left.
export TMPDIR="$WORK/tmp"
mkdir -p "$TMPDIR"

# A small model, so that a job takes seconds.
export GIANT_BUILD="$BUILD" GIANT_STEPS=40
export GIANT_GPT_ARGS="--layers 1 --channels 32 --heads 4 --seq 16 --global-batch 6 --print-every 1 --sample 0"
export GIANT_RUN_ARGS="--rdzv-settle 1 --stop-grace 2"
LOSS_RE='loss ([0-9.eE+-]+) -> ([0-9.eE+-]+) over steps 0\.\.'"$GIANT_STEPS"

# run_job NAME: submits train.sbatch, waits (bounded), checks exit 0 and
# a finite loss that fell over the run.
run_job() {
  local out="$WORK/$1.out" rc=0
  timeout "$JOB_TIMEOUT_S" sbatch --wait --job-name="$1" -o "$out" "$ROOT/examples/slurm/train.sbatch" || rc=$?
  echo "== $1: exit $rc"
  cat "$out" 2>/dev/null | tail -n 60
  [ "$rc" -eq 0 ] || fail "$1: the job exited $rc (124: not within $JOB_TIMEOUT_S s)"
  local line
  line=$(grep -Eo "$LOSS_RE" "$out" | tail -n 1)
  [ -n "$line" ] || fail "$1: no final loss line"
  awk -v l="$line" 'BEGIN { split(l, w, " "); a = w[2] + 0; b = w[4] + 0;
    exit !(w[2] ~ /^[0-9.]+$/ && w[4] ~ /^[0-9.]+$/ && b < a && b > 0) }' ||
    fail "$1: the loss is not finite and falling: $line"
  grep -q "Slurm job .* --nnodes 3 --node-id gtnode1 " "$out" || fail "$1: giantrun took no flags from Slurm"
  ls -d "$WORK"/.giantrun-* 2>/dev/null && fail "$1: the shared directory was left behind"
  [ -z "$(ls -A "$TMPDIR")" ] || fail "$1: giantrun left $(ls -A "$TMPDIR") in TMPDIR"
  return 0
}

run_job plain

# Two workers per node (GT_NPROC_PER_NODE); rank 1, one of gtnode1's,
# dies at step 10; --reshape: the others go on without it, and it
# restarts alone and joins.
export GT_NPROC_PER_NODE=2 GT_FAULT="crash:rank=1,at=10"
run_job reshape
grep -q -- "--nproc-per-node 2 (GT_NPROC_PER_NODE)" "$WORK/reshape.out" || fail "reshape: GT_NPROC_PER_NODE not taken"
grep -q "the other workers reshape without it" "$WORK/reshape.out" || fail "reshape: the job did not reshape"
grep -q "reshaped in" "$WORK/reshape.out" || fail "reshape: no worker reshaped"
echo "PASS"
