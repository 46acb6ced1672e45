/* giantrun under a real Slurm (tools/slurm_cluster.sh: slurmctld, munged
 * and three slurmd on emulated nodes, one network namespace each).
 * examples/slurm/train.sbatch trains the GPT on the 3 nodes, each giantrun
 * taking --nnodes, --node-id, --job-id and --nproc-per-node from Slurm and
 * meeting on the first node's etcd: the job must end with exit 0 and a
 * finite loss that falls, leaving nothing in the shared or private
 * directories. Then the same with one worker per node and the worker of
 * the second node killed mid-job (GT_FAULT, one node's workers all lost)
 * under --reshape: the others reshape without it, it restarts alone and
 * joins, and the job still ends with exit 0.
 * Skipped (77) without root, `ip`, Slurm's packages (tools/deps.sh's
 * GIANT_SLURM_PACKAGES, which CI installs) or fault points. The cluster
 * comes down however the test ends. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/gt_skip.h"
#include "common/run_cmd.h"
#include "common/gt_test.h"

/* A job of 40 tiny steps takes ~30 s on two loaded cores; the cluster
 * comes up in ~5 s. Each bound is > 10x. */
#define JOB_TIMEOUT_S 400
#define CLUSTER_TIMEOUT_S 180

static char root[512], slurm_dir[64], work[64], tmpdir[128], conf[128];

static void sh(const char *cmd, double timeout_s, run_result *r) {
  run_cmd((char *[]){"/bin/sh", "-c", (char *)cmd, NULL}, NULL, timeout_s, r);
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  static char text[1 << 20];
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = 0;
  fclose(f);
  return text;
}

/* Submits train.sbatch with the extra environment, waits for it (bounded)
 * and returns its output file's text; fails the test unless it exited 0
 * with a finite loss that fell over its 40 steps, flags taken from Slurm,
 * and nothing left behind. */
static char *run_job(const char *name, char *const env[]) {
  char cmd[2048], out[256];
  snprintf(out, sizeof out, "%s/%s.out", work, name);
  /* Submitted from the work directory: the script's shared files (data,
   * checkpoints, logs) go under the submit directory, and job ids start
   * again with each cluster. */
  snprintf(cmd, sizeof cmd, "cd '%s' && sbatch --wait --job-name=%s -o '%s' '%s/examples/slurm/train.sbatch'", work,
           name, out, root);
  run_result *r = malloc(sizeof *r);
  assert_non_null(r);
  char build[512];
  build_path("", build, sizeof build);
  char *base[16];
  char e_conf[200], e_tmp[200], e_build[600];
  snprintf(e_conf, sizeof e_conf, "SLURM_CONF=%s", conf);
  snprintf(e_tmp, sizeof e_tmp, "TMPDIR=%s", tmpdir);
  snprintf(e_build, sizeof e_build, "GIANT_BUILD=%s", build);
  int k = 0;
  base[k++] = e_conf;
  base[k++] = e_tmp;
  base[k++] = e_build;
  base[k++] = "GIANT_STEPS=40";
  base[k++] = "GIANT_GPT_ARGS=--layers 1 --channels 32 --heads 4 --seq 16 --global-batch 6 --print-every 1 --sample 0";
  base[k++] = "GIANT_RUN_ARGS=--rdzv-settle 1 --stop-grace 2";
  base[k++] = "OMP_NUM_THREADS=1";
  for (int i = 0; env && env[i] && k < 15; i++) base[k++] = env[i];
  base[k] = NULL;
  run_cmd((char *[]){"/bin/sh", "-c", cmd, NULL}, base, JOB_TIMEOUT_S, r);
  char *text = read_file(out);
  if (r->exit_code != 0) {
    if (text) text_print("the job's output", text);
    run_fail(r, "%s: sbatch --wait exited %d (-1: not within %d s)", name, r->exit_code, JOB_TIMEOUT_S);
  }
  free(r);
  if (!text) fail_msg("%s: no output file %s", name, out);
  const char *p = NULL, *q = text;
  while ((q = strstr(q, "] loss ")) != NULL) p = q++;
  float first = NAN, last = NAN;
  int from = -1, to = -1;
  if (!p || sscanf(p, "] loss %f -> %f over steps %d..%d", &first, &last, &from, &to) != 4 || to != 40)
    text_fail("the job's output", text, "%s: no final loss line over steps ..40", name);
  if (!(isfinite(first) && isfinite(last) && last < first && last > 0))
    text_fail("the job's output", text, "%s: the loss is not finite and falling: %g -> %g", name, first, last);
  if (!strstr(text, "--nnodes 3 --node-id gtnode1 "))
    text_fail("the job's output", text, "%s: giantrun took no flags from Slurm", name);
  /* The shared directory of the job's etcd, and the agents' private files. */
  snprintf(cmd, sizeof cmd, "ls -d '%s'/.giantrun-* 2>/dev/null; ls -A '%s'", work, tmpdir);
  run_result *left = malloc(sizeof *left);
  assert_non_null(left);
  sh(cmd, 30, left);
  if (left->output[0]) run_fail(left, "%s: left behind in the shared or private directories", name);
  free(left);
  return text;
}

static void plain(void **state) {
  (void)state;
  run_job("plain", NULL);
}

static void one_node_lost(void **state) {
  (void)state;
  /* One worker per node: rank 1 is all of gtnode2's workers. */
  char *text = run_job("lost", (char *[]){"GT_NPROC_PER_NODE=1", "GT_FAULT=crash:rank=1,at=10", NULL});
  if (!strstr(text, "the other workers reshape without it"))
    text_fail("the job's output", text, "the job did not reshape without the lost node's worker");
  if (!strstr(text, "reshaped in")) text_fail("the job's output", text, "no worker reshaped");
  if (strstr(text, "leaving gen"))
    text_fail("the job's output", text, "the job restarted a generation instead of reshaping");
}

static int setup(void **state) {
  (void)state;
  snprintf(slurm_dir, sizeof slurm_dir, "/tmp/giant-slurm-test.XXXXXX");
  snprintf(work, sizeof work, "/tmp/giant-slurm-work.XXXXXX");
  if (!mkdtemp(slurm_dir) || !mkdtemp(work)) return -1;
  snprintf(tmpdir, sizeof tmpdir, "%s/tmp", work);
  snprintf(conf, sizeof conf, "%s/slurm.conf", slurm_dir);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s' && GIANT_SLURM_DIR='%s' bash '%s/tools/slurm_cluster.sh' up", tmpdir,
           slurm_dir, root);
  run_result *r = malloc(sizeof *r);
  if (!r) return -1;
  sh(cmd, CLUSTER_TIMEOUT_S, r);
  int ok = r->exit_code == 0;
  if (!ok) run_print("the cluster's start", r);
  free(r);
  return ok ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "GIANT_SLURM_DIR='%s' bash '%s/tools/slurm_cluster.sh' down; rm -rf '%s' '%s'", slurm_dir,
           root, slurm_dir, work);
  run_result *r = malloc(sizeof *r);
  if (!r) return -1;
  sh(cmd, CLUSTER_TIMEOUT_S, r);
  int ok = r->exit_code == 0;
  if (!ok) run_print("the cluster's teardown", r);
  free(r);
  return ok ? 0 : -1;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_launch_slurm SOURCE_DIR\n");
    return 2;
  }
  snprintf(root, sizeof root, "%s", argv[1]);
  if (geteuid() != 0) {
    printf("skipped: needs root (network namespaces)\n");
    return 77;
  }
  SKIP_PROGRAM_WITHOUT_FAULTS();
  const char *need[] = {"ip",       "slurmctld", "slurmd", "munged",  "sbatch",
                        "scontrol", "srun",      "sinfo",  "nsenter", "etcd"};
  for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", need[i]);
    if (system(cmd) != 0) {
      printf("skipped: no %s: install tools/deps.sh's GIANT_SLURM_PACKAGES (and iproute2, etcd-server)\n", need[i]);
      return 77;
    }
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(plain), cmocka_unit_test(one_node_lost)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
