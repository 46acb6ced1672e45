/* bench/memory: where a rank's device memory goes, and what each way of
 * saving it costs in step time.
 *
 * The example GPT with the byte tokenizer (vocabulary 320), C=768 and 14
 * layers by default (about 100M parameters), at dp=4 on four CPU ranks
 * forked on loopback, one thread each, T=256 and B=1 a rank by default (a
 * step at T=1024, --seq 1024, takes minutes on two cores). The table
 * below is the benchmark: one row per configuration (ZeRO stage, recomputation, attention kind, T,
 * layers). A row that runs trains warm-up + measured steps and reports,
 * per rank, the memory ledger's peak by category (gt_model_memory_ledger)
 * with the process's VmHWM beside it, and rank 0's mean step time. A row
 * marked "estimate" is too large to train here (full attention at
 * T=4096): its bytes are gt_model_device_estimate_ex's, which the ledger
 * matches to the byte where both exist (tests/parallel/test_memory_ledger).
 * A row whose feature this build lacks prints n/a and is skipped.
 *
 * Then the largest model: a binary search on the layer count at the same
 * width under --device-mem-mib (every rank's backend enforces it), where a
 * model "trains" when it builds and runs 2 steps without GT_ENOMEM; once
 * with ZeRO-1 alone, once with ZeRO-3 and block recomputation, and once
 * with ZeRO-2 and block recomputation.
 *
 * Last line, computed from the rows:
 *   zero3_of_theory      ZeRO-3's peak over 16 Psi / dp + its activations
 *   zero3_step_vs_zero1  step time, ZeRO-3 over ZeRO-1
 *   recompute_step_ratio step time, block recomputation over none
 *   attn_mem_ratio_4096  attention bytes at T=4096, tiled over full: saved
 *                        tensors, the layers' scratch and the tiled
 *                        kernel's tiles (attn_bytes)
 *   largest_model_ratio  largest layer count, ZeRO-3 + block over ZeRO-1
 *   zero2_of_theory      ZeRO-2's peak over (4 + 12 / dp) Psi + its activations
 *   zero2_step_vs_zero1, zero2_vs_zero1_peak: step time and peak, ZeRO-2
 *                        over ZeRO-1
 *   largest_model_ratio_zero2_block: largest layer count, ZeRO-2 + block
 *                        over ZeRO-1
 *   zero1_peak_mib, zero1_vs_zero0_peak, largest_layers_zero1: what runs
 *                        in every build
 * (n/a where a row could not run). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_rank.h"
#include "giant/engine/comm.h"
#include "giant/engine/device.h"
#include "giant/engine/grid.h"
#include "giant/engine/model.h"
#include "giant/options.h"
#include "localkit/ranks.h"

/* What this build has. Each is one line to change when its feature lands,
 * with the field it sets (set_features below) named beside it. */
#define MAX_ZERO_STAGE 3       /* the highest ZeRO stage: gt_plan_config.zero */
#define HAVE_RECOMPUTE 1       /* gt_model_config.recompute: none, attention, block */
#define HAVE_TILED_ATTENTION 1 /* gt_model_config.attention: tiled or full */

enum { DP = 4, MAX_ROWS = 16 };

typedef struct row {
  const char *name;
  int zero;              /* ZeRO stage: 0 (none), 1, 2, 3 */
  const char *recompute; /* none, attention, block */
  const char *attention; /* full, tiled */
  int T, L;              /* 0: the --seq and --layers given */
  bool estimate;         /* bytes from the estimate only: too large to train here */
  /* Results. */
  bool na, done;
  double step_s, params;
  size_t peak[DP], kinds[GT_MEM_KINDS]; /* kinds: rank 0's at its peak */
  size_t hwm[DP];                       /* VmHWM, bytes */
} row;

/* The table. Stages, recomputation and attention kinds the build lacks
 * leave their rows n/a. */
static row rows[] = {
    {.name = "zero0", .zero = 0, .recompute = "none", .attention = "tiled"},
    {.name = "zero1", .zero = 1, .recompute = "none", .attention = "tiled"},
    {.name = "zero2", .zero = 2, .recompute = "none", .attention = "tiled"},
    {.name = "zero3", .zero = 3, .recompute = "none", .attention = "tiled"},
    {.name = "zero1_recompute_attention", .zero = 1, .recompute = "attention", .attention = "tiled"},
    {.name = "zero1_recompute_block", .zero = 1, .recompute = "block", .attention = "tiled"},
    {.name = "zero2_recompute_block", .zero = 2, .recompute = "block", .attention = "tiled"},
    {.name = "zero1_full", .zero = 1, .recompute = "none", .attention = "full"},
    {.name = "full_1024", .zero = 1, .recompute = "none", .attention = "full", .T = 1024, .estimate = true},
    {.name = "tiled_1024", .zero = 1, .recompute = "none", .attention = "tiled", .T = 1024, .estimate = true},
    {.name = "full_2048", .zero = 1, .recompute = "none", .attention = "full", .T = 2048, .estimate = true},
    {.name = "tiled_2048", .zero = 1, .recompute = "none", .attention = "tiled", .T = 2048, .estimate = true},
    {.name = "full_4096", .zero = 1, .recompute = "none", .attention = "full", .T = 4096, .estimate = true},
    {.name = "tiled_4096", .zero = 1, .recompute = "none", .attention = "tiled", .T = 4096, .estimate = true},
};
#define NROWS ((int)(sizeof rows / sizeof rows[0]))

typedef struct cfg {
  int L, C, NH, T, B, V, steps, warmup, search_T, budget_mib, threads;
  /* The row a run of ranks works on, and what each rank reports. */
  row r;
  gt_status status[DP];
  char error[DP][256];
} cfg;

static bool feature_ok(const row *r) {
  if (r->zero > MAX_ZERO_STAGE) return false;
  if (strcmp(r->recompute, "none") && !HAVE_RECOMPUTE) return false;
  if (!strcmp(r->attention, "tiled") && !HAVE_TILED_ATTENTION) return false;
  return true;
}

/* The row's knobs on the plan and the model config: the lines that change
 * as the features land. */
static void set_features(const row *r, gt_plan_config *pc, gt_model_config *mc) {
  pc->zero1 = r->zero >= 1;
  pc->zero = r->zero;
#if HAVE_RECOMPUTE
  (void)gt_recompute_parse(r->recompute, &mc->recompute); /* the table's names are valid */
#endif
#if HAVE_TILED_ATTENTION
  mc->attention = strcmp(r->attention, "full") ? GT_ATTENTION_TILED : GT_ATTENTION_FULL;
#endif
  (void)mc;
}

static size_t vm_hwm(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  size_t kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmHWM:", 6)) kb = strtoull(line + 6, NULL, 10);
  if (f) fclose(f);
  return kb << 10;
}

static double mib(double b) { return b / (1 << 20); }

static gpt_config gpt_of(const cfg *c, int L, int T) {
  return (gpt_config){.vocab_size = c->V, .T_max = T, .C = c->C, .NH = c->NH, .L = L, .tie_weights = true};
}

/* One rank of a row: build, train, report. Every rank agrees whether all
 * built before any steps, so a rank short of memory does not leave the
 * others waiting in a collective. */
static int rank_main(int rank, int world, void *arg) {
  cfg *c = arg;
  row *r = &c->r;
  int L = r->L ? r->L : c->L, T = r->T ? r->T : c->T;
  size_t limit = (size_t)c->budget_mib << 20;
  gt_backend *be;
  CHECK_OK(gt_backend_create(
      &(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = c->threads, .device_mem_limit = limit}, &be));
  gt_backend_set_peak_flops(be, 1); /* MFU is not reported here */
  gt_plan_config pc = {.world = world, .rank = rank, .layout = "dp=4"};
  gt_model_config mc = {.B_max = c->B, .T_max = T, .seed = 1};
  set_features(r, &pc, &mc);
  gt_store *store = harness_store();
  gt_plan plan;
  CHECK_OK(gt_plan_resolve(&pc, &plan));
  gt_dist *dist;
  CHECK_OK(gt_dist_create(&(gt_dist_config){.plan = plan,
                                            .store = store,
                                            .generation = "memory",
                                            .comm = {.secret = HARNESS_SECRET, .host = "127.0.0.1"}},
                          &dist));
  gt_model *m = NULL;
  gt_trainer *tr = NULL;
  gt_status s = gt_model_create(be, &mc, &m);
  gt_model_parallel mp = gt_dist_model_parallel(dist);
  gpt_config gc = gpt_of(c, L, T);
  if (s == GT_OK) s = gt_model_set_parallel(m, &mp);
  if (s == GT_OK) s = gpt_add_layers(m, &gc);
  if (s == GT_OK) s = gt_model_build(m);
  gt_trainer_config tc = {.optim = gt_optim_defaults(GT_OPTIM_ADAMW),
                          .grad_clip = 1.0f,
                          .grad_accum = 1,
                          .schedule = {3e-4f, 3e-4f, 0, 0},
                          .dist = dist};
  if (s == GT_OK) s = gt_trainer_create(m, &tc, &tr);
  c->status[rank] = s;
  if (s != GT_OK) snprintf(c->error[rank], sizeof c->error[rank], "%s", gt_last_error());
  float ok = s == GT_OK;
  CHECK_OK(gt_comm_allreduce(gt_grid_world(gt_dist_grid(dist)), &ok, 1, GT_F32, GT_COMM_SUM));
  ok = ok > world - 0.5f; /* every rank built */
  int32_t *tok = bench_tokens((size_t)c->B * T + 1, c->V, 97u * (unsigned)rank);
  gt_batch b = {.B = c->B, .T = T, .inputs = tok, .targets = tok + 1};
  double sum = 0;
  for (int i = 0; ok > 0 && s == GT_OK && i < c->warmup + c->steps; i++) {
    gt_step_stats st;
    s = gt_trainer_step_batches(tr, &b, 1, &st);
    if (s == GT_OK && i >= c->warmup) sum += st.seconds;
  }
  if (ok > 0 && s != GT_OK) {
    c->status[rank] = s;
    snprintf(c->error[rank], sizeof c->error[rank], "%s", gt_last_error());
  }
  gt_memory_ledger led;
  if (m && gt_model_memory_ledger(m, &led) == GT_OK) {
    r->peak[rank] = led.peak_total;
    if (rank == 0) memcpy(r->kinds, led.peak, sizeof led.peak);
  }
  r->hwm[rank] = vm_hwm();
  if (rank == 0) {
    r->step_s = c->steps ? sum / c->steps : 0;
    r->params = m ? (double)gt_model_param_count(m) : 0; /* the whole model's: dp replicates it */
  }
  free(tok);
  gt_trainer_destroy(tr);
  gt_model_destroy(m);
  gt_dist_destroy(dist);
  gt_store_destroy(store);
  gt_backend_destroy(be);
  return RANK_OK;
}

/* Trains row r on DP ranks; GT_OK, GT_ENOMEM (some rank was short of
 * memory) or another failure, printed. */
static gt_status run_row(cfg *c, row *r) {
  c->r = *r;
  memset(c->status, 0, sizeof c->status);
  int codes[DP];
  if (harness_run(DP, rank_main, c, 1800, codes)) {
    fprintf(stderr, "bench_memory: %s: a rank failed (codes %d %d %d %d)\n", r->name, codes[0], codes[1], codes[2],
            codes[3]);
    return GT_EABORTED;
  }
  gt_status s = GT_OK;
  for (int k = 0; k < DP; k++) {
    if (c->status[k] == GT_ENOMEM) return GT_ENOMEM;
    if (c->status[k] != GT_OK && s == GT_OK) {
      fprintf(stderr, "bench_memory: %s: rank %d: %s\n", r->name, k, c->error[k]);
      s = c->status[k];
    }
  }
  *r = c->r;
  return s;
}

/* An estimate-only row: the model built on one process (its parameters
 * padded as at dp=4), its expected peak by category. */
static gt_status estimate_row(const cfg *c, row *r) {
  int L = r->L ? r->L : c->L, T = r->T ? r->T : c->T;
  gt_backend *be;
  GT_TRY(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = c->threads}, &be));
  gt_plan_config pc = {.world = 1, .rank = 0, .layout = "dp=1"};
  gt_model_config mc = {.B_max = c->B, .T_max = T, .seed = 1, .no_init = true};
  set_features(r, &pc, &mc);
  gt_model *m = NULL;
  gt_status s = gt_model_create(be, &mc, &m);
  gpt_config gc = gpt_of(c, L, T);
  if (s == GT_OK) s = gt_model_set_parallel(m, &(gt_model_parallel){.buffer_multiple = DP});
  if (s == GT_OK) s = gpt_add_layers(m, &gc);
  if (s == GT_OK) s = gt_model_build(m);
  gt_device_estimate e;
  if (s == GT_OK)
    s = gt_model_device_estimate_ex(
        m, &(gt_estimate_config){.optim_states = 2, .optim_shards = r->zero >= 1 ? DP : 1, .distributed = true}, &e);
  if (s == GT_OK) {
    for (int k = 0; k < GT_MEM_KINDS; k++) r->kinds[k] = gt_device_estimate_bytes(&e, (gt_mem_kind)k);
    for (int k = 0; k < DP; k++) r->peak[k] = e.total;
    r->params = (double)gt_model_param_count(m);
  }
  gt_model_destroy(m);
  gt_backend_destroy(be);
  return s;
}

static row *find(const char *name) {
  for (int i = 0; i < NROWS; i++)
    if (!strcmp(rows[i].name, name)) return &rows[i];
  return NULL;
}

static size_t max_peak(const row *r) {
  size_t p = 0;
  for (int k = 0; k < DP; k++) p = r->peak[k] > p ? r->peak[k] : p;
  return p;
}

static const char *verdict(gt_status s) { return s == GT_OK ? "trains" : s == GT_ENOMEM ? "out of memory" : "failed"; }

/* The largest layer count that trains (builds and runs 2 steps) under the
 * budget, for a row's knobs at --search-seq: doubling from `from` until a
 * count does not fit, then bisecting. 0: not even one layer; -1: a failure
 * other than memory. */
static int largest(cfg *c, const row *knobs, int from, int *probes) {
  row r = *knobs;
  r.T = c->search_T;
  int lo = 0, hi = from;
  /* Double until a count does not fit, then bisect. */
  for (;;) {
    r.L = hi;
    gt_status s = run_row(c, &r);
    (*probes)++;
    printf("  %s, %d layers at T=%d under %d MiB: %s\n", knobs->name, hi, r.T, c->budget_mib, verdict(s));
    fflush(stdout);
    if (s == GT_ENOMEM) break;
    if (s != GT_OK) return -1;
    lo = hi;
    hi *= 2;
    if (hi > 4096) return lo;
  }
  while (hi - lo > 1) {
    r.L = (lo + hi) / 2;
    gt_status s = run_row(c, &r);
    (*probes)++;
    printf("  %s, %d layers at T=%d under %d MiB: %s\n", knobs->name, r.L, r.T, c->budget_mib, verdict(s));
    fflush(stdout);
    if (s != GT_OK && s != GT_ENOMEM) return -1;
    if (s == GT_OK)
      lo = r.L;
    else
      hi = r.L;
  }
  return lo;
}

static void print_na(const char *key) { printf(" %s=n/a", key); }

/* What attention holds: its saved tensors and the layers' scratch, where
 * full attention's score gradient lives (the scratch's other parts, the
 * same for both kinds, count against the ratio), and the tiled kernel's
 * tiles, 512 KiB a thread, which it takes from host memory per call. */
static double attn_bytes(const row *r) {
  double tiles = strcmp(r->attention, "full") ? 512.0 * 1024 * 1 : 0; /* one thread a rank */
  return (double)(r->kinds[GT_MEM_ATTENTION] + r->kinds[GT_MEM_SCRATCH]) + tiles;
}

int main(int argc, char **argv) {
  cfg *c = harness_shared(sizeof *c);
  *c = (cfg){.L = 14,
             .C = 768,
             .NH = 12,
             .T = 256,
             .B = 1,
             .V = 320,
             .steps = 2,
             .warmup = 1,
             .search_T = 64,
             .budget_mib = 1024,
             .threads = 1};
  int search_from = 8;
  bool no_search = false;
  gt_opt_spec specs[] = {
      {"--layers", GT_OPT_INT, &c->L, 1, 1000},
      {"--channels", GT_OPT_INT, &c->C, 1, 65536},
      {"--heads", GT_OPT_INT, &c->NH, 1, 1024},
      {"--seq", GT_OPT_INT, &c->T, 1, 65536},
      {"--batch", GT_OPT_INT, &c->B, 1, 65536},
      {"--steps", GT_OPT_INT, &c->steps, 1, 1000},
      {"--warmup", GT_OPT_INT, &c->warmup, 0, 1000},
      {"--search-seq", GT_OPT_INT, &c->search_T, 1, 65536},
      {"--search-from", GT_OPT_INT, &search_from, 1, 4096},
      {"--device-mem-mib", GT_OPT_INT, &c->budget_mib, 1, 1 << 30},
      {"--no-search", GT_OPT_FLAG, &no_search, 0, 0},
  };
  int rc = gt_opt_parse(argc, argv, specs, (int)(sizeof specs / sizeof specs[0]),
                        "usage: bench_memory [--layers L --channels C --heads NH --seq T --batch B]\n"
                        "                    [--steps N --warmup W --search-seq T --search-from L\n"
                        "                     --device-mem-mib M --no-search]\n",
                        NULL);
  if (rc >= 0) return rc;
  printf(
      "config: dp=%d (%d processes x %d thread, loopback), byte-level GPT L=%d C=%d NH=%d T=%d V=%d, B=%d per "
      "rank, AdamW, fp32; %d warm-up + %d measured steps a row; largest model at T=%d under --device-mem-mib "
      "%d\n",
      DP, DP, c->threads, c->L, c->C, c->NH, c->T, c->V, c->B, c->warmup, c->steps, c->search_T, c->budget_mib);
  printf("features in this build: ZeRO stages up to %d, recomputation %s, tiled attention %s\n", MAX_ZERO_STAGE,
         HAVE_RECOMPUTE ? "yes" : "no", HAVE_TILED_ATTENTION ? "yes" : "no");
  /* The table's rows are trained without a budget. */
  int budget = c->budget_mib;
  c->budget_mib = 0;
  printf("%-26s %4s %-9s %-5s %5s %3s  %9s %9s  %s\n", "row", "zero", "recompute", "attn", "T", "L", "peak MiB",
         "VmHWM MiB", "step s | rank 0's peak by category");
  for (int i = 0; i < NROWS; i++) {
    row *r = &rows[i];
    int T = r->T ? r->T : c->T, L = r->L ? r->L : c->L;
    printf("%-26s %4d %-9s %-5s %5d %3d  ", r->name, r->zero, r->recompute, r->attention, T, L);
    if (!feature_ok(r)) {
      r->na = true;
      printf("%9s %9s  n/a (not in this build)\n", "n/a", "n/a");
      continue;
    }
    fflush(stdout);
    gt_status s = r->estimate ? estimate_row(c, r) : run_row(c, r);
    if (s != GT_OK) {
      r->na = true;
      printf("%9s %9s  n/a (%s)\n", "n/a", "n/a", gt_status_name(s));
      continue;
    }
    r->done = true;
    size_t hwm = 0;
    for (int k = 0; k < DP; k++) hwm = r->hwm[k] > hwm ? r->hwm[k] : hwm;
    char kinds[512] = "";
    size_t used = 0;
    for (int k = 0; k < GT_MEM_KINDS && used < sizeof kinds; k++) {
      if (!r->kinds[k]) continue;
      int w = snprintf(kinds + used, sizeof kinds - used, "%s%s %.1f", used ? ", " : "",
                       gt_mem_kind_name((gt_mem_kind)k), mib((double)r->kinds[k]));
      used += w < 0 ? 0 : (size_t)w;
    }
    if (r->estimate)
      printf("%9.1f %9s  estimate | %s\n", mib((double)max_peak(r)), "-", kinds);
    else
      printf("%9.1f %9.1f  %.2f | %s\n", mib((double)max_peak(r)), mib((double)hwm), r->step_s, kinds);
    fflush(stdout);
  }
  c->budget_mib = budget;
  for (int i = 0; i < NROWS; i++)
    if (rows[i].done && !rows[i].estimate) {
      printf("model: %.1fM parameters at L=%d (16 bytes each over dp=%d: %.1f MiB a rank)\n", rows[i].params / 1e6,
             c->L, DP, mib(16.0 * rows[i].params / DP));
      break;
    }

  int largest1 = 0, largest2 = 0, largest3 = 0, probes = 0;
  if (!no_search) {
    printf("largest model: layers of C=%d at T=%d, B=%d, under %d MiB per rank\n", c->C, c->search_T, c->B,
           c->budget_mib);
    c->warmup = 0;
    c->steps = 2;
    largest1 = largest(c, find("zero1"), search_from, &probes);
    row z3b = *find("zero3");
    z3b.name = "zero3_recompute_block";
    z3b.recompute = "block";
    if (feature_ok(&z3b)) largest3 = largest(c, &z3b, search_from, &probes);
    printf("largest: ZeRO-1 %d layers; ZeRO-3 + block %s (%d probes)\n", largest1,
           feature_ok(&z3b) ? "measured" : "n/a (not in this build)", probes);
    if (feature_ok(&z3b)) printf("largest: ZeRO-3 + block %d layers\n", largest3);
    /* ZeRO-2 with block recomputation, beside. */
    const row *z2b = find("zero2_recompute_block");
    if (feature_ok(z2b)) {
      largest2 = largest(c, z2b, search_from, &probes);
      printf("largest: ZeRO-2 + block %d layers\n", largest2);
    }
  }

  /* The last line, from the rows. */
  const row *z0 = find("zero0"), *z1 = find("zero1"), *z2 = find("zero2"), *z3 = find("zero3");
  const row *rb = find("zero1_recompute_block");
  const row *full = find("full_4096"), *tiled = find("tiled_4096");
  printf("bench_memory:");
  if (z3->done) {
    /* 16 bytes a parameter (weights, gradients, AdamW's two moments in
     * fp32) over dp, and the activations that stay whole. */
    double theory = 16.0 * z3->params / DP + (double)(z3->kinds[GT_MEM_ACTIVATIONS] + z3->kinds[GT_MEM_ATTENTION]);
    printf(" zero3_of_theory=%.3f", (double)max_peak(z3) / theory);
  } else {
    print_na("zero3_of_theory");
  }
  if (z3->done && z1->done)
    printf(" zero3_step_vs_zero1=%.3f", z3->step_s / z1->step_s);
  else
    print_na("zero3_step_vs_zero1");
  if (rb->done && z1->done)
    printf(" recompute_step_ratio=%.3f", rb->step_s / z1->step_s);
  else
    print_na("recompute_step_ratio");
  if (full->done && tiled->done && full->kinds[GT_MEM_ATTENTION])
    printf(" attn_mem_ratio_4096=%.4f", attn_bytes(tiled) / attn_bytes(full));
  else
    print_na("attn_mem_ratio_4096");
  if (largest1 > 0 && largest3 > 0)
    printf(" largest_model_ratio=%.3f", (double)largest3 / largest1);
  else
    print_na("largest_model_ratio");
  /* What the stages this build has reach, beside the goals' fields. */
  if (z2->done) {
    /* Weights whole, gradients and AdamW's moments over dp. */
    double theory =
        (4.0 + 12.0 / DP) * z2->params + (double)(z2->kinds[GT_MEM_ACTIVATIONS] + z2->kinds[GT_MEM_ATTENTION]);
    printf(" zero2_of_theory=%.3f", (double)max_peak(z2) / theory);
  } else {
    print_na("zero2_of_theory");
  }
  if (z2->done && z1->done)
    printf(" zero2_step_vs_zero1=%.3f zero2_vs_zero1_peak=%.3f", z2->step_s / z1->step_s,
           (double)max_peak(z2) / (double)max_peak(z1));
  else
    print_na("zero2_step_vs_zero1");
  if (largest1 > 0 && largest2 > 0)
    printf(" largest_model_ratio_zero2_block=%.3f", (double)largest2 / largest1);
  else
    print_na("largest_model_ratio_zero2_block");
  if (z1->done)
    printf(" zero1_peak_mib=%.1f", mib((double)max_peak(z1)));
  else
    print_na("zero1_peak_mib");
  if (z0->done && z1->done)
    printf(" zero1_vs_zero0_peak=%.3f", (double)max_peak(z1) / (double)max_peak(z0));
  else
    print_na("zero1_vs_zero0_peak");
  if (largest1 > 0)
    printf(" largest_layers_zero1=%d", largest1);
  else
    print_na("largest_layers_zero1");
  printf("\n");
  return 0;
}
