/* bench/offload: what offloading buys and what it costs, in one run.
 *
 *  1. Size: the largest GPT (in parameters, by depth at a fixed width) that
 *     trains under a fixed device budget (--budget-mib, enforced by the
 *     backend), without offloading and with a window of --window layers,
 *     at one row of --size-seq tokens (the state, not the activations, is
 *     what offloading moves); the ratio is offload_size_ratio. The search
 *     stops at --max-layers.
 *  2. Speed: a GPT that fits both ways (--speed-layers deep), median step
 *     time without offloading over the median with it, updating after
 *     backward or layer by layer during it (update_per_layer), the better
 *     of the two: offload_speed_ratio (1.0 means free). No clipping, which
 *     the layer-by-layer update needs; the norm is summed all the same.
 *     Runs alternate, three rounds each, so the machine's drift falls on
 *     all. All three must reach the same loss, bit for bit.
 *  3. Hidden copies: of the time the transfers of the offloaded speed run
 *     take (their bytes over the one-thread memcpy bandwidth measured here,
 *     as the copy engine is one thread), the fraction compute did not wait
 *     for (gt_offload_stats.wait_seconds), over the steps after the first
 *     (as the step time: the first has nothing prefetched), the median of
 *     the three rounds: copy_hidden.
 *  4. The CPU AdamW on --adam-params parameters against PyTorch's
 *     torch.optim.AdamW(foreach=True) on the same count and threads, and
 *     against the memory-bandwidth bound: 28 bytes moved per parameter over
 *     the rate of a loop with the update's own loads and stores, measured
 *     in the same rounds (offload_adam.c).
 *  5. The disk tier: the AdamW step of a GPT (--disk-layers blocks of
 *     --disk-channels) with its state in a file in --disk-dir, against the
 *     step in memory and against the time the state's bytes alone take to
 *     be written and read through that file (offload_disk.c).
 *
 * The last line: offload_size_ratio=<x> offload_speed_ratio=<y>
 * copy_hidden=<h> cpu_adam_vs_torch=<z> cpu_adam_of_bw=<w>. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_stats.h"
#include "giant/giant.h"
#include "giant/options.h"
#include "gpt.h"
#include "offload_adam.h"
#include "offload_disk.h"
#include "giant/engine/device.h"
#include "giant/engine/model.h"
#include "giant/engine/trainer.h"

typedef struct bench_args {
  int channels, heads, seq, batch, size_seq, threads, budget_mib, max_layers, speed_layers, speed_steps, window;
  int adam_params_m, disk_layers, disk_channels;
  const char *disk_dir;
} bench_args;

typedef struct run_out {
  size_t params;
  double step_s;       /* median */
  gt_offload_stats os; /* the transfers and waits of the steps after the first */
  int os_steps;        /* how many steps that is */
  float loss0, loss1;
} run_out;

/* Builds a GPT of `layers` blocks under `budget` bytes of device memory
 * (0: none), offloaded with `window` (0: not), and trains `steps` steps. */
static gt_status train(const bench_args *a, int B, int T, int layers, int window, bool per_layer, size_t budget,
                       int steps, run_out *out) {
  memset(out, 0, sizeof *out);
  gt_backend *be = NULL;
  gt_model *m = NULL;
  gt_trainer *tr = NULL;
  gt_status s = gt_backend_create(
      &(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = a->threads, .device_mem_limit = budget}, &be);
  if (s != GT_OK) return s;
  gt_backend_set_peak_flops(be, 1e12); /* MFU is not what this measures */
  gt_model_config mc = {.B_max = B, .T_max = T, .seed = 1, .offload_window = window};
  gpt_config gc = {.vocab_size = 256, .T_max = T, .C = a->channels, .NH = a->heads, .L = layers, .tie_weights = true};
  /* No clipping, so that the update may go layer by layer: the norm is
   * summed either way, and a factor of 1 costs what another would. */
  gt_trainer_config tc = {.optim = gt_optim_defaults(GT_OPTIM_ADAMW),
                          .grad_accum = 1,
                          .schedule = (gt_lr_schedule){1e-3f, 1e-4f, 0, steps},
                          .update_per_layer = per_layer};
  s = gt_model_create(be, &mc, &m);
  if (s == GT_OK) s = gpt_add_layers(m, &gc);
  if (s == GT_OK) s = gt_model_build(m);
  if (s == GT_OK) {
    out->params = gt_model_param_count(m);
    s = gt_trainer_create(m, &tc, &tr);
  }
  size_t n = (size_t)B * (size_t)T;
  int32_t *in = malloc(n * sizeof *in), *tg = malloc(n * sizeof *tg);
  double *times = calloc((size_t)steps + 1, sizeof *times);
  if (s == GT_OK && (!in || !tg || !times)) s = gt_errorf(GT_ENOMEM, "out of host memory");
  for (int k = 0; s == GT_OK && k < steps; k++) {
    for (size_t i = 0; i < n; i++) {
      in[i] = (int32_t)((i * 31 + (size_t)k * 7) % 256);
      tg[i] = (in[i] + 1) % 256;
    }
    gt_batch b = {.B = B, .T = T, .inputs = in, .targets = tg};
    gt_step_stats st;
    s = gt_trainer_step_batches(tr, &b, 1, &st);
    if (s == GT_OK) {
      times[k] = st.seconds;
      out->loss1 = st.loss;
    }
    if (s == GT_OK && k == 0) {
      out->loss0 = st.loss;
      out->os = gt_model_offload_stats(m);
    }
  }
  if (s == GT_OK) {
    /* The first step allocates and fetches everything, with nothing
     * prefetched: leave it out of the times and of the transfers. */
    int from = steps > 2 ? 1 : 0;
    bench_sort(times + from, steps - from);
    out->step_s = times[from + (steps - from) / 2];
    gt_offload_stats first = out->os, all = gt_model_offload_stats(m);
    if (!from) first = (gt_offload_stats){0};
    out->os = all;
    out->os.fetches -= first.fetches;
    out->os.bytes_in -= first.bytes_in;
    out->os.bytes_out -= first.bytes_out;
    out->os.wait_seconds -= first.wait_seconds;
    out->os.wait_grad_seconds -= first.wait_grad_seconds;
    out->os_steps = steps - from;
  }
  free(in);
  free(tg);
  free(times);
  gt_trainer_destroy(tr);
  gt_model_destroy(m);
  gt_backend_destroy(be);
  return s;
}

/* The deepest model (up to --max-layers) that trains two steps under the
 * budget; its parameter count, or 0 when not even one block fits. */
static size_t largest(const bench_args *a, int window, size_t budget, int *layers_out) {
  run_out r;
  int ok = 0, bad = a->max_layers + 1;
  size_t best = 0;
  /* Doubling, then bisection between the last depth that fit and the
   * first that did not. */
  for (int L = 1; L <= a->max_layers; L = L * 2 > a->max_layers && L < a->max_layers ? a->max_layers : L * 2) {
    if (train(a, 1, a->size_seq, L, window, false, budget, 2, &r) != GT_OK) {
      bad = L;
      break;
    }
    ok = L;
    best = r.params;
    if (L == a->max_layers) break;
  }
  while (bad - ok > 1) {
    int mid = (ok + bad) / 2;
    if (train(a, 1, a->size_seq, mid, window, false, budget, 2, &r) == GT_OK) {
      ok = mid;
      best = r.params;
    } else {
      bad = mid;
    }
  }
  *layers_out = ok;
  return best;
}

/* memcpy bandwidth of one thread, counting bytes read and written, as the
 * copy engine's thread moves them. */
static double one_thread_memcpy_gbps(void) {
  size_t n = (size_t)256 << 20;
  char *x = malloc(n), *y = malloc(n);
  if (!x || !y) {
    free(x);
    free(y);
    return 0;
  }
  memset(x, 1, n);
  memset(y, 2, n);
  double best = 0;
  for (int k = 0; k < 5; k++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    memcpy(y, x, n);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (2.0 * (double)n / s / 1e9 > best) best = 2.0 * (double)n / s / 1e9;
  }
  free(x);
  free(y);
  return best;
}

int main(int argc, char **argv) {
  bench_args a = {.channels = 256,
                  .heads = 4,
                  .seq = 64,
                  .batch = 2,
                  .size_seq = 32,
                  .threads = 1,
                  .budget_mib = 48,
                  .max_layers = 96,
                  .speed_layers = 6,
                  .speed_steps = 12,
                  .window = 3,
                  .adam_params_m = 100,
                  .disk_layers = 8,
                  .disk_channels = 512,
                  .disk_dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp"};
  gt_opt_spec specs[] = {
      {"--channels", GT_OPT_INT, &a.channels, 16, 8192},
      {"--heads", GT_OPT_INT, &a.heads, 1, 128},
      {"--seq", GT_OPT_INT, &a.seq, 1, 8192},
      {"--batch", GT_OPT_INT, &a.batch, 1, 1024},
      {"--size-seq", GT_OPT_INT, &a.size_seq, 1, 8192},
      {"--threads", GT_OPT_INT, &a.threads, 0, 1024},
      {"--budget-mib", GT_OPT_INT, &a.budget_mib, 1, 1 << 20},
      {"--max-layers", GT_OPT_INT, &a.max_layers, 1, 4096},
      {"--speed-layers", GT_OPT_INT, &a.speed_layers, 1, 4096},
      {"--speed-steps", GT_OPT_INT, &a.speed_steps, 3, 10000},
      {"--window", GT_OPT_INT, &a.window, 1, 4096},
      {"--adam-params-m", GT_OPT_INT, &a.adam_params_m, 0, 100000},
      {"--disk-layers", GT_OPT_INT, &a.disk_layers, 0, 4096},
      {"--disk-channels", GT_OPT_INT, &a.disk_channels, 16, 8192},
      {"--disk-dir", GT_OPT_STR, &a.disk_dir, 0, 0},
  };
  int rc = gt_opt_parse(argc, argv, specs, (int)(sizeof specs / sizeof specs[0]),
                        "usage: bench_offload [--channels C] [--heads NH] [--seq T] [--batch B] [--size-seq T]\n"
                        "  [--threads N]\n"
                        "  [--budget-mib N] [--max-layers L] [--speed-layers L] [--speed-steps N] [--window W]\n"
                        "  [--adam-params-m M] [--disk-layers L] [--disk-channels C] [--disk-dir DIR]\n"
                        "  (see bench/offload.c)\n",
                        NULL);
  if (rc >= 0) return rc;
  gt_status s;
  size_t budget = (size_t)a.budget_mib << 20;
  printf(
      "bench_offload: GPT C=%d NH=%d, AdamW, fp32, %d threads; size: B=1 T=%d under a device budget of %d MiB; "
      "speed: B=%d T=%d; offload window %d, prefetch %d\n",
      a.channels, a.heads, a.threads, a.size_seq, a.budget_mib, a.batch, a.seq, a.window, a.window - 1);

  int l_no = 0, l_off = 0;
  size_t p_no = largest(&a, 0, budget, &l_no);
  size_t p_off = largest(&a, a.window, budget, &l_off);
  double size_ratio = p_no ? (double)p_off / (double)p_no : 0;
  printf("size: without offloading %d layers, %zu parameters; with %d layers, %zu parameters%s; ratio %.2f\n", l_no,
         p_no, l_off, p_off, l_off == a.max_layers ? " (the search's limit, --max-layers)" : "", size_ratio);

  run_out no[3], off[3], layer[3];
  for (int round = 0; round < 3; round++) {
    s = train(&a, a.batch, a.seq, a.speed_layers, 0, false, 0, a.speed_steps, &no[round]);
    if (s == GT_OK) s = train(&a, a.batch, a.seq, a.speed_layers, a.window, false, 0, a.speed_steps, &off[round]);
    if (s == GT_OK) s = train(&a, a.batch, a.seq, a.speed_layers, a.window, true, 0, a.speed_steps, &layer[round]);
    if (s != GT_OK) {
      fprintf(stderr, "bench_offload: speed run: %s\n", gt_last_error());
      return 1;
    }
    if (off[round].loss1 != no[round].loss1 || layer[round].loss1 != no[round].loss1) {
      fprintf(stderr, "bench_offload: offloaded losses %.9g, %.9g differ from %.9g\n", off[round].loss1,
              layer[round].loss1, no[round].loss1);
      return 1;
    }
  }
  double t_no[3], t_off[3], t_layer[3];
  for (int k = 0; k < 3; k++) {
    t_no[k] = no[k].step_s;
    t_off[k] = off[k].step_s;
    t_layer[k] = layer[k].step_s;
  }
  double m_no = bench_median(t_no, 3), m_off = bench_median(t_off, 3), m_layer = bench_median(t_layer, 3);
  /* The better of the two ways to update is what offloading costs. */
  double best = m_layer < m_off ? m_layer : m_off;
  double speed_ratio = m_no / best;
  printf(
      "speed: %d layers, %zu parameters: %.2f ms a step without offloading; offloaded %.2f ms updating after "
      "backward, %.2f ms updating layer by layer; ratio %.3f\n",
      a.speed_layers, no[0].params, 1e3 * m_no, 1e3 * m_off, 1e3 * m_layer, speed_ratio);

  /* Each round's transfers per step (after the first), at one thread's
   * memcpy speed, against its waits per step; the median of the rounds. */
  double bw = one_thread_memcpy_gbps() * 1e9, hid[3], moved = 0, copy_s = 0, wait_s = 0, wait_g = 0;
  for (int k = 0; k < 3; k++) {
    const gt_offload_stats *os = &off[k].os;
    double steps = off[k].os_steps > 0 ? off[k].os_steps : 1;
    double mv = (double)(os->bytes_in + os->bytes_out) / steps, cs = mv / bw, ws = os->wait_seconds / steps;
    hid[k] = cs > 0 ? fmax(0, 1.0 - ws / cs) : 0;
    if (k == 1) {
      moved = mv;
      copy_s = cs;
      wait_s = ws;
      wait_g = os->wait_grad_seconds / steps;
    }
  }
  double hidden = bench_median(hid, 3);
  printf(
      "copies: %.1f MiB a step (steps after the first), %.2f ms at %.1f GB/s (one thread); compute waited %.2f ms "
      "a step, %.2f of them for gradients (middle round); hidden %.3f, %.3f, %.3f in the three rounds, median "
      "%.3f\n",
      moved / (1 << 20), 1e3 * copy_s, bw / 1e9, 1e3 * wait_s, 1e3 * wait_g, hid[0], hid[1], hid[2], hidden);

  double adam_vs_torch = 0, adam_of_bw = 0;
  if (a.adam_params_m > 0) {
    bench_adam_result ar;
    s = bench_offload_adam((size_t)a.adam_params_m * 1000000, a.threads > 0 ? a.threads : 0, 7, &ar);
    if (s != GT_OK) {
      fprintf(stderr, "bench_offload: CPU AdamW: %s\n", gt_last_error());
      return 1;
    }
    adam_vs_torch = ar.vs_torch;
    adam_of_bw = ar.of_bw;
    printf(
        "cpu adamw: %d M parameters: %.1f ms; torch.optim.AdamW(foreach) %.1f ms; memcpy %.1f GB/s, the update's "
        "stream %.1f GB/s; x%.2f torch, %.2f of the stream's bandwidth bound\n",
        a.adam_params_m, 1e3 * ar.gt_s, 1e3 * ar.torch_s, ar.memcpy_gbps, ar.stream_gbps, adam_vs_torch, adam_of_bw);
  }
  if (a.disk_layers > 0) {
    disk_result d;
    s = bench_offload_disk(a.disk_dir, a.disk_layers, a.disk_channels, a.threads, &d);
    if (s != GT_OK) {
      fprintf(stderr, "bench_offload: disk tier: %s\n", gt_last_error());
      return 1;
    }
    double bound = d.io_s > d.memory_s ? d.io_s : d.memory_s;
    printf(
        "disk tier: %zu parameters, %.0f MiB of AdamW state in %s: a step %.1f ms in memory, %.1f ms on disk "
        "(x%.2f); the state's bytes alone %.1f ms through the file; on disk at %.2f of max(update, I/O), "
        "%.2f of their sum\n",
        d.params, 8.0 * (double)d.params / (1 << 20), a.disk_dir, 1e3 * d.memory_s, 1e3 * d.disk_s,
        d.disk_s / d.memory_s, 1e3 * d.io_s, bound / d.disk_s, (d.memory_s + d.io_s) / d.disk_s);
  }
  printf(
      "offload_size_ratio=%.2f offload_speed_ratio=%.3f copy_hidden=%.3f cpu_adam_vs_torch=%.2f "
      "cpu_adam_of_bw=%.2f\n",
      size_ratio, speed_ratio, hidden, adam_vs_torch, adam_of_bw);
  return 0;
}
