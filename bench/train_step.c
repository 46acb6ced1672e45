/* bench/train_step: one GPT training step, Giant against PyTorch.
 *
 * Trains GPT, or with --model llama the Llama of examples/llama
 * (grouped-query attention, --kv-heads default NH/2, SwiGLU of
 * --mlp-hidden default 2/3 of 4C rounded up to 32, untied head; its peer
 * a plain nn.Module, llama_torch.py), (default L=4, C=256, NH=4, T=128,
 * B=8, V=8192, AdamW,
 * global-norm clipping) in fp32 or mixed bf16 precision (--precision) and
 * reports ms/step, tokens/s, GFLOP/s and MFU against the peak of the same
 * kind of matrix product (fp32 gemm, or bf16 x bf16 -> fp32 gemm_ex)
 * measured in the same run. When python3 with torch is available (and, on
 * --device cuda, torch sees a GPU), the same model and step run in PyTorch
 * on the same device and precision (torch.autocast for bf16), interleaved
 * round by round with Giant and the peak measurement (the machine's speed
 * drifts), and the ratio is printed. Before timing, both start from
 * identical weights and the same batch, and their losses over three steps
 * must agree.
 *
 * FLOPs per step = 3 x forward, forward = 2 x (multiply-adds of every
 * matrix product): 6*N*tokens for the N weights used in matrix products
 * (the tied output matrix included, the embedding lookup not), plus the
 * attention term 12*L*T*C per token (QK^T and AV over the full T x T);
 * the layers' own counts (gt_model_flops).
 *
 * The peer runs on the CPU under each of its thread settings (torch's
 * default, one pool in BLAS, torch's own pool: bench_torch.h), each timed
 * every round over the same steps as Giant; the best median is its figure.
 * The threads each side actually kept busy are printed beside what it was
 * told.
 *
 * The last line is machine-readable:
 * vs_pytorch=<ratio> mfu=<fraction> cpu=<model name>/<ISA flags>
 * kernels=<the level Giant chose>; with --model llama it starts
 * llama_vs_pytorch=. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_cpu.h"
#include "bench_stats.h"
#include "bench_torch.h"
#include "giant/options.h"
#include "gpt.h"
#include "llama.h"
#include "giant/engine/device.h"
#include "giant/engine/trainer.h"

typedef struct args {
  const char *device, *precision_name, *model;
  gt_precision precision;
  int L, C, NH, T, B, V, threads, rounds, steps, check_steps;
  int kv_heads, mlp_hidden; /* llama */
  bool no_torch, llama;
} args;

static const char *usage =
    "usage: bench_train_step [options]\n"
    "  --device NAME   cpu or cuda (default cpu)\n"
    "  --model M       gpt or llama (examples/llama; default gpt)\n"
    "  --kv-heads K    llama: key/value heads (default NH/2, or NH when odd)\n"
    "  --mlp-hidden H  llama: the MLP's width (default 2/3 of 4C, rounded up to 32)\n"
    "  --precision P   fp32 or bf16: matrix products in fp32, or bf16 with fp32\n"
    "                  accumulation and master weights (default fp32)\n"
    "  --layers L --channels C --heads NH --seq T --batch B --vocab V\n"
    "                  (default 4, 256, 4, 128, 8, 8192)\n"
    "  --threads N     CPU threads (default 2)\n"
    "  --rounds R      interleaved measurement rounds (default 5)\n"
    "  --steps N       timed steps per round and framework (default 5)\n"
    "  --no-torch      skip the PyTorch baseline\n";

typedef struct giant_run {
  gt_backend *be;
  gt_model *m;
  gt_trainer *tr;
} giant_run;

static void giant_free(giant_run *g) {
  gt_trainer_destroy(g->tr);
  gt_model_destroy(g->m);
  g->tr = NULL;
  g->m = NULL;
}

static llama_config llama_of(const args *a) {
  return (llama_config){.vocab_size = a->V,
                        .T_max = a->T,
                        .C = a->C,
                        .NH = a->NH,
                        .L = a->L,
                        .n_kv_heads = a->kv_heads,
                        .mlp_hidden = a->mlp_hidden};
}

static gt_status giant_setup(giant_run *g, const args *a) {
  gpt_config gc = {.vocab_size = a->V, .T_max = a->T, .C = a->C, .NH = a->NH, .L = a->L, .tie_weights = true};
  llama_config lc = llama_of(a);
  gt_model_config mc = {.B_max = a->B, .T_max = a->T, .seed = 1};
  GT_TRY(gt_model_create(g->be, &mc, &g->m));
  GT_TRY(a->llama ? llama_add_layers(g->m, &lc) : gpt_add_layers(g->m, &gc));
  GT_TRY(gt_model_build(g->m));
  gt_trainer_config tc = {.optim = gt_optim_defaults(GT_OPTIM_ADAMW),
                          .grad_clip = 1.0f,
                          .grad_accum = 1,
                          .precision = a->precision,
                          .schedule = {.lr_max = 3e-4f, .lr_min = 3e-4f, .warmup = 0, .total = 0}};
  return gt_trainer_create(g->m, &tc, &g->tr);
}

static int die(const char *what) {
  fprintf(stderr, "bench_train_step: %s: %s\n", what, gt_last_error());
  return 1;
}

int main(int argc, char **argv) {
  args a = {.device = "cpu",
            .precision_name = "fp32",
            .model = "gpt",
            .L = 4,
            .C = 256,
            .NH = 4,
            .T = 128,
            .B = 8,
            .V = 8192,
            .threads = 2,
            .rounds = 5,
            .steps = 5,
            .check_steps = 3};
  gt_opt_spec specs[] = {
      {"--device", GT_OPT_STR, &a.device, 0, 0},
      {"--precision", GT_OPT_STR, &a.precision_name, 0, 0},
      {"--layers", GT_OPT_INT, &a.L, 1, 1000},
      {"--channels", GT_OPT_INT, &a.C, 1, 65536},
      {"--heads", GT_OPT_INT, &a.NH, 1, 1024},
      {"--seq", GT_OPT_INT, &a.T, 1, 65536},
      {"--batch", GT_OPT_INT, &a.B, 1, 65536},
      {"--vocab", GT_OPT_INT, &a.V, 2, 1 << 22},
      {"--threads", GT_OPT_INT, &a.threads, 1, 1024},
      {"--rounds", GT_OPT_INT, &a.rounds, 1, 1000},
      {"--steps", GT_OPT_INT, &a.steps, 1, 100000},
      {"--no-torch", GT_OPT_FLAG, &a.no_torch, 0, 0},
      {"--model", GT_OPT_STR, &a.model, 0, 0},
      {"--kv-heads", GT_OPT_INT, &a.kv_heads, 0, 1024},
      {"--mlp-hidden", GT_OPT_INT, &a.mlp_hidden, 0, 1 << 24},
  };
  int rc = gt_opt_parse(argc, argv, specs, (int)(sizeof specs / sizeof specs[0]), usage, NULL);
  if (rc >= 0) return rc;
  rc = 0;
  if (strcmp(a.model, "gpt") && strcmp(a.model, "llama")) {
    fprintf(stderr, "bench_train_step: --model: '%s' is not a model here; use gpt or llama\n", a.model);
    return 2;
  }
  a.llama = !strcmp(a.model, "llama");
  if (a.llama && !a.kv_heads) a.kv_heads = a.NH % 2 ? a.NH : a.NH / 2;
  if (a.llama) {
    llama_config lc = llama_of(&a);
    a.mlp_hidden = llama_mlp_hidden(&lc);
  }
  if (gt_precision_parse(a.precision_name, &a.precision) != GT_OK) {
    fprintf(stderr, "bench_train_step: --precision: %s\n", gt_last_error());
    return 2;
  }
  gt_backend_config bc;
  if (gt_device_parse(a.device, &bc) != GT_OK) {
    fprintf(stderr, "%s\n", gt_last_error());
    return 2;
  }
  bc.num_threads = a.threads;
  giant_run g = {0};
  if (gt_backend_create(&bc, &g.be) != GT_OK) return die("backend");
  if (giant_setup(&g, &a) != GT_OK) return die("model");

  /* One fixed batch of random tokens, the same for both frameworks. */
  size_t BT = (size_t)a.B * (size_t)a.T;
  int32_t *tokens = malloc((BT + 1) * sizeof *tokens);
  uint64_t x = 42;
  for (size_t i = 0; i <= BT; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    tokens[i] = (int32_t)((x >> 33) % (uint64_t)a.V);
  }
  gt_batch batch = {.B = a.B, .T = a.T, .inputs = tokens, .targets = tokens + 1};

  double flops = 3.0 * gt_model_flops(g.m, a.B, a.T);
  const char *prec = gt_precision_name(a.precision);
  bool on_cpu = gt_backend_kind(g.be) == GT_DEVICE_CPU;
  if (a.llama) printf("config: Llama (NKV=%d, MLP %d, untied) ", a.kv_heads, a.mlp_hidden);
  printf(
      "%s L=%d C=%d NH=%d T=%d B=%d V=%d, precision %s%s, AdamW + clip 1.0, device %s", a.llama ? "" : "config: GPT",
      a.L, a.C, a.NH, a.T, a.B, a.V, prec,
      a.precision == GT_PRECISION_BF16 ? " (bf16 matrix products, fp32 accumulation, master weights, optimizer)" : "",
      gt_backend_name(g.be));
  if (on_cpu) printf(", %d threads", gt_backend_num_threads(g.be));
  printf("\n");
  /* Chosen at run time from what the processor reports (GT_CPU_KERNELS overrides). */
  printf("kernels: %s: %s\n", on_cpu ? "cpu" : gt_backend_name(g.be), gt_backend_kernels(g.be));
  printf("params: %zu (%s); FLOPs/step: %.3f G = 6*N*tokens + 12*L*T*C*tokens (N = matmul weights)\n",
         gt_model_param_count(g.m), a.llama ? "untied" : "tied", flops / 1e9);

  bench_torch *torch = NULL;
  if (!a.no_torch) {
    char dir[] = "/tmp/giant-bench-XXXXXX";
    if (!mkdtemp(dir)) return die("mkdtemp");
    if (bench_torch_export(g.m, tokens, BT + 1, dir) != GT_OK) return die("exporting weights");
    if (bench_torch_start(dir, &(bench_torch_shape){a.B, a.T, a.V, a.C, a.NH, a.L, a.llama, a.kv_heads, a.mlp_hidden},
                          a.threads, on_cpu ? "cpu" : gt_backend_name(g.be), prec, &torch) != GT_OK) {
      printf("pytorch: not available (%s); Giant alone\n", gt_last_error());
      torch = NULL;
    }
    /* Loss agreement over the first steps, from identical weights, for
     * each of the peer's thread settings (a setting changes only the
     * summation order). */
    if (torch) {
      float gl[8], tl[8];
      for (int i = 0; i < a.check_steps; i++) {
        gt_step_stats st;
        if (gt_trainer_step_batches(g.tr, &batch, 1, &st) != GT_OK) return die("step");
        gl[i] = st.loss;
      }
      /* fp32: the same arithmetic up to summation order. bf16: Giant
       * rounds only the operands of its products to bf16, while autocast
       * also stores the products' outputs in bf16, so the losses differ by
       * bf16 roundings (relative 2^-9 each) that partly average out: 2e-2
       * holds them and still catches a wrong model or step. */
      double tol = a.precision == GT_PRECISION_BF16 ? 2e-2 : 1e-4;
      double worst = 0;
      for (int k = 0; k < bench_torch_settings(torch); k++) {
        if (bench_torch_losses(torch, k, a.check_steps, tl) != GT_OK) return die("pytorch losses");
        for (int i = 0; i < a.check_steps; i++) {
          double rel = fabs((double)gl[i] - tl[i]) / fabs((double)tl[i]);
          if (rel > worst) worst = rel;
          if (k == 0) printf("check step %d: giant loss %.6f, pytorch loss %.6f\n", i, gl[i], tl[i]);
        }
      }
      printf(
          "losses over %d steps from identical weights (%s, %d pytorch setting(s)): max relative difference %.2e "
          "(%s %.0e)\n",
          a.check_steps, prec, bench_torch_settings(torch), worst, worst <= tol ? "agree within" : "DISAGREE beyond",
          tol);
      if (worst > tol) rc = 3;
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  }

  /* A GPU reaches its peak only on large products; n=1024 would leave it
   * mostly idle and overstate MFU. */
  int peak_n = on_cpu ? 1024 : 8192;
  int nt = torch ? bench_torch_settings(torch) : 0;
  double *peak = calloc((size_t)a.rounds, sizeof(double)), *gms = calloc((size_t)a.rounds, sizeof(double));
  double *tms = calloc((size_t)a.rounds * (size_t)(nt ? nt : 1), sizeof(double));
  int gbusy = 0, tbusy[8] = {0};
  /* Warm-up: first touches of memory and thread start-up. */
  for (int i = 0; i < 2; i++)
    if (gt_trainer_step_batches(g.tr, &batch, 1, NULL) != GT_OK) return die("step");
  /* Every round times Giant and each of the peer's settings over the same
   * number of steps, so the peer's best is chosen from as many steps as
   * Giant gets. */
  for (int r = 0; r < a.rounds; r++) {
    if (gt_backend_measure_peak_ex(g.be, a.precision, peak_n, 0.5, &peak[r]) != GT_OK) return die("peak");
    bench_cpu_times before, after;
    bench_cpu_times_read(0, &before);
    double t0 = gt_now();
    for (int i = 0; i < a.steps; i++)
      if (gt_trainer_step_batches(g.tr, &batch, 1, NULL) != GT_OK) return die("step");
    gms[r] = (gt_now() - t0) / a.steps * 1e3;
    bench_cpu_times_read(0, &after);
    gbusy = bench_cpu_times_busy(&before, &after);
    printf("round %d: %s gemm peak %.1f GFLOP/s | giant %.1f ms/step", r, prec, peak[r] / 1e9, gms[r]);
    for (int k = 0; k < nt; k++) {
      if (bench_torch_time(torch, k, a.steps, &tms[k * a.rounds + r], &tbusy[k]) != GT_OK) return die("pytorch timing");
      printf(" | pytorch[%d] %.1f", k, tms[k * a.rounds + r]);
    }
    printf("\n");
  }
  double pk = bench_median(peak, a.rounds), gm = bench_median(gms, a.rounds), tm = 0;
  double mfu = flops / (gm / 1e3) / pk;
  printf("giant:   %.1f ms/step, %.0f tokens/s, %.1f GFLOP/s, MFU %.1f%% of the %s gemm peak %.1f GFLOP/s\n", gm,
         BT / (gm / 1e3), flops / (gm / 1e3) / 1e9, 100 * mfu, prec, pk / 1e9);
  /* What the threads did, not only what they were told: OpenBLAS's own
   * count, and how many threads of each process were busy in the last
   * round. */
  if (on_cpu)
    printf("giant threads: openblas_get_num_threads()=%d, %d busy during the steps\n", bench_openblas_threads(), gbusy);
  int best = 0;
  for (int k = 0; k < nt; k++) {
    double med = bench_median(&tms[k * a.rounds], a.rounds);
    int ob = -1, intra = -1;
    if (on_cpu && bench_torch_threads(torch, k, &ob, &intra) != GT_OK) return die("pytorch threads");
    printf("pytorch[%d]: median %.1f ms/step (%s)", k, med, bench_torch_setting(torch, k));
    if (on_cpu) printf("; openblas_get_num_threads()=%d, torch.get_num_threads()=%d, %d busy", ob, intra, tbusy[k]);
    printf("\n");
    if (k == 0 || med < tm) {
      tm = med;
      best = k;
    }
  }
  if (torch) {
    printf("pytorch: %.1f ms/step, %.0f tokens/s, %.1f GFLOP/s (best of %d settings: %s)\n", tm, BT / (tm / 1e3),
           flops / (tm / 1e3) / 1e9, nt, bench_torch_setting(torch, best));
  }
  char cpu[256];
  bench_cpu_features(cpu, sizeof cpu);
  const char *key = a.llama ? "llama_vs_pytorch" : "vs_pytorch";
  if (torch)
    printf("%s=%.3f mfu=%.3f cpu=%s kernels=%s\n", key, tm / gm, mfu, cpu, gt_backend_kernels(g.be));
  else
    printf("%s=nan mfu=%.3f cpu=%s kernels=%s\n", key, mfu, cpu, gt_backend_kernels(g.be));
  bench_torch_stop(torch);
  free(peak);
  free(gms);
  free(tms);
  free(tokens);
  giant_free(&g);
  gt_backend_destroy(g.be);
  return rc;
}
