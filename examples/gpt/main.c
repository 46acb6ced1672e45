/* examples/gpt: train a byte-level GPT on a text corpus and sample from it.
 *
 *   gpt [--steps N] [--data FILE.tok | --corpus PATH] [...]   (--help lists all)
 *   giantrun --standalone --nproc-per-node 4 --plan dp=2,tp=2 gpt [...]
 *
 * With no --data, the text of Debian's fortunes is tokenized once into
 * data/fortunes.tok. Each step prints its loss, learning rate, gradient
 * norm, time, tokens/s and MFU; at the end the model writes a sample.
 * Under giantrun the same model trains at the layout of --plan: each
 * data-parallel replica reads its own shard of the data, and the model's
 * annotations (gpt.c) split every layer across tensor-parallel ranks. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "giant/dist.h"
#include "giant/fault.h"
#include "giant/grid.h"
#include "giant/init.h"
#include "giant/log.h"
#include "giant/options.h"
#include "giant/plan.h"
#include "checkpoint.h"
#include "failslow.h"
#include "gpt.h"
#include "planning.h"
#include "rebalance.h"
#include "reshape.h"

typedef struct args {
  const char *data, *corpus, *metrics, *device, *optimizer, *plan, *schedule, *speeds, *precision,
      *offload_optimizer, *annotate;
  int steps, batch, global_batch, seq, layers, channels, heads, accum, warmup, threads, sample, print_every,
      bucket_kib, chunks, mem_mib, mirror_every, skip_nonfinite, offload, offload_prefetch, device_mem_mib,
      host_mem_mib;
  float lr, min_lr, clip, weight_decay, temperature;
  uint64_t seed;
  bool documents, untied, zero1, seq_parallel, print_plan, no_overlap, rebalance, rebalance_local, reshape,
      update_per_layer, delayed_update;
  gpt_ckpt_args ckpt;
  gpt_failslow_args failslow;
} args;

static const char *usage =
    "usage: gpt [options]\n"
    "Trains a byte-level GPT on a text corpus, then prints a sample.\n\n"
    "data:\n"
    "  --data FILE         token file to train on (default data/fortunes.tok)\n"
    "  --corpus PATH       text file or directory tokenized into --data when it is missing\n"
    "                      (default /usr/share/games/fortunes)\n"
    "  --documents         cut micro-batches at document boundaries (T varies up to --seq)\n"
    "model:\n"
    "  --layers L  --channels C  --heads NH  --seq T   (default 4, 128, 4, 128)\n"
    "  --untied            do not tie the output matrix to the embedding\n"
    "training:\n"
    "  --steps N           optimizer steps (default 300)\n"
    "  --batch B           rows per micro-batch of each data-parallel replica (default 8)\n"
    "  --global-batch G    rows per micro-batch of all replicas together, instead of --batch:\n"
    "                      the dp replicas share them as evenly as they can, so a restart at\n"
    "                      another world size and layout goes on with the same batches\n"
    "  --accum K           micro-batches per step (default: the model's pipeline annotation, else 1)\n"
    "  --optimizer NAME    adamw or sgd (default adamw)\n"
    "  --lr X --min-lr X   peak and final learning rate (default 1e-3, 1e-4)\n"
    "  --warmup N          warmup steps (default 20)\n"
    "  --weight-decay X    (default 0.1 for adamw, 0 for sgd)\n"
    "  --clip X            max global gradient norm, 0 = off (default 1.0)\n"
    "  --skip-nonfinite N  a step with a non-finite loss or gradient changes nothing and runs again\n"
    "                      on the same samples; failing again, its samples are skipped; after N\n"
    "                      such steps in a row training stops as diverged (default 3; 0 = stop at\n"
    "                      the first)\n"
    "  --seed N            initialisation seed (default 1)\n"
    "  --precision NAME    fp32, or bf16: bf16 matrix products with fp32 master weights,\n"
    "                      accumulation and optimizer state (default fp32)\n"
    "parallelism (under giantrun):\n"
    "  --plan LAYOUT       dp=2,tp=2,pp=1 or auto (default: $GT_PLAN, else auto: the planner chooses);\n"
    "                      a factor left out comes from the annotations, else from the planner\n"
    "  --annotate LIST     the model's annotations (docs/annotations.md), any of replicate=N,\n"
    "                      split=K, stages=S, pipeline=M, offload=W, embed (a replicated embedding\n"
    "                      and first block before the split body; needs --untied)\n"
    "  --zero1             shard the optimizer state over data-parallel ranks (ZeRO-1)\n"
    "  --seq-parallel      sequence parallelism in tensor-parallel layers\n"
    "  --bucket-kib N      gradient all-reduce bucket size (default 4096)\n"
    "  --no-overlap        reduce gradients only after backward ends\n"
    "  --schedule NAME     pipeline schedule when pp > 1: gpipe, 1f1b or interleaved (default 1f1b);\n"
    "                      --accum sets the micro-batches a step pipelines\n"
    "  --chunks V          virtual stages per pipeline rank, interleaved (default 2)\n"
    "  --speeds LIST       relative speed of each rank (e.g. 1,0.5 for 2 ranks): the planner gives\n"
    "                      slower pipeline stages fewer layers and slower data-parallel replicas\n"
    "                      fewer rows of each micro-batch (default: all equal)\n"
    "  --rebalance         while training, move rows of each micro-batch between data-parallel\n"
    "                      replicas by their measured speed (a slow replica gives rows to fast ones);\n"
    "                      a replica may take up to twice its even share (--batch); under giantrun\n"
    "                      the job's leading agent decides, from reports rank 0 publishes on etcd\n"
    "  --rebalance-local   with --rebalance: every rank decides alike, without the leader\n"
    "  --reshape           when a rank is lost, the ranks left go on in-process at a layout for\n"
    "                      their number, with the same global batch, taking the state from each\n"
    "                      other (default: $GT_RESHAPE=1, which giantrun --reshape sets)\n"
    "  --mirror-every N    with --reshape: copy the state only one rank holds (ZeRO-1 shards) to a\n"
    "                      peer every N steps, so that its loss loses nothing (default 0: as often as\n"
    "                      2% of the step time allows, measured over the first steps)\n"
    "  --mem-mib N         memory each rank may use: --plan auto keeps to it (default: no limit)\n"
    "  --print-plan        print the plan (layers, splits, shards, predicted step) and exit\n"
    "run:\n"
    "  --device NAME       cpu or cuda[:N] (default cpu)\n"
    "  --threads N         CPU threads (default: OMP_NUM_THREADS or all cores)\n"
    "  --device-mem-mib N  device memory this rank may hold, enforced on every backend (default: no\n"
    "                      limit); a model that does not fit fails at start\n"
    "  --offload W         keep the master weights, gradients and optimizer state in host memory\n"
    "                      and only W layers' weights on the device at a time (0 = off, default)\n"
    "  --offload-prefetch D  layers fetched ahead while one computes (default and most: W - 1)\n"
    "  --offload-optimizer disk:DIR  keep the optimizer state in a file in DIR, streamed through host\n"
    "                      memory at each update, so it may exceed host memory (the file is unlinked\n"
    "                      and its room reserved at start); with --offload W on a GPU\n"
    "  --host-mem-mib N    host memory for the offloaded state this rank may hold (default: no limit)\n"
    "  --update-per-layer  offloaded: update each layer on the host as soon\n"
    "                      as its gradients are final, while backward goes on (needs --clip 0 and\n"
    "                      --skip-nonfinite 0: the update begins before the norm is known)\n"
    "  --delayed-update    offloaded: a step computes its gradients before\n"
    "                      the previous step's update, which is applied during its backward\n"
    "                      (ZeRO-Offload's one-step delay; a different trajectory, with clipping; a\n"
    "                      checkpoint applies the update held, so a resumed run goes on alike)\n"
    "  --ckpt-dir DIR      save checkpoints here and resume from the newest (default: $GT_CKPT_DIR);\n"
    "                      SIGTERM or SIGINT then stops after the step under way and lets the save\n"
    "                      in flight commit\n"
    "  --ckpt-every N      save every N steps (default: $GT_CKPT_EVERY)\n"
    "  --ckpt-keep K       keep the newest K checkpoints, 0 = all (default: $GT_CKPT_KEEP, else 0)\n"
    "  --metrics FILE      append one JSON line per step (the lead rank's; a %r in FILE gives\n"
    "                      every rank its own file, %r replaced by the rank)\n"
    "  --print-every N     print every N steps (default 10)\n"
    "  --sample N          tokens to generate at the end (default 300, 0 = none)\n"
    "  --temperature X     sampling temperature (default 0.8)\n" GPT_FAILSLOW_USAGE;

static int parse_args(int argc, char **argv, args *a) {
  *a = (args){.data = "data/fortunes.tok", .corpus = "/usr/share/games/fortunes", .device = "cpu", .precision = "fp32",
              .optimizer = "adamw", .steps = 300, .batch = 8, .seq = 128, .layers = 4, .channels = 128,
              .heads = 4, .accum = 0, .warmup = 20, .sample = 300, .print_every = 10, .lr = 1e-3f, .bucket_kib = 4096, .schedule = "1f1b",
              .min_lr = 1e-4f, .clip = 1.0f, .weight_decay = -1, .temperature = 0.8f, .seed = 1,
              .skip_nonfinite = 3};
  gt_opt_spec specs[] = {
      {"--data", GT_OPT_STR, &a->data, 0, 0},          {"--corpus", GT_OPT_STR, &a->corpus, 0, 0},
      {"--annotate", GT_OPT_STR, &a->annotate, 0, 0},
      {"--metrics", GT_OPT_STR, &a->metrics, 0, 0},    {"--device", GT_OPT_STR, &a->device, 0, 0},
      {"--optimizer", GT_OPT_STR, &a->optimizer, 0, 0}, {"--plan", GT_OPT_STR, &a->plan, 0, 0},
      {"--precision", GT_OPT_STR, &a->precision, 0, 0},
      {"--bucket-kib", GT_OPT_INT, &a->bucket_kib, 1, 1 << 22},
      {"--schedule", GT_OPT_STR, &a->schedule, 0, 0},   {"--chunks", GT_OPT_INT, &a->chunks, 1, 64},
      {"--speeds", GT_OPT_STR, &a->speeds, 0, 0},       {"--mem-mib", GT_OPT_INT, &a->mem_mib, 1, 1 << 30},
      {"--zero1", GT_OPT_FLAG, &a->zero1, 0, 0},    {"--seq-parallel", GT_OPT_FLAG, &a->seq_parallel, 0, 0},
      {"--print-plan", GT_OPT_FLAG, &a->print_plan, 0, 0}, {"--no-overlap", GT_OPT_FLAG, &a->no_overlap, 0, 0},
      {"--rebalance", GT_OPT_FLAG, &a->rebalance, 0, 0},
      {"--rebalance-local", GT_OPT_FLAG, &a->rebalance_local, 0, 0},
      {"--reshape", GT_OPT_FLAG, &a->reshape, 0, 0},
      {"--mirror-every", GT_OPT_INT, &a->mirror_every, 0, 1e9},
      {"--steps", GT_OPT_INT, &a->steps, 1, 1e9},      {"--batch", GT_OPT_INT, &a->batch, 1, 1e6},
      {"--global-batch", GT_OPT_INT, &a->global_batch, 0, 1e6},
      {"--seq", GT_OPT_INT, &a->seq, 1, 1e6},          {"--layers", GT_OPT_INT, &a->layers, 0, 1e4},
      {"--channels", GT_OPT_INT, &a->channels, 1, 1e6}, {"--heads", GT_OPT_INT, &a->heads, 1, 1e4},
      {"--accum", GT_OPT_INT, &a->accum, 1, 1e6},      {"--warmup", GT_OPT_INT, &a->warmup, 0, 1e9},
      {"--threads", GT_OPT_INT, &a->threads, 0, 4096}, {"--sample", GT_OPT_INT, &a->sample, 0, 1e7},
      {"--print-every", GT_OPT_INT, &a->print_every, 0, 1e9},
      {"--offload", GT_OPT_INT, &a->offload, 0, 4096},
      {"--offload-prefetch", GT_OPT_INT, &a->offload_prefetch, 0, 4096},
      {"--update-per-layer", GT_OPT_FLAG, &a->update_per_layer, 0, 0},
      {"--delayed-update", GT_OPT_FLAG, &a->delayed_update, 0, 0},
      {"--device-mem-mib", GT_OPT_INT, &a->device_mem_mib, 0, 1 << 30},
      {"--host-mem-mib", GT_OPT_INT, &a->host_mem_mib, 0, 1 << 30},
      {"--offload-optimizer", GT_OPT_STR, &a->offload_optimizer, 0, 0},
      {"--lr", GT_OPT_FLOAT, &a->lr, 0, 10},           {"--min-lr", GT_OPT_FLOAT, &a->min_lr, 0, 10},
      {"--clip", GT_OPT_FLOAT, &a->clip, 0, 1e9},      {"--skip-nonfinite", GT_OPT_INT, &a->skip_nonfinite, 0, 1e6},      {"--weight-decay", GT_OPT_FLOAT, &a->weight_decay, 0, 10},
      {"--temperature", GT_OPT_FLOAT, &a->temperature, 1e-3, 100},
      {"--seed", GT_OPT_U64, &a->seed, 0, 0},
      {"--documents", GT_OPT_FLAG, &a->documents, 0, 0}, {"--untied", GT_OPT_FLAG, &a->untied, 0, 0},
      {"--ckpt-dir", GT_OPT_STR, &a->ckpt.dir, 0, 0},   {"--ckpt-every", GT_OPT_INT, &a->ckpt.every, 1, 1e9},
      {"--ckpt-keep", GT_OPT_INT, &a->ckpt.keep, 0, 1e6},
      GPT_FAILSLOW_OPTS(&a->failslow),
  };
  return gt_opt_parse(argc, argv, specs, (int)(sizeof specs / sizeof specs[0]), usage, NULL);
}

/* "m.%r.jsonl" into "m.3.jsonl" for rank 3: false when path has no %r. */
static bool metrics_per_rank(const char *path, int rank, char *out, size_t cap) {
  const char *r = strstr(path, "%r");
  if (!r) return false;
  snprintf(out, cap, "%.*s%d%s", (int)(r - path), path, rank, r + 2);
  return true;
}

static int fail(const char *what, gt_status s) {
  fprintf(stderr, "gpt: %s: %s (%s)\n", what, gt_last_error(), gt_status_name(s));
  if (s == GT_ENOMEM && strstr(gt_last_error(), "device memory budget"))
    fprintf(stderr, "gpt: --offload W keeps the master weights, gradients and optimizer state in host memory "
                    "and only W layers' weights on the device\n");
  if (s == GT_ENOMEM && strstr(gt_last_error(), "host memory budget"))
    fprintf(stderr, "gpt: --offload-optimizer disk:DIR keeps the optimizer state in a file in DIR, streamed "
                    "through a little host memory\n");
  return 1;
}

/* Tokenize the corpus on first use; an existing token file is reused. */
static gt_status ensure_data(const args *a) {
  struct stat st;
  if (stat(a->data, &st) == 0) return GT_OK;
  if (errno != ENOENT) return gt_errorf(GT_EIO, "cannot read %s: %s", a->data, strerror(errno));
  /* Check the corpus first: a typo must not leave directories behind. */
  if (stat(a->corpus, &st) != 0)
    return gt_errorf(GT_ENOTFOUND,
                     "%s is missing and so is the corpus %s (%s): give --corpus a text file or "
                     "directory, or --data an existing token file",
                     a->data, a->corpus, strerror(errno));
  char dir[512];
  snprintf(dir, sizeof dir, "%s", a->data);
  char *slash = strrchr(dir, '/');
  if (slash) {
    *slash = '\0';
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return gt_errorf(GT_EIO, "cannot create %s: %s", dir, strerror(errno));
  }
  uint64_t n = 0;
  const char *inputs[1] = {a->corpus};
  GT_TRY(gt_tokenize_paths(inputs, 1, "%", a->data, &n));
  printf("tokenized %s into %s: %llu tokens\n", a->corpus, a->data, (unsigned long long)n);
  return GT_OK;
}

/* Draws from probs^(1/temperature), renormalised. */
static int sample_token(const float *probs, int V, float temperature, uint64_t *rng) {
  double total = 0;
  for (int i = 0; i < V; i++) total += pow(probs[i], 1.0 / temperature);
  *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
  double r = (double)(*rng >> 11) * 0x1.0p-53 * total, acc = 0;
  for (int i = 0; i < V; i++) {
    acc += pow(probs[i], 1.0 / temperature);
    if (r < acc) return i;
  }
  return V - 1;
}

/* Every rank runs the forward passes (tensor-parallel ranks take part in
 * each); the lead prints. */
static gt_status generate(gt_model *m, const args *a, int vocab, int data_vocab, bool lead) {
  gt_acts *acts = NULL;
  GT_TRY(gt_acts_create(m, &acts));
  int32_t *ctx = calloc((size_t)a->seq, sizeof *ctx);
  int32_t *out = calloc((size_t)a->sample + 1, sizeof *out);
  float *probs = malloc((size_t)vocab * sizeof *probs);
  char *text = malloc(4 * (size_t)a->sample + 16);
  gt_status s = ctx && out && probs && text ? GT_OK : gt_errorf(GT_ENOMEM, "out of memory for sampling");
  uint64_t rng = a->seed ^ 0x5eed;
  int n = 0;
  out[n++] = data_vocab > GT_BYTE_DOC_SEP ? GT_BYTE_DOC_SEP : '\n'; /* start as a new document */
  while (s == GT_OK && n <= a->sample) {
    int T = n < a->seq ? n : a->seq;
    memcpy(ctx, out + n - T, (size_t)T * sizeof *ctx);
    gt_batch b = {.B = 1, .T = T, .inputs = ctx, .targets = NULL};
    s = gt_model_forward(m, acts, &b, NULL);
    if (s == GT_OK) s = gt_model_probs(m, acts, 0, T - 1, probs);
    /* Only ids the data can hold; the padding rows are never drawn. */
    if (s == GT_OK) out[n++] = sample_token(probs, data_vocab, a->temperature, &rng);
  }
  if (s == GT_OK && lead) {
    gt_detokenize_bytes(out + 1, (size_t)n - 1, text, 4 * (size_t)a->sample + 16);
    printf("\n---- sample (%d tokens, temperature %.2f) ----\n%s\n----\n", n - 1, a->temperature, text);
  }
  free(ctx);
  free(out);
  free(probs);
  free(text);
  gt_acts_destroy(acts);
  return s;
}

/* The peak FLOP/s the planner works with: measured once, on the lead rank,
 * and shared through the store so that every rank plans alike. */
static gt_status shared_peak(gt_job *job, gt_backend *be, gt_precision precision, double *peak) {
  if (job->rank == 0) {
    GT_TRY(gt_backend_measure_peak_ex(be, precision, 512, 0.3, peak));
    if (job->world_size == 1) return GT_OK;
    char text[64];
    int n = snprintf(text, sizeof text, "%.17g", *peak);
    return gt_store_set(job->store, "gpt/peak", text, (size_t)n);
  }
  void *val = NULL;
  size_t len = 0;
  GT_TRY(gt_store_get(job->store, "gpt/peak", &val, &len, 120000));
  *peak = strtod(val, NULL);
  free(val);
  gt_backend_set_peak_flops(be, *peak);
  return GT_OK;
}

/* "1,0.5" into one speed per world rank. */
static gt_status parse_speeds(const char *text, int world, double *out) {
  for (int i = 0; i < world; i++) out[i] = 1.0;
  if (!text) return GT_OK;
  const char *p = text;
  for (int i = 0; i < world; i++) {
    char *end;
    out[i] = strtod(p, &end);
    if (end == p || !(out[i] > 0) || (*end && *end != ','))
      return gt_errorf(GT_EINVAL, "--speeds '%s': want %d positive numbers separated by commas", text, world);
    p = *end ? end + 1 : end;
    if (i + 1 < world && !*end) return gt_errorf(GT_EINVAL, "--speeds '%s': want one speed per rank (%d)", text, world);
  }
  if (*p) return gt_errorf(GT_EINVAL, "--speeds '%s': more speeds than ranks (%d)", text, world);
  return GT_OK;
}

/* A pipeline stage, or a replica, is as fast as its slowest rank. */
static void group_speeds(const gt_plan *plan, const double *rank_speed, double *stage, double *replica) {
  for (int i = 0; i < plan->layout.pp; i++) stage[i] = 1e300;
  for (int i = 0; i < plan->layout.dp; i++) replica[i] = 1e300;
  for (int r = 0; r < plan->world; r++) {
    gt_grid_coords c;
    gt_grid_coords_of(&plan->layout, r, &c);
    if (rank_speed[r] < stage[c.pp]) stage[c.pp] = rank_speed[r];
    if (rank_speed[r] < replica[c.dp]) replica[c.dp] = rank_speed[r];
  }
}

/* The lead rank prepares the data; the others wait for it at a barrier. */
static gt_status prepare_data(const args *a, gt_job *job) {
  gt_status s = job->rank == 0 ? ensure_data(a) : GT_OK;
  if (job->world_size == 1) return s;
  if (s != GT_OK) return s; /* the others time out at the barrier with a pointer to rank 0 */
  gt_status b = gt_store_barrier(job->store, "gpt-data", job->rank, job->world_size, 600000);
  return b == GT_OK ? GT_OK : gt_error_context(b, "waiting for rank 0 to prepare %s", a->data);
}

/* The model, its layers cut into the plan's pipeline stages at `first`
 * (first[s]: stage s's first layer), or for the stage speeds when first is
 * NULL (NULL speeds: all alike), built. */
static gt_status build_model(gt_backend *be, const gt_model_config *mc, const gt_model_parallel *mp,
                             const gpt_config *gc, const gt_plan *plan, int rows, int T, const double *speeds,
                             const int *first, gt_model **out) {
  gt_model *m = NULL;
  gt_status s = gt_model_create(be, mc, &m);
  if (s == GT_OK) s = gt_model_set_parallel(m, mp);
  if (s == GT_OK) s = gpt_add_layers(m, gc);
  if (s == GT_OK && first) s = gt_model_set_stage_cut(m, first, plan->layout.pp);
  else if (s == GT_OK) s = gt_plan_cut_stages(plan, m, rows, T, speeds);
  if (s == GT_OK) s = gt_model_build(m);
  if (s == GT_OK) s = gt_plan_check_model(plan, m);
  if (s == GT_OK) s = gt_model_check_rows(m, rows);
  if (s != GT_OK) gt_model_destroy(m), m = NULL;
  *out = m;
  return s;
}

/* --rebalance at a pipeline layout: the model and trainer rebuilt at the
 * cut decided on the measured stage speeds, and the state moved into them
 * through the pipeline communicator (gt_trainer_move_state). On failure
 * the old ones stay. */
static gt_status recut(gt_backend *be, const gt_model_config *mc, const gt_model_parallel *mp, const gpt_config *gc,
                       const gt_plan *plan, int rows, int T, const int *first, const gt_trainer_config *tc,
                       gt_model **m, gt_trainer **tr) {
  gt_model *m2 = NULL;
  gt_trainer *tr2 = NULL;
  gt_status s = build_model(be, mc, mp, gc, plan, rows, T, NULL, first, &m2);
  if (s == GT_OK) s = gt_trainer_create(m2, tc, &tr2);
  if (s == GT_OK) s = gt_trainer_move_state(*tr, tr2);
  if (s != GT_OK) {
    gt_trainer_destroy(tr2);
    gt_model_destroy(m2);
    return s;
  }
  gt_trainer_destroy(*tr);
  gt_model_destroy(*m);
  *m = m2, *tr = tr2;
  return GT_OK;
}

/* The layout a job of `world` ranks goes on at after a reshape: the
 * launch plan's tensor- and pipeline-parallel sizes where they divide it,
 * the planner's choice where they do not. Every rank, a joining one too,
 * knows the launch plan, so all choose alike. */
static gt_status reshape_layout(const args *a, gt_backend *be, const gpt_config *gc, const gt_plan *old, int world,
                                int total, double peak, gt_pp_kind schedule, char *out, size_t n) {
  int tp = old->layout.tp, pp = old->layout.pp;
  if (world % (tp * pp) == 0 && world / (tp * pp) <= total) {
    snprintf(out, n, "dp=%d,tp=%d,pp=%d", world / (tp * pp), tp, pp);
    return GT_OK;
  }
  int B = (total + world - 1) / world;
  gt_precision precision;
  GT_TRY(gt_precision_parse(a->precision, &precision)); /* checked at start */
  return gpt_choose_layout(be, gc, B, a->seq, world, a->accum * world, peak, (double)a->mem_mib * (1 << 20), schedule,
                           a->chunks, a->zero1, a->offload, precision, NULL, out, n);
}

/* The newest committed checkpoint's step directory, where the state that
 * no rank left holds is taken from ("" when there is none). */
static void newest_checkpoint(const args *a, char *out, size_t n) {
  int steps[1], k = 0;
  out[0] = 0;
  if (a->ckpt.dir && gt_ckpt_list(a->ckpt.dir, steps, 1, &k) == GT_OK && k > 0)
    snprintf(out, n, "%s/step-%08d", a->ckpt.dir, steps[0]);
}

/* In-process reshaping after a failed step (--reshape): abort what is in
 * flight, agree with the ranks left where training stands, build the new
 * layout, move the state into it from the peers, and go on. The old
 * layout is freed only once the new one holds the state. planned: no
 * failure, ranks join at a step boundary (nothing to abort; a joining rank
 * has no trainer, *tr NULL, and takes all it holds from the others). */
static gt_status reshape(const args *a, gt_job *job, gt_backend *be, const gpt_config *gc, double peak,
                         gt_pp_kind schedule, gpt_reshape *rsh, int total, gt_model_config *mc,
                         gt_trainer_config *tc, gt_plan *plan, gt_model_parallel *mp, gt_dist **dist, gt_model **m,
                         gt_trainer **tr, gt_loader **loader, gt_ckpt **ckpt, char *gen, size_t gen_cap,
                         const gt_plan *launch, bool planned) {
  double t0 = gt_now();
  gt_grid *grid = *dist ? gt_dist_grid(*dist) : NULL;
  rsh->state_lost = false;
  gpt_watch_pause(rsh);
  if (grid && !planned) gpt_abort_grid(grid); /* the others' operations fail at once, not at their timeout */
  if (!planned) gt_ckpt_abandon(*ckpt); /* a planned reshape lets the save in flight commit */
  gt_ckpt_destroy(*ckpt);
  *ckpt = NULL;
  int world = 1, rank = 0;
  GT_TRY(gpt_reshape_members(rsh, job, &world, &rank));
  double t_agreed = gt_now();
  char layout[64];
  GT_TRY(reshape_layout(a, be, gc, launch, world, total, peak, schedule, layout, sizeof layout));
  gt_plan np;
  gt_plan_config pc = {.world = world, .rank = rank, .layout = layout, .zero1 = a->zero1,
                       .seq_parallel = a->seq_parallel, .bucket_bytes = (size_t)a->bucket_kib << 10,
                       .schedule = schedule, .chunks = a->chunks};
  GT_TRY(gt_plan_resolve(&pc, &np));
  /* The same global batch: the rows of a step stay total x --accum. With
   * fewer replicas, more micro-batches of fewer rows each, where the rows
   * divide so, keep a replica's micro-batch within what it held at launch
   * (its activations' memory); with all replicas back, the launch's. */
  int step_rows = total * a->accum, accum = a->accum;
  int launch_rows = (total + launch->layout.dp - 1) / launch->layout.dp;
  for (int k = a->accum; k <= 64; k++) {
    if (step_rows % k || step_rows / k < np.layout.dp) continue;
    if ((step_rows / k + np.layout.dp - 1) / np.layout.dp <= launch_rows) {
      accum = k;
      break;
    }
  }
  int micro_rows = step_rows / accum;
  int *shares = calloc((size_t)np.layout.dp, sizeof *shares), rows = 0, offset = 0, cap = 0;
  double *speed = calloc((size_t)np.layout.dp, sizeof *speed);
  gt_status s = shares && speed ? GT_OK : gt_errorf(GT_ENOMEM, "out of memory");
  for (int i = 0; speed && i < np.layout.dp; i++) speed[i] = 1;
  if (s == GT_OK) s = gt_planner_batch_split(micro_rows, np.layout.dp, speed, shares);
  for (int i = 0; s == GT_OK && i < np.layout.dp; i++) {
    if (i < np.me.dp) offset += shares[i];
    if (shares[i] > cap) cap = shares[i];
  }
  if (s == GT_OK) rows = shares[np.me.dp];
  free(shares), free(speed);
  GT_TRY(s);
  snprintf(gen, gen_cap, "%s.e%d", job->generation_name, rsh->epoch);
  gt_dist *nd = NULL;
  gt_model *nm = NULL;
  gt_trainer *nt = NULL;
  gt_loader *nl = NULL;
  if (world > 1) {
    /* A rank lost while the group forms is noticed within the init
     * timeout; then the next epoch is tried. */
    gt_dist_config dc = {.plan = np, .store = job->store, .generation = gen,
                         .comm = {.backend = be, .secret = job->secret, .init_timeout_ms = 30000}};
    s = gt_dist_create(&dc, &nd);
  }
  gt_fault_plan faults; /* GT_FAULT's crashreshape: a failure in the middle of this */
  if (s == GT_OK && gt_fault_from_env(rsh->gen_rank, &faults) == GT_OK) gt_fault_reshape_point(&faults);
  /* Where training stands, decided over the new communicators; then the
   * step in flight is applied or dropped here. */
  gpt_resume_point rp = {0};
  if (s == GT_OK)
    s = gpt_reshape_decide(rsh, nd ? gt_grid_world(gt_dist_grid(nd)) : NULL, *tr, *loader, (uint64_t)step_rows, &rp);
  if (s == GT_OK && *tr && gt_trainer_step_pending(*tr)) s = gt_trainer_resolve_step(*tr, rp.apply_pending);
  double t_dist = gt_now();
  gt_model_config nmc = *mc;
  nmc.B_max = cap;
  nmc.no_init = true; /* every parameter comes from the peers */
  gt_model_parallel nmp = nd ? gt_dist_model_parallel(nd) : (gt_model_parallel){0};
  if (s == GT_OK) s = build_model(be, &nmc, &nmp, gc, &np, rows, a->seq, NULL, NULL, &nm);
  gt_trainer_config ntc = *tc;
  ntc.dist = nd;
  ntc.grad_accum = accum;
  ntc.print_every = rp.rank == 0 ? a->print_every : 0;
  if (s == GT_OK) s = gt_trainer_create(nm, &ntc, &nt);
  char fallback[4200];
  newest_checkpoint(a, fallback, sizeof fallback);
  gt_ckpt_peer_stats ps = {0};
  double t_built = gt_now();
  if (s == GT_OK) {
    s = gt_ckpt_reshard_peers(*tr, nt, rsh->mirror, fallback[0] ? fallback : NULL, &ps);
    rsh->state_lost = s == GT_ENOTFOUND;
  }
  double t_moved = gt_now();
  gt_loader_config lc = *gt_loader_get_config(*loader);
  lc.B = cap, lc.shard = np.me.dp, lc.nshards = np.layout.dp, lc.offset = 0, lc.total = 0;
  if (s == GT_OK) s = gt_loader_open(&lc, 0, &nl);
  if (s == GT_OK) s = gt_loader_restart_at(nl, rp.row);
  if (s == GT_OK) s = gt_loader_reshare(nl, rows, offset, micro_rows);
  if (s != GT_OK) {
    gt_loader_close(nl);
    gt_trainer_destroy(nt);
    gt_model_destroy(nm);
    gt_dist_destroy(nd);
    return s;
  }
  gt_loader_close(*loader);
  gt_trainer_destroy(*tr);
  gt_model_destroy(*m);
  gt_dist_destroy(*dist);
  *loader = nl, *tr = nt, *m = nm, *dist = nd, *plan = np, *mp = nmp, *mc = nmc, tc->dist = nd, tc->grad_accum = accum;
  job->rank = rp.rank, job->world_size = rp.world;
  GT_TRY(gpt_ckpt_rebind(&a->ckpt, job, *tr, *loader, ckpt));
  printf("gpt: reshaped in %.0f ms (pid %d): rank %d of %d in membership epoch %d, %s, step %d, %d rows of %d x %d "
         "micro-batches; "
         "%llu floats from peers, %llu kept, %llu from a checkpoint (membership %.0f ms, communicators and step %.0f ms, "
         "model %.0f ms, moving the state %.0f ms)\n",
         (gt_now() - t0) * 1e3, (int)getpid(), rp.rank, rp.world, rsh->epoch, layout, rp.step, rows, micro_rows, accum,
         (unsigned long long)ps.floats_received, (unsigned long long)ps.floats_kept,
         (unsigned long long)ps.floats_from_ckpt, (t_agreed - t0) * 1e3, (t_dist - t_agreed) * 1e3,
         (t_built - t_dist) * 1e3, (t_moved - t_built) * 1e3);
  GT_TRY(gpt_mirror_start(rsh, *tr, job, rp.rank == 0));
  gpt_watch_resume(rsh, nd ? gt_dist_grid(nd) : NULL);
  fflush(stdout);
  return GT_OK;
}

int main(int argc, char **argv) {
  args a;
  int rc = parse_args(argc, argv, &a);
  if (rc >= 0) return rc;
  gt_optim_kind kind;
  gt_status s = gt_optim_parse(a.optimizer, &kind);
  if (s == GT_OK) s = gpt_ckpt_args_from_env(&a.ckpt);
  const char *env_reshape = getenv("GT_RESHAPE");
  if (env_reshape && !strcmp(env_reshape, "1")) a.reshape = true;
  if (s == GT_OK && a.rebalance_local && !a.rebalance)
    s = gt_errorf(GT_EINVAL, "--rebalance-local says who decides --rebalance: give --rebalance too");
  const char *state_dir = NULL;
  if (s == GT_OK && a.offload_optimizer && !strncmp(a.offload_optimizer, "disk:", 5) && a.offload_optimizer[5])
    state_dir = a.offload_optimizer + 5;
  else if (s == GT_OK && a.offload_optimizer && strcmp(a.offload_optimizer, "host") != 0)
    s = gt_errorf(GT_EINVAL, "--offload-optimizer takes disk:DIR (the state in a file in DIR) or host (in memory, "
                             "the default), not '%s'", a.offload_optimizer);
  if (s == GT_OK && a.delayed_update && a.reshape)
    s = gt_errorf(GT_EINVAL, "--delayed-update holds a step's gradients for the next, and a reshape rebuilds the "
                             "trainer from its peers' state without them: leave out --reshape or --delayed-update");
  if (s != GT_OK) return fprintf(stderr, "gpt: %s\n", gt_last_error()), 2;
  gt_precision precision;
  if ((s = gt_precision_parse(a.precision, &precision)) != GT_OK) return fprintf(stderr, "gpt: %s\n", gt_last_error()), 2;
  gt_backend_config bc;
  if ((s = gt_device_parse(a.device, &bc)) != GT_OK) return fprintf(stderr, "gpt: %s\n", gt_last_error()), 2;
  bc.num_threads = a.threads;
  bc.device_mem_limit = (size_t)a.device_mem_mib << 20;
  bc.host_mem_limit = (size_t)a.host_mem_mib << 20;

  gt_job *job = NULL;
  gt_backend *be = NULL;
  gt_dist *dist = NULL;
  gt_model *m = NULL;
  gt_loader *loader = NULL;
  gt_trainer *tr = NULL;
  gt_ckpt *ckpt = NULL;
  gpt_rebalance *rb = NULL;
  int *shares = NULL;
  gt_failslow *failslow = NULL;
  gpt_reshape rsh = {0}; /* --reshape: the membership, and the copies on a peer */
  gt_plan launch_plan = {0};  /* what reshapes start from */
  char reshaped_gen[96];
  if ((s = gt_init(&job)) != GT_OK) return fail("joining the job", s);
  bool lead = job->rank == 0;
  gt_plan plan;
  gt_pp_kind schedule = GT_PP_1F1B;
  rc = 1;
  if ((s = gt_pp_parse(a.schedule, &schedule)) != GT_OK) {
    rc = 2;
    fail("planning", s);
    goto out;
  }
  /* A worker giantrun restarted alone joins the running job (--reshape):
   * it builds no layout of its own and takes its state from the others. */
  const char *env_join = getenv("GT_JOIN");
  bool joining = a.reshape && env_join && !strcmp(env_join, "1") && job->world_size > 1;
  if (!joining && (s = prepare_data(&a, job)) != GT_OK) {
    fail("preparing data", s);
    goto out;
  }
  if ((s = gt_backend_create(&bc, &be)) != GT_OK) {
    fail("starting the backend", s);
    goto out;
  }
  /* The model's vocabulary is the file's rounded up to a multiple of 64, as
   * GPT-2 pads 50257 to 50304: the extra rows are never targets, and the
   * size then divides among tensor-parallel ranks. */
  gt_loader_config peek = {.path = a.data, .B = 1, .T_max = 1, .nshards = 1};
  if ((s = gt_loader_open(&peek, 0, &loader)) != GT_OK) {
    fail("opening the data", s);
    goto out;
  }
  int data_vocab = (int)gt_loader_header(loader)->vocab_size, vocab = (data_vocab + 63) / 64 * 64;
  gt_loader_close(loader);
  loader = NULL;
  gpt_config gc = {.vocab_size = vocab, .T_max = a.seq, .C = a.channels, .NH = a.heads, .L = a.layers,
                   .tie_weights = !a.untied};
  /* The layout: each factor from the flag, else the model's annotations,
   * else the planner (docs/annotations.md). */
  gt_annotations ann;
  if ((s = gpt_parse_annotations(a.annotate, &gc.ann)) != GT_OK || (s = gpt_annotations_of(be, &gc, &ann)) != GT_OK) {
    rc = 2;
    fail("reading the annotations", s);
    goto out;
  }
  const char *layout = a.plan ? a.plan : (job->plan[0] ? job->plan : "auto");
  double peak = 0;
  if ((s = shared_peak(job, be, precision, &peak)) != GT_OK) {
    fail("measuring the machine", s);
    goto out;
  }
  gt_plan_config pc = {.world = job->world_size, .rank = job->rank, .layout = layout, .zero1 = a.zero1,
                       .seq_parallel = a.seq_parallel, .bucket_bytes = (size_t)a.bucket_kib << 10,
                       .schedule = schedule, .chunks = a.chunks, .annotations = &ann, .micro_batches = a.accum,
                       .offload_window = a.offload};
  gt_grid_layout fixed, chosen_layout;
  if ((s = gt_plan_preview(&pc, &fixed)) != GT_OK) {
    rc = 2;
    fail("planning", s);
    goto out;
  }
  /* The planner fills what is open, where the fixed factors leave room for
   * it; where they do not, gt_plan_resolve says which make too many ranks. */
  long fixed_ranks = (long)(fixed.dp ? fixed.dp : 1) * (fixed.tp ? fixed.tp : 1) * (fixed.pp ? fixed.pp : 1);
  if (!strcmp(layout, "auto") && job->world_size > 1 && (!fixed.dp || !fixed.tp || !fixed.pp) &&
      job->world_size % fixed_ranks == 0) {
    /* With a global batch, the planner weighs the rows every rank would take at dp = world. */
    int B = a.global_batch ? (a.global_batch + job->world_size - 1) / job->world_size : a.batch;
    int accum = a.accum ? a.accum : ann.micro_batches ? ann.micro_batches : 1;
    char chosen[64];
    bool autom;
    if ((s = gpt_choose_layout(be, &gc, B, a.seq, job->world_size, accum * job->world_size, peak,
                               (double)a.mem_mib * (1 << 20), schedule, a.chunks, a.zero1,
                               a.offload ? a.offload : ann.offload_window, precision, &fixed, chosen,
                               sizeof chosen)) != GT_OK ||
        (s = gt_plan_parse(chosen, job->world_size, &chosen_layout, &autom)) != GT_OK) {
      fail("choosing a layout", s);
      goto out;
    }
    if (lead) printf("plan auto: the planner chose %s\n", chosen);
    pc.planner = &chosen_layout;
  }
  if ((s = gt_plan_resolve(&pc, &plan)) != GT_OK) {
    rc = 2;
    fail("planning", s);
    goto out;
  }
  a.accum = plan.micro_batches > 0 ? plan.micro_batches : 1;
  a.offload = plan.offload_window;
  launch_plan = plan;
  /* Speeds: slower stages get fewer layers, slower replicas fewer rows of
   * each micro-batch (the step still weighs every token alike). */
  double speeds[GT_PLANNER_MAX_STAGES];
  double *rank_speed = calloc((size_t)plan.world, sizeof(double));
  double *replica_speed = calloc((size_t)plan.layout.dp, sizeof(double));
  shares = calloc((size_t)plan.layout.dp, sizeof(int));
  if (!rank_speed || !replica_speed || !shares || plan.layout.pp > GT_PLANNER_MAX_STAGES) {
    fail("planning", gt_errorf(GT_EINVAL, "out of memory, or more than %d pipeline ranks", GT_PLANNER_MAX_STAGES));
    free(rank_speed), free(replica_speed);
    goto out;
  }
  s = parse_speeds(a.speeds, plan.world, rank_speed);
  if (s == GT_OK) group_speeds(&plan, rank_speed, speeds, replica_speed);
  /* --global-batch G: the replicas share G rows of every micro-batch, as
   * evenly as they can (a dp that does not divide G leaves some a row
   * more); --batch B: each takes B. Replica i takes its share of every
   * group micro-batch of `total` rows at `offset`, the shares of the
   * replicas before it. With --rebalance at dp > 1 its activations and loader hold
   * up to `cap` rows: twice the even share, or the largest --speeds gave. */
  int total = a.global_batch ? a.global_batch : a.batch * plan.layout.dp;
  if (s == GT_OK && total < plan.layout.dp)
    s = gt_errorf(GT_EINVAL, "--global-batch %d is less than one row for each of dp=%d replicas", total,
                  plan.layout.dp);
  if (s == GT_OK) s = gt_planner_batch_split(total, plan.layout.dp, replica_speed, shares);
  bool rebalance = a.rebalance && (plan.layout.dp > 1 || plan.layout.pp > 1);
  if (s == GT_OK && rebalance && plan.layout.dp > 1 && plan.layout.tp > 1 && ann.regions)
    s = gt_errorf(GT_EINVAL, "--rebalance moves rows between replicas, and the replicated region '%s'..'%s' needs "
                             "rows that divide by tp=%d: leave out one or the other",
                  ann.region_at, ann.region_end, plan.layout.tp);
  int rows = s == GT_OK ? shares[plan.me.dp] : 0, offset = 0;
  int cap = rebalance && plan.layout.dp > 1 ? 2 * ((total + plan.layout.dp - 1) / plan.layout.dp) : rows;
  for (int i = 0; s == GT_OK && i < plan.layout.dp; i++) {
    if (i < plan.me.dp) offset += shares[i];
    if (rebalance && shares[i] > cap) cap = shares[i];
  }
  free(rank_speed), free(replica_speed);
  if (s != GT_OK) {
    rc = 2;
    fail("planning", s);
    goto out;
  }
  if (lead && a.speeds) printf("speeds %s: this replica takes %d of every %d rows\n", a.speeds, rows, total);
  if (job->world_size > 1 && !joining) {
    gt_dist_config dc = {.plan = plan, .store = job->store, .generation = job->generation_name,
                         .comm = {.backend = be, .secret = job->secret}};
    if ((s = gt_dist_create(&dc, &dist)) != GT_OK) {
      fail("connecting the ranks", s);
      goto out;
    }
  }
  /* Each data-parallel replica reads its own share; tensor-parallel ranks of
   * one replica read the same one. The loader is opened for `cap` rows and
   * then given its share. */
  gt_loader_config lc = {.path = a.data, .B = cap, .T_max = a.seq, .shard = plan.me.dp,
                         .nshards = plan.layout.dp, .mode = a.documents ? GT_LOADER_DOCUMENTS : GT_LOADER_FIXED};
  if ((s = gt_loader_open(&lc, 0, &loader)) != GT_OK || (s = gt_loader_reshare(loader, rows, offset, total)) != GT_OK) {
    fail("opening the data", s);
    goto out;
  }
  /* Layers are declared first, so the planner can cut pipeline stages by
   * their costs before any memory is allocated. */
  gt_model_config mc = {.B_max = cap, .T_max = a.seq, .seed = a.seed, .offload_window = a.offload ? a.offload : -1,
                        .offload_prefetch = a.offload_prefetch};
  gt_model_parallel mp = dist ? gt_dist_model_parallel(dist) : (gt_model_parallel){0};
  if (!joining && (s = build_model(be, &mc, &mp, &gc, &plan, rows, a.seq, speeds, NULL, &m)) != GT_OK) {
    if (s == GT_EINVAL) rc = 2; /* the model does not fit the plan: a restart would fail alike */
    fail("building the model", s);
    goto out;
  }
  if (a.print_plan && !joining) {
    /* The precision the trainer would set: it decides the bf16 copy and
     * how an offloaded window holds its weights. */
    s = gt_model_set_precision(m, precision);
    if (s != GT_OK) {
      fail("setting the precision", s);
      goto out;
    }
    if (lead) {
      gt_plan_print(&plan, m, stdout);
      s = gpt_print_prediction(be, &gc, &plan, m, rows, a.seq, a.accum * plan.layout.dp, peak, a.offload, precision,
                               stdout);
      if (s == GT_OK) s = gpt_print_memory(be, m, kind == GT_OPTIM_ADAMW ? 2 : 1, a.accum, stdout);
      if (s != GT_OK) fail("predicting the step", s);
    }
    rc = s == GT_OK ? 0 : 1;
    goto out;
  }
  char rank_metrics[4096];
  const char *metrics = lead ? a.metrics : NULL;
  if (a.metrics && metrics_per_rank(a.metrics, job->rank, rank_metrics, sizeof rank_metrics)) metrics = rank_metrics;
  gt_trainer_config tc = {.optim = gt_optim_defaults(kind), .grad_clip = a.clip, .grad_accum = a.accum,
                          .metrics_path = metrics, .print_every = lead ? a.print_every : 0,
                          .schedule = {.lr_max = a.lr, .lr_min = a.min_lr, .warmup = a.warmup, .total = a.steps},
                          .dist = dist, .no_overlap = a.no_overlap, .precision = precision,
                          .commit_vote = a.reshape, .skip_nonfinite = a.skip_nonfinite,
                          .update_per_layer = a.update_per_layer, .delayed_update = a.delayed_update};
  if (a.weight_decay >= 0) tc.optim.weight_decay = a.weight_decay;
  tc.optim.state_dir = state_dir;
  if (!joining && (s = gt_trainer_create(m, &tc, &tr)) != GT_OK) {
    fail("creating the trainer", s);
    goto out;
  }
  if (lead && m)
    printf("gpt: %zu parameters, L=%d C=%d NH=%d T=%d V=%d, B=%d x %d micro-batches per replica, %s (%s kernels), "
           "%s, %d threads, peak %.1f GFLOP/s; world %d = dp %d x tp %d x pp %d%s%s%s\n",
           gt_model_param_count_whole(m), a.layers, a.channels, a.heads, a.seq, vocab, rows,
           a.accum, gt_backend_name(be), gt_backend_kernels(be), gt_precision_name(precision),
           gt_backend_num_threads(be), gt_backend_peak_flops(be) / 1e9, plan.world, plan.layout.dp, plan.layout.tp,
           plan.layout.pp, plan.zero1 ? ", ZeRO-1" : "", plan.seq_parallel ? ", sequence parallel" : "",
           gt_model_offloaded(m) ? ", offloaded" : "");
  if (!joining && (s = gpt_ckpt_start(&a.ckpt, job, tr, loader, &ckpt)) != GT_OK) {
    fail("resuming from a checkpoint", s);
    goto out;
  }
  if (ckpt) gpt_ckpt_catch_stop(); /* a stop lets the save in flight commit (on the way out) */
  if (!joining && (s = gpt_failslow_start(&a.failslow, dist, m, job, metrics, NULL, &failslow)) != GT_OK) {
    rc = 2;
    fail("starting fail-slow detection", s);
    goto out;
  }
  if (a.rebalance && !rebalance && lead) printf("--rebalance: one replica and one stage, nothing to move\n");
  if (rebalance && !joining && (s = gpt_rebalance_create(&plan, dist, be, shares, cap, job, a.rebalance_local, &rb)) != GT_OK) {
    fail("setting up --rebalance", s);
    goto out;
  }
  /* Stages are re-cut by measured speed where the state can move between
   * them (gt_trainer_move_state: not with ZeRO-1's shards). */
  if (rb && plan.layout.pp > 1 && plan.layout.pp <= GT_REBALANCE_MAX_STAGES && plan.chunks == 1 && !plan.zero1)
    gpt_rebalance_enable_recut(rb, rows, a.seq);
  int cut_first[GT_REBALANCE_MAX_STAGES + 1];
  if (a.reshape) {
    gpt_reshape_init(&rsh, job);
    rsh.fixed_every = a.mirror_every;
    printf("gpt: rank %d of %d (pid %d), --reshape on\n", job->rank, job->world_size, (int)getpid());
    fflush(stdout);
    if (dist && (s = gpt_mirror_start(&rsh, tr, job, lead)) != GT_OK) {
      fail("starting redundancy", s);
      goto out;
    }
    if ((s = gpt_watch_start(&rsh, job, dist ? gt_dist_grid(dist) : NULL)) != GT_OK) {
      fail("watching the membership", s);
      goto out;
    }
  }
  if (joining) {
    s = gpt_reshape_join(&rsh, job);
    if (s == GT_OK && rsh.job_finished) {
      printf("gpt: rank %d (pid %d): training ended before the job took it in; nothing left to train\n", job->rank,
             (int)getpid());
      rc = 0;
      goto out;
    }
    if (s == GT_OK)
      s = reshape(&a, job, be, &gc, peak, schedule, &rsh, total, &mc, &tc, &plan, &mp, &dist, &m, &tr, &loader, &ckpt,
                  reshaped_gen, sizeof reshaped_gen, &launch_plan, true);
    if (s != GT_OK) {
      fail("joining the running job", s);
      rc = GPT_EXIT_RESHAPE_FAILED;
      goto out;
    }
    lead = job->rank == 0;
    tc.print_every = lead ? a.print_every : 0;
  }
  gt_step_stats st = {0}, first = {0};
  gt_failslow_report report;
  int start = gt_trainer_step_index(tr);
  for (int i = start; i < a.steps; i++) {
    bool failed = (s = gt_trainer_step(tr, loader, &st)) != GT_OK ||
                  (s = gpt_ckpt_after_step(&a.ckpt, ckpt, tr, lead)) != GT_OK ||
                  (s = gpt_failslow_after_step(failslow, &st, &report)) != GT_OK ||
                  (rb && (s = gpt_rebalance_after_step(rb, tr, &st, failslow ? &report : NULL, lead)) != GT_OK) ||
                  (a.reshape && (s = gpt_mirror_after_step(&rsh, tr, st.seconds, lead)) != GT_OK);
    /* --reshape with --failslow: a slow rank, or the ranks behind a slow
     * link, may be left out (the ladder's S3); they leave, in one epoch,
     * and the others reshape without them. */
    int excluded[GT_MEMBERS_MAX], nexcl = 0;
    if (!failed && a.reshape && failslow)
      nexcl = gpt_reshape_consider_exclusion(&rsh, job, &plan, &report, rb != NULL, ckpt != NULL,
                                             a.steps - (i + 1), lead, excluded);
    bool me = false;
    for (int k = 0; k < nexcl; k++) me |= excluded[k] == job->rank;
    if (me) {
      int epoch = 0, gen[GT_MEMBERS_MAX];
      for (int k = 0; k < nexcl; k++) gen[k] = rsh.members[excluded[k]];
      s = gt_members_remove_set(job->store, rsh.gen_world, gen, nexcl, &epoch);
      printf("gpt: excluded after step %d (pid %d): membership epoch %d goes on without rank %d\n", i + 1,
             (int)getpid(), epoch, rsh.gen_rank);
      if (s != GT_OK) fail("leaving the job", s);
      rc = s == GT_OK ? 0 : 1;
      goto out;
    }
    /* --reshape: ranks restarted alone ask to join, every few steps. */
    bool grow = nexcl > 0;
    if (!failed && !grow && a.reshape && dist && (i + 1) % GPT_JOIN_CHECK_EVERY == 0)
      failed = (s = gpt_reshape_check_joins(&rsh, job, gt_grid_world(gt_dist_grid(dist)), &grow)) != GT_OK;
    if (failed || grow) {
      if (failed) fail("training", s);
      if (failed && (!a.reshape || job->world_size == 1 || gpt_ckpt_stop_signal())) goto out;
      /* Fail-slow monitoring and rebalancing were set up for the old layout. */
      gpt_rebalance_destroy(rb), rb = NULL;
      gt_failslow_destroy(failslow), failslow = NULL;
      if (!failed) gt_job_step(job, i + 1);
      s = reshape(&a, job, be, &gc, peak, schedule, &rsh, total, &mc, &tc, &plan, &mp, &dist, &m, &tr, &loader, &ckpt,
                  reshaped_gen, sizeof reshaped_gen, &launch_plan, !failed);
      /* Another rank lost during the reshape: the next epoch, without it,
       * is tried (the old layout is intact until a reshape succeeds). */
      for (int retry = 0; s != GT_OK && s != GT_ECANCELED && !rsh.state_lost && retry < GPT_RESHAPE_RETRIES; retry++) {
        fail("reshaping (trying the next membership epoch)", s);
        s = reshape(&a, job, be, &gc, peak, schedule, &rsh, total, &mc, &tc, &plan, &mp, &dist, &m, &tr, &loader,
                    &ckpt, reshaped_gen, sizeof reshaped_gen, &launch_plan, false);
      }
      if (s != GT_OK) {
        fail("reshaping", s);
        rc = s == GT_ECANCELED ? 1 : GPT_EXIT_RESHAPE_FAILED; /* a restart from the newest checkpoint */
        goto out;
      }
      lead = job->rank == 0;
      tc.print_every = lead ? a.print_every : 0;
      /* Fail-slow monitoring goes on at the new layout (three ranks or more). */
      if (a.failslow.on && job->world_size >= 3 &&
          (s = gpt_failslow_start(&a.failslow, dist, m, job, metrics, rsh.members, &failslow)) != GT_OK) {
        fail("starting fail-slow detection again", s);
        goto out;
      }
      i = gt_trainer_step_index(tr) - 1;
      continue;
    }
    if (gpt_rebalance_take_recut(rb, cut_first)) {
      gt_ckpt_destroy(ckpt); /* after the save in flight; made again on the new trainer */
      ckpt = NULL;
      s = recut(be, &mc, &mp, &gc, &plan, rows, a.seq, cut_first, &tc, &m, &tr);
      if (s == GT_OK) s = gpt_ckpt_rebind(&a.ckpt, job, tr, loader, &ckpt);
    }
    if (s != GT_OK) {
      fail("re-cutting the pipeline", s);
      goto out;
    }
    if (i == start) first = st;
    gt_job_step(job, i + 1); /* giantrun's hang detection watches this */
    if (gpt_ckpt_stop_signal()) {
      if (lead) printf("gpt: signal %d: stopping after step %d\n", gpt_ckpt_stop_signal(), i + 1);
      rc = 128 + gpt_ckpt_stop_signal();
      goto out;
    }
  }
  /* --delayed-update: the last step's gradients are still held. */
  if (tr && (s = gt_trainer_flush(tr)) != GT_OK) {
    fail("applying the last update", s);
    goto out;
  }
  gpt_ckpt_finish(&a.ckpt, ckpt, tr, lead);
  if (a.reshape && lead) gpt_reshape_finish(&rsh, job); /* for a rank still asking to join */
  gt_job_done(job);
  gpt_failslow_summary(failslow, lead);
  /* A run that resumed where training ends (a restart after the last
   * step's checkpoint) took no step: it has no loss to show. */
  if (lead && start < a.steps) printf("loss %.6f -> %.6f over steps %d..%d\n", first.loss, st.loss, start, a.steps);
  else if (lead) printf("no steps left: resumed at step %d of %d\n", start, a.steps);
  if (a.sample > 0 && plan.layout.pp > 1) {
    if (lead) printf("(no sample: generation runs the whole model on one rank, and this one is cut into stages)\n");
  } else if (a.sample > 0 && (s = generate(m, &a, vocab, data_vocab, lead)) != GT_OK) {
    fail("sampling", s);
    goto out;
  }
  rc = 0;
out:
  gt_job_done(job); /* what is left (threads, saves) is winding down, not a stall */
  gpt_reshape_destroy(&rsh);
  gpt_rebalance_destroy(rb);
  free(shares);
  gt_failslow_destroy(failslow);
  gt_ckpt_destroy(ckpt);
  gt_trainer_destroy(tr);
  gt_model_destroy(m);
  gt_loader_close(loader);
  gt_dist_destroy(dist);
  gt_job_destroy(job);
  gt_backend_destroy(be);
  return rc;
}
