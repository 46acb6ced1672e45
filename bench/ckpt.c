/* bench/ckpt: what checkpoints cost training.
 *
 * Two data-parallel ranks (one thread each, forked on loopback) train a GPT
 * of about 100 M parameters with AdamW, and in the same run measure:
 *   disk       the disk's sequential write rate: one file the size of a
 *              checkpoint, written and fsynced, buffered and with
 *              O_DIRECT; the faster counts
 *   sync save  a save that waits for its write, fsync and commit
 *   stall      what an asynchronous save holds training up: the save call
 *              and the next step's wait for the snapshot copy
 *              (gt_ckpt_stats.stall_s)
 *              (each the median of --saves saves)
 *   write      checkpoint bytes over the sync save's time less its
 *              snapshot (the stall), against the disk's rate
 *   load       reading the newest checkpoint back (hashes checked)
 *   torch      torch.save + fsync, both ranks at once, of the tensors each
 *              rank's shard holds (by name and size, read from the
 *              checkpoint's manifest: each replica writes its share, so
 *              both sides write one copy of the state in all), where
 *              python3-torch is installed (else n/a); a python peer per
 *              rank that stays up, told when to save, so its start-up is
 *              not timed; per save the slower rank, the median of --saves
 *              saves as on Giant's side
 *   overhead   the throughput lost training N steps saving every 50,
 *              against N steps not saving (N = --steps)
 * Last line: ckpt_stall_ms=<a> sync_save_ms=<b> stall_ratio=<a/b>
 * write_of_disk=<c> vs_torch_save=<d> overhead_every50=<e>. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_peer.h"
#include "bench_rank.h"
#include "bench_stats.h"
#include "ckpt/ckpt_internal.h"
#include "localkit/ranks.h"
#include "giant/ckpt.h"
#include "giant/engine/dist.h"
#include "giant/engine/grid.h"
#include "giant/options.h"
#include "ckpt/peers_api.h"
#include "giant/engine/checkpoint.h"
#include "giant/engine/comm.h"
#include "giant/engine/model.h"
#include "giant/engine/trainer.h"

typedef struct cfg {
  int L, C, NH, T, B, V, steps, saves;
  char dir[512];
  /* results, rank 0's */
  double disk_mbps, disk_buffered, disk_direct, sync_ms, stall_ms, load_ms, bytes, train_plain_s, train_saving_s;
  double sync_rep[100], stall_rep[100]; /* rank 0's, one per save */
  double torch_rep[2][100];             /* each rank's torch.save + fsync, one per save */
  double torch_bytes[2], shard_bytes[2];
  bool torch_ok[2];
  char torch_why[256];
  size_t floats; /* a rank's parameters and moments */
} cfg;

static double now(void) { return gt_now(); }

/* The disk's own rate: `bytes` written in 4 MiB pieces, then fsync; once
 * through the page cache and once with O_DIRECT (where the file system
 * takes it), and the faster of the two is the disk's rate, so that a
 * writer using either is measured against the best the disk does. */
static double disk_pass(const char *path, double bytes, bool direct) {
  size_t chunk = 4 << 20;
  void *buf;
  CHECK(posix_memalign(&buf, 4096, chunk) == 0);
  memset(buf, 0x5a, chunk);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0644);
  if (fd < 0) {
    free(buf);
    return 0; /* no O_DIRECT here */
  }
  double t0 = now();
  for (double done = 0; done < bytes; done += (double)chunk) CHECK(write(fd, buf, chunk) == (ssize_t)chunk);
  CHECK(fsync(fd) == 0);
  double t = now() - t0;
  close(fd);
  unlink(path);
  free(buf);
  return bytes / t / 1e6;
}

static double disk_rate(const char *dir, double bytes, double *buffered, double *direct) {
  char path[600];
  snprintf(path, sizeof path, "%s/disk-probe", dir);
  *buffered = disk_pass(path, bytes, false);
  *direct = disk_pass(path, bytes, true);
  return *buffered > *direct ? *buffered : *direct;
}

/* The tensors rank's shard of the checkpoint in step_dir holds, one line
 * 'name floats' each, for the torch peer to save the same: a tensor whose
 * slices are split between the shards (ZeRO-1's moments) counts this
 * shard's part. Returns the shard's bytes. */
static double write_torch_spec(const char *step_dir, int rank, const char *spec) {
  ck_manifest m;
  CHECK_OK(ck_manifest_read(step_dir, &m));
  char shard[64];
  snprintf(shard, sizeof shard, "shard-%05d.bin", rank);
  int file = -1;
  for (int i = 0; i < m.nfiles; i++)
    if (!strcmp(m.files[i], shard)) file = i;
  CHECK(file >= 0);
  uint64_t *floats = calloc((size_t)m.ntensors + 1, sizeof *floats);
  CHECK(floats != NULL);
  double bytes = 0;
  for (int i = 0; i < m.nslices; i++)
    if (m.slices[i].file == file) {
      floats[m.slices[i].tensor] += m.slices[i].length / sizeof(float);
      bytes += (double)m.slices[i].length;
    }
  FILE *f = fopen(spec, "w");
  CHECK(f != NULL);
  for (int t = 0; t < m.ntensors; t++)
    if (floats[t]) fprintf(f, "%s %llu\n", m.tensors[t].name, (unsigned long long)floats[t]);
  CHECK(fclose(f) == 0);
  free(floats);
  ck_manifest_free(&m);
  return bytes;
}

static void train(gt_trainer *tr, gt_batch *b, int steps, gt_ckpt *every50) {
  for (int s = 0; s < steps; s++) {
    CHECK_OK(gt_trainer_step_batches(tr, b, 1, NULL));
    if (every50 && gt_trainer_step_index(tr) % 50 == 0) CHECK_OK(gt_ckpt_save(every50));
  }
  if (every50) CHECK_OK(gt_ckpt_wait(every50));
}

static int rank_main(int rank, int world, void *arg) {
  cfg *c = arg;
  gpt_config gc = {.vocab_size = c->V, .T_max = c->T, .C = c->C, .NH = c->NH, .L = c->L, .tie_weights = true};
  bench_rank r;
  bench_rank_setup(&r, rank, world, &(bench_rank_config){.layout = "dp=2", .threads = 1, .gpt = gc, .B = 2 * c->B});
  int32_t *tok = bench_tokens((size_t)c->B * c->T + 1, c->V, 31u * (unsigned)rank);
  gt_batch b = {.B = c->B, .T = c->T, .inputs = tok, .targets = tok + 1};
  CHECK_OK(gt_trainer_step_batches(r.tr, &b, 1, NULL)); /* warm up */
  char sync_dir[600], async_dir[600];
  snprintf(sync_dir, sizeof sync_dir, "%s/sync", c->dir);
  snprintf(async_dir, sizeof async_dir, "%s/async", c->dir);
  gt_ckpt *sync, *async;
  CHECK_OK(
      gt_ckpt_create(&(gt_ckpt_config){.dir = sync_dir, .keep = 0, .sync = true, .store = r.store}, r.tr, NULL, &sync));
  CHECK_OK(gt_ckpt_create(&(gt_ckpt_config){.dir = async_dir, .keep = 1, .store = r.store}, r.tr, NULL, &async));
  gt_comm *world_comm = gt_grid_world(gt_dist_grid(r.dist));
  int sync_step = 0;
  for (int k = 0; k < c->saves; k++) {
    CHECK_OK(gt_trainer_step_batches(r.tr, &b, 1, NULL)); /* a new step: a new checkpoint */
    CHECK_OK(gt_comm_barrier(world_comm));
    double t0 = now();
    sync_step = gt_trainer_step_index(r.tr);
    CHECK_OK(gt_ckpt_save(sync));
    CHECK_OK(gt_comm_barrier(world_comm)); /* committed on rank 0 */
    if (rank == 0) c->sync_rep[k] = now() - t0;
    /* The stall: the save call, and the wait of the next step's update
     * for the snapshot copy (the writer makes it while the step computes). */
    gt_ckpt_stats s0, s1;
    gt_ckpt_get_stats(async, &s0);
    CHECK_OK(gt_ckpt_save(async));
    CHECK_OK(gt_trainer_step_batches(r.tr, &b, 1, NULL));
    gt_ckpt_get_stats(async, &s1);
    if (rank == 0) c->stall_rep[k] = s1.stall_s - s0.stall_s;
    CHECK_OK(gt_ckpt_wait(async));
  }
  char step_dir[700];
  snprintf(step_dir, sizeof step_dir, "%s/step-%08d", sync_dir, sync_step);
  if (rank == 0) {
    gt_ckpt_summary sum;
    CHECK_OK(gt_ckpt_describe(step_dir, &sum));
    c->bytes = (double)sum.bytes;
    c->sync_ms = bench_median(c->sync_rep, c->saves) * 1e3;
    c->stall_ms = bench_median(c->stall_rep, c->saves) * 1e3;
    c->disk_mbps = disk_rate(c->dir, c->bytes, &c->disk_buffered, &c->disk_direct);
    c->floats = gt_model_buffer_floats(r.m);
  }
  CHECK_OK(gt_comm_barrier(world_comm));
  double t0 = now();
  CHECK_OK(gt_ckpt_load(sync, NULL, NULL));
  CHECK_OK(gt_comm_barrier(world_comm));
  if (rank == 0) c->load_ms = (now() - t0) * 1e3;
  /* The peer: each rank torch.saves what its shard holds, both at once. */
  char pt[600], spec[600];
  snprintf(pt, sizeof pt, "%s/torch-%d.pt", c->dir, rank);
  snprintf(spec, sizeof spec, "%s/torch-%d.spec", c->dir, rank);
  c->shard_bytes[rank] = write_torch_spec(step_dir, rank, spec);
  bench_peer *peer = NULL;
  gt_status ps = bench_peer_start("ckpt_torch.py", (const char *[]){pt, spec, NULL}, NULL, &peer);
  c->torch_ok[rank] = ps == GT_OK;
  if (ps != GT_OK && rank == 0) snprintf(c->torch_why, sizeof c->torch_why, "%s", gt_last_error());
  CHECK_OK(gt_comm_barrier(world_comm));
  for (int k = 0; c->torch_ok[0] && c->torch_ok[1] && k < c->saves; k++) {
    char line[256];
    CHECK_OK(gt_comm_barrier(world_comm));
    CHECK_OK(bench_peer_ask(peer, "save", line, sizeof line));
    CHECK(sscanf(line, "ms=%lf bytes=%lf", &c->torch_rep[rank][k], &c->torch_bytes[rank]) == 2);
  }
  bench_peer_stop(peer);
  CHECK_OK(gt_comm_barrier(world_comm));
  /* Throughput with and without a save every 50 steps, alternating halves
   * so both see the same machine. */
  double plain = 0, saving = 0;
  for (int half = 0; half < 2; half++) {
    CHECK_OK(gt_comm_barrier(world_comm));
    t0 = now();
    train(r.tr, &b, c->steps / 2, NULL);
    plain += now() - t0;
    t0 = now();
    train(r.tr, &b, c->steps / 2, async);
    saving += now() - t0;
  }
  if (rank == 0) {
    c->train_plain_s = plain;
    c->train_saving_s = saving;
  }
  gt_ckpt_destroy(sync);
  gt_ckpt_destroy(async);
  free(tok);
  bench_rank_teardown(&r);
  return RANK_OK;
}

/* Per save, the slower rank (Giant's save is done when both are); the
 * median over the saves, as Giant's. -1 when torch did not run. */
static double torch_ms(cfg *c) {
  if (!c->torch_ok[0] || !c->torch_ok[1]) return -1;
  double rep[100];
  for (int k = 0; k < c->saves; k++)
    rep[k] = c->torch_rep[0][k] > c->torch_rep[1][k] ? c->torch_rep[0][k] : c->torch_rep[1][k];
  return bench_median(rep, c->saves);
}

int main(int argc, char **argv) {
  cfg defaults = {.L = 12, .C = 768, .NH = 12, .T = 64, .B = 1, .V = 8192, .steps = 100, .saves = 3};
  cfg *c = harness_shared(sizeof *c);
  *c = defaults;
  const char *dir = NULL;
  gt_opt_spec specs[] = {
      {"--layers", GT_OPT_INT, &c->L, 1, 1000},
      {"--channels", GT_OPT_INT, &c->C, 1, 65536},
      {"--heads", GT_OPT_INT, &c->NH, 1, 1024},
      {"--seq", GT_OPT_INT, &c->T, 1, 65536},
      {"--batch", GT_OPT_INT, &c->B, 1, 65536},
      {"--vocab", GT_OPT_INT, &c->V, 2, 1 << 22},
      {"--steps", GT_OPT_INT, &c->steps, 2, 100000},
      {"--saves", GT_OPT_INT, &c->saves, 1, 100},
      {"--dir", GT_OPT_STR, &dir, 0, 0},
  };
  int rc = gt_opt_parse(argc, argv, specs, (int)(sizeof specs / sizeof specs[0]),
                        "usage: bench_ckpt [--layers L --channels C --heads NH --seq T --batch B --vocab V]\n"
                        "                  [--steps N --saves K --dir DIR (default: a new directory in /tmp)]\n",
                        NULL);
  if (rc >= 0) return rc;
  if (dir) {
    snprintf(c->dir, sizeof c->dir, "%s", dir);
  } else if (!mkdtemp(strcpy(c->dir, "/tmp/giant-bench-ckpt-XXXXXX"))) {
    perror("mkdtemp");
    return 1;
  }
  printf(
      "config: dp=2 (2 processes x 1 thread, loopback), GPT L=%d C=%d NH=%d T=%d V=%d, B=%d per rank, AdamW; "
      "%d saves each way (sync, async, torch.save), each figure of theirs the median over the %d; %d steps with and "
      "without a save every 50; checkpoints in %s\n",
      c->L, c->C, c->NH, c->T, c->V, c->B, c->saves, c->saves, c->steps, c->dir);
  int codes[2];
  if (harness_run(2, rank_main, c, 3600, codes)) {
    fprintf(stderr, "bench_ckpt: a rank failed (codes %d %d)\n", codes[0], codes[1]);
    return 1;
  }
  double write_mbps = c->bytes / ((c->sync_ms - c->stall_ms) / 1e3) / 1e6, t = torch_ms(c);
  double overhead = 1.0 - c->train_plain_s / c->train_saving_s;
  printf(
      "checkpoint: %.1f MB written in all, %.1f + %.1f MB by the two ranks (one copy of the %zu floats of "
      "parameters and two moments, each replica writing its share)\n",
      c->bytes / 1e6, c->shard_bytes[0] / 1e6, c->shard_bytes[1] / 1e6, c->floats);
  printf("disk: %.0f MB/s sequential write with fsync (%.0f through the page cache, %.0f with O_DIRECT)\n",
         c->disk_mbps, c->disk_buffered, c->disk_direct);
  printf("sync save: %.1f ms (%.0f MB/s, %.2f of the disk's rate); async stall: %.1f ms; load: %.1f ms\n", c->sync_ms,
         write_mbps, write_mbps / c->disk_mbps, c->stall_ms, c->load_ms);
  if (t > 0)
    printf(
        "torch.save + fsync of each rank's shard tensors, both ranks at once: %.1f ms (the slower rank, median of "
        "%d); %.1f MB written in all (%.1f + %.1f MB), %.3f of Giant's bytes\n",
        t, c->saves, (c->torch_bytes[0] + c->torch_bytes[1]) / 1e6, c->torch_bytes[0] / 1e6, c->torch_bytes[1] / 1e6,
        (c->torch_bytes[0] + c->torch_bytes[1]) / c->bytes);
  else
    printf("torch.save: not measured (%s)\n", c->torch_why[0] ? c->torch_why : "rank 1's peer did not start");
  printf("%d steps: %.2f s without saving, %.2f s saving every 50 steps\n", c->steps, c->train_plain_s,
         c->train_saving_s);
  char vs[32];
  if (t > 0)
    snprintf(vs, sizeof vs, "%.2f", t / c->sync_ms);
  else
    snprintf(vs, sizeof vs, "nan");
  printf(
      "ckpt_stall_ms=%.2f sync_save_ms=%.2f stall_ratio=%.3f write_of_disk=%.2f vs_torch_save=%s "
      "overhead_every50=%.4f\n",
      c->stall_ms, c->sync_ms, c->stall_ms / c->sync_ms, write_mbps / c->disk_mbps, vs, overhead);
  if (!dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", c->dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_ckpt: could not remove %s\n", c->dir);
  }
  return 0;
}
