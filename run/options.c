/* A run's flags: one table every program shares, its --help sections, the
 * environment giantrun sets, and the checks that flags agree. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "giant/backend.h"
#include "giant/model.h"
#include "giant/optim.h"
#include "giant/engine/pipeline.h"
#include "giant/protocol.h"
#include "giant/run.h"
#include "giant/engine/trainer.h"
#include "ladder.h"
#include "ckpt/hf.h"

void gt_run_options_init(gt_run_options *o) {
  *o = (gt_run_options){.data = "data/fortunes.tok",
                        .device = "cpu",
                        .precision = "fp32",
                        .recompute = "none",
                        .optimizer = "adamw",
                        .steps = 300,
                        .batch = 8,
                        .seq = 128,
                        .warmup = 20,
                        .print_every = 10,
                        .lr = 1e-3f,
                        .bucket_kib = 4096,
                        .zero = -1,
                        .schedule = "1f1b",
                        .min_lr = 1e-4f,
                        .clip = 1.0f,
                        .weight_decay = -1,
                        .seed = 1,
                        .skip_nonfinite = 3,
                        .failslow_clock = "auto",
                        .ladder = "auto",
                        .init_names = "hf-gpt2"};
}

static const char *run_usage =
    "data:\n"
    "  --data FILE         token file to train on (default data/fortunes.tok)\n"
    "  --documents         cut micro-batches at document boundaries (T varies up to --seq)\n"
    "training:\n"
    "  --steps N           optimizer steps (default 300)\n"
    "  --seq T             tokens per row (default 128)\n"
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
    "  --recompute MODE    activations computed again in backward instead of kept (docs/memory.md):\n"
    "                      none; attention, each block's attention core (its softmax state and\n"
    "                      output); block, each layer from its input, one layer's worth at a time\n"
    "                      (default none; a model's recompute scopes override it where they are)\n"
    "parallelism (under giantrun):\n"
    "  --plan LAYOUT       dp=2,tp=2,pp=1 or auto (default: $GT_PLAN, else auto: the planner chooses);\n"
    "                      a factor left out comes from the annotations, else from the planner\n"
    "  --zero S            ZeRO stage over data-parallel ranks: 0 off, 1 the optimizer state\n"
    "                      sharded, 2 the gradients too (default: the model's zero(s), else 0;\n"
    "                      docs/memory.md)\n"
    "  --zero1             the same as --zero 1\n"
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
    "  --ladder RUNG       with --failslow, what a flagged rank gets: auto, the rung that predicts\n"
    "                      the least time over the steps left (default); or, where the job can take\n"
    "                      it, none, rows or recut (--rebalance), exclude (--reshape), restart\n"
    "                      (--ckpt-dir: a checkpoint, then giantrun restarts every worker from it)\n"
    "  --reshape           when a rank is lost, the ranks left go on in-process at a layout for\n"
    "                      their number, with the same global batch, taking the state from each\n"
    "                      other (default: $GT_RESHAPE=1, which giantrun --reshape sets)\n"
    "  --mirror-every N    with --reshape: copy the state only one rank holds (ZeRO-1 shards) to a\n"
    "                      peer every N steps, so that its loss loses nothing (default 0: as often as\n"
    "                      2% of the step time allows, measured over the first steps)\n"
    "  --mem-mib N         memory each rank may use: --plan auto takes no layout whose expected\n"
    "                      peak is over it (default: --device-mem-mib, else no limit)\n"
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
    "  --init-from PATH    start from the weights of a safetensors file, or of a directory holding\n"
    "                      model.safetensors and config.json, at any layout (a checkpoint to resume\n"
    "                      from comes first; docs/interop.md)\n"
    "  --init-names N      the file's tensor names: hf-gpt2 (Hugging Face's GPT2LMHeadModel, the\n"
    "                      default), hf-llama (its LlamaForCausalLM) or giant (giant-ckpt export's)\n"
    "  --metrics FILE      append one JSON line per step (the lead rank's; a %r in FILE gives\n"
    "                      every rank its own file, %r replaced by the rank)\n"
    "  --print-every N     print every N steps, with the fraction done and the time left (default 10)\n"
    "  --tensorboard DIR   write TensorBoard event files into DIR (made if missing): the lead's\n"
    "                      scalars every step, and faults, fail-slow verdicts, the ladder's\n"
    "                      decisions and reshapes as text (docs/observability.md)\n"
    "evaluation:\n"
    "  --eval-every N      the validation loss every N steps and after the last, forward only over\n"
    "                      a fixed set of rows, the same at every layout (default 0: never; not at\n"
    "                      pipeline layouts)\n"
    "  --eval-data FILE    the token file to evaluate on\n"
    "  --eval-split F      evaluate on the last fraction F (up to 0.5) of --data instead, which\n"
    "                      training then leaves out\n"
    "  --eval-rows N       rows of --seq tokens evaluated, from the start (default 64, or fewer if\n"
    "                      the data has fewer)\n"
    "fail-slow detection (2 or more ranks):\n"
    "  --failslow          gather every rank's step telemetry and flag slow ranks and links\n"
    "  --failslow-theta X  slowdown that counts, as a fraction (default 0.25; a rank of two: 0.4)\n"
    "  --failslow-k N      consecutive steps (compute) or probes (link) to flag (default 5)\n"
    "  --failslow-warmup N steps learnt before any verdict (default 10)\n"
    "  --failslow-window N steps of history for the noise and the wait baseline (default 50)\n"
    "  --failslow-every N  gather every N steps (default 1)\n"
    "  --failslow-probe-rounds N  round trips per pair in a link probe (default 3)\n"
    "  --failslow-probe-bytes N   what a probe's transfers carry, each way (default 16384)\n"
    "  --failslow-clock C  on the CPU, a rank's compute is its wall time (wall: what other processes\n"
    "                      take of its cores counts as its slowness) or its CPU time (cpu: the OS\n"
    "                      sharing cores among the job's own ranks does not); auto: wall when the\n"
    "                      node's ranks and threads leave a core spare, else cpu (default auto)\n"
    "exit status: 0 done, 1 failed (giantrun restarts), 2 bad flags, 65 bad input data, 70 training\n"
    "  diverged (none of the three restarted), 75 restart every worker from the newest checkpoint,\n"
    "  128+N stopped by signal N\n";

const char *gt_run_usage(void) { return run_usage; }

#define RUN_SPECS 64

static int run_specs(gt_run_options *o, gt_opt_spec *s) {
  gt_opt_spec t[] = {
      {"--data", GT_OPT_STR, &o->data, 0, 0},
      {"--documents", GT_OPT_FLAG, &o->documents, 0, 0},
      {"--steps", GT_OPT_INT, &o->steps, 1, 1e9},
      {"--seq", GT_OPT_INT, &o->seq, 1, 1e6},
      {"--batch", GT_OPT_INT, &o->batch, 1, 1e6},
      {"--global-batch", GT_OPT_INT, &o->global_batch, 0, 1e6},
      {"--accum", GT_OPT_INT, &o->accum, 1, 1e6},
      {"--optimizer", GT_OPT_STR, &o->optimizer, 0, 0},
      {"--lr", GT_OPT_FLOAT, &o->lr, 0, 10},
      {"--min-lr", GT_OPT_FLOAT, &o->min_lr, 0, 10},
      {"--warmup", GT_OPT_INT, &o->warmup, 0, 1e9},
      {"--weight-decay", GT_OPT_FLOAT, &o->weight_decay, 0, 10},
      {"--clip", GT_OPT_FLOAT, &o->clip, 0, 1e9},
      {"--skip-nonfinite", GT_OPT_INT, &o->skip_nonfinite, 0, 1e6},
      {"--seed", GT_OPT_U64, &o->seed, 0, 0},
      {"--precision", GT_OPT_STR, &o->precision, 0, 0},
      {"--recompute", GT_OPT_STR, &o->recompute, 0, 0},
      {"--plan", GT_OPT_STR, &o->plan, 0, 0},
      {"--zero1", GT_OPT_FLAG, &o->zero1, 0, 0},
      {"--zero", GT_OPT_INT, &o->zero, 0, 3},
      {"--seq-parallel", GT_OPT_FLAG, &o->seq_parallel, 0, 0},
      {"--bucket-kib", GT_OPT_INT, &o->bucket_kib, 1, 1 << 22},
      {"--no-overlap", GT_OPT_FLAG, &o->no_overlap, 0, 0},
      {"--schedule", GT_OPT_STR, &o->schedule, 0, 0},
      {"--chunks", GT_OPT_INT, &o->chunks, 1, 64},
      {"--speeds", GT_OPT_STR, &o->speeds, 0, 0},
      {"--rebalance", GT_OPT_FLAG, &o->rebalance, 0, 0},
      {"--rebalance-local", GT_OPT_FLAG, &o->rebalance_local, 0, 0},
      {"--reshape", GT_OPT_FLAG, &o->reshape, 0, 0},
      {"--mirror-every", GT_OPT_INT, &o->mirror_every, 0, 1e9},
      {"--mem-mib", GT_OPT_INT, &o->mem_mib, 1, 1 << 30},
      {"--print-plan", GT_OPT_FLAG, &o->print_plan, 0, 0},
      {"--device", GT_OPT_STR, &o->device, 0, 0},
      {"--threads", GT_OPT_INT, &o->threads, 0, 4096},
      {"--device-mem-mib", GT_OPT_INT, &o->device_mem_mib, 0, 1 << 30},
      {"--offload", GT_OPT_INT, &o->offload, 0, 4096},
      {"--offload-prefetch", GT_OPT_INT, &o->offload_prefetch, 0, 4096},
      {"--offload-optimizer", GT_OPT_STR, &o->offload_optimizer, 0, 0},
      {"--host-mem-mib", GT_OPT_INT, &o->host_mem_mib, 0, 1 << 30},
      {"--update-per-layer", GT_OPT_FLAG, &o->update_per_layer, 0, 0},
      {"--delayed-update", GT_OPT_FLAG, &o->delayed_update, 0, 0},
      {"--ckpt-dir", GT_OPT_STR, &o->ckpt_dir, 0, 0},
      {"--ckpt-every", GT_OPT_INT, &o->ckpt_every, 1, 1e9},
      {"--ckpt-keep", GT_OPT_INT, &o->ckpt_keep, 0, 1e6},
      {"--init-from", GT_OPT_STR, &o->init_from, 0, 0},
      {"--init-names", GT_OPT_STR, &o->init_names, 0, 0},
      {"--metrics", GT_OPT_STR, &o->metrics, 0, 0},
      {"--print-every", GT_OPT_INT, &o->print_every, 0, 1e9},
      {"--tensorboard", GT_OPT_STR, &o->tensorboard, 0, 0},
      {"--eval-every", GT_OPT_INT, &o->eval_every, 0, 1e9},
      {"--eval-data", GT_OPT_STR, &o->eval_data, 0, 0},
      {"--eval-split", GT_OPT_FLOAT, &o->eval_split, 0, 0.5},
      {"--eval-rows", GT_OPT_INT, &o->eval_rows, 0, 1e7},
      {"--failslow", GT_OPT_FLAG, &o->failslow, 0, 0},
      {"--failslow-theta", GT_OPT_FLOAT, &o->failslow_theta, 0.01, 100},
      {"--failslow-k", GT_OPT_INT, &o->failslow_k, 1, 1000},
      {"--failslow-warmup", GT_OPT_INT, &o->failslow_warmup, 1, 1e6},
      {"--failslow-window", GT_OPT_INT, &o->failslow_window, 4, 1e5},
      {"--failslow-every", GT_OPT_INT, &o->failslow_every, 1, 1e6},
      {"--failslow-probe-rounds", GT_OPT_INT, &o->failslow_probe_rounds, 1, 100},
      {"--failslow-probe-bytes", GT_OPT_INT, &o->failslow_probe_bytes, 4, 64 << 20},
      {"--failslow-clock", GT_OPT_STR, &o->failslow_clock, 0, 0},
      {"--ladder", GT_OPT_STR, &o->ladder, 0, 0},
  };
  _Static_assert(sizeof t / sizeof t[0] == RUN_SPECS - 1, "RUN_SPECS counts the table and its end");
  memcpy(s, t, sizeof t);
  return (int)(sizeof t / sizeof t[0]);
}

/* A positive integer from the environment, where the flag left 0. */
static gt_status env_int(const char *name, int *out) {
  const char *v = getenv(name);
  if (!v || !*v || *out) return GT_OK;
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (*end || errno || x < 1 || x > 1000000000)
    return gt_errorf(GT_EINVAL, "%s='%s': want a positive integer", name, v);
  *out = (int)x;
  return GT_OK;
}

/* Flags win; giantrun's environment fills what they leave unset. Then
 * the combinations that cannot work are refused before anything starts. */
static gt_status from_env_and_check(gt_run_options *o) {
  gt_optim_kind kind;
  gt_precision precision;
  gt_recompute recompute;
  gt_pp_kind schedule;
  gt_backend_config bc;
  GT_TRY(gt_optim_parse(o->optimizer, &kind));
  GT_TRY(gt_precision_parse(o->precision, &precision));
  gt_status s = gt_recompute_parse(o->recompute, &recompute);
  if (s != GT_OK) return gt_error_context(s, "--recompute");
  GT_TRY(gt_pp_parse(o->schedule, &schedule));
  GT_TRY(gt_device_parse(o->device, &bc));
  if (!o->ckpt_dir && getenv(GT_ENV_CKPT_DIR) && *getenv(GT_ENV_CKPT_DIR)) o->ckpt_dir = getenv(GT_ENV_CKPT_DIR);
  GT_TRY(env_int(GT_ENV_CKPT_EVERY, &o->ckpt_every));
  GT_TRY(env_int(GT_ENV_CKPT_KEEP, &o->ckpt_keep));
  if (o->ckpt_dir && !o->ckpt_every)
    return gt_errorf(GT_EINVAL, "checkpoints in %s need --ckpt-every N (or GT_CKPT_EVERY)", o->ckpt_dir);
  GT_TRY(ck_hf_check_names(o->init_names));
  const char *env_reshape = getenv(GT_ENV_RESHAPE);
  if (env_reshape && !strcmp(env_reshape, "1")) o->reshape = true;
  if (strcmp(o->failslow_clock, "auto") && strcmp(o->failslow_clock, "cpu") && strcmp(o->failslow_clock, "wall"))
    return gt_errorf(GT_EINVAL, "--failslow-clock takes auto, cpu or wall, not '%s'", o->failslow_clock);
  run_ladder_caps policy;
  GT_TRY(run_ladder_parse(o->ladder, &policy));
  if (o->rebalance_local && !o->rebalance)
    return gt_errorf(GT_EINVAL, "--rebalance-local says who decides --rebalance: give --rebalance too");
  if (o->offload_optimizer && strcmp(o->offload_optimizer, "host") != 0 &&
      !(!strncmp(o->offload_optimizer, "disk:", 5) && o->offload_optimizer[5]))
    return gt_errorf(GT_EINVAL,
                     "--offload-optimizer takes disk:DIR (the state in a file in DIR) or host (in memory, "
                     "the default), not '%s'",
                     o->offload_optimizer);
  if (!o->eval_every && (o->eval_data || o->eval_split > 0 || o->eval_rows))
    return gt_errorf(GT_EINVAL, "--eval-data, --eval-split and --eval-rows say what to evaluate: give --eval-every N");
  if (o->eval_every && !o->eval_data == !(o->eval_split > 0))
    return gt_errorf(GT_EINVAL, "--eval-every N needs one of --eval-data FILE or --eval-split F");
  if (o->eval_split > 0 && o->documents)
    return gt_errorf(GT_EUNSUPPORTED,
                     "--eval-split with --documents is not supported (the held-out rows are fixed-length): "
                     "use --eval-data FILE");
  if (o->zero1 && o->zero >= 0 && o->zero != 1)
    return gt_errorf(GT_EINVAL, "--zero1 is --zero 1, and --zero %d was given too: give one", o->zero);
  if (o->zero1) o->zero = 1;
  if (o->zero >= 2 && (o->delayed_update || o->update_per_layer))
    return gt_errorf(GT_EUNSUPPORTED,
                     "--zero %d with %s is not supported: an update layer by layer needs each layer's whole "
                     "gradients; use --zero 1",
                     o->zero, o->delayed_update ? "--delayed-update" : "--update-per-layer");
  if (o->zero >= 3 && o->reshape)
    return gt_errorf(GT_EUNSUPPORTED,
                     "--zero 3 with --reshape is not supported: a reshape moves whole parameters from the "
                     "ranks left, and ZeRO-3 holds only their shards; use --zero 2, or restart from the last "
                     "checkpoint (without --reshape)");
  if (o->delayed_update && o->reshape)
    return gt_errorf(GT_EINVAL,
                     "--delayed-update holds a step's gradients for the next, and a reshape rebuilds the "
                     "trainer from its peers' state without them: leave out --reshape or --delayed-update");
  return GT_OK;
}

int gt_run_parse(int argc, char **argv, const char *usage, const gt_opt_spec *extra, int nextra, gt_run_options *o) {
  if (nextra < 0 || (nextra && !extra)) {
    fprintf(stderr, "gt_run_parse: bad table of the program's flags\n");
    return 2;
  }
  gt_opt_spec *specs = calloc((size_t)(RUN_SPECS + nextra), sizeof *specs);
  size_t n = strlen(usage ? usage : "") + strlen(run_usage) + 1;
  char *help = malloc(n);
  if (!specs || !help) {
    free(specs);
    free(help);
    fprintf(stderr, "out of memory parsing the flags\n");
    return 2;
  }
  snprintf(help, n, "%s%s", usage ? usage : "", run_usage);
  int k = run_specs(o, specs);
  if (nextra) memcpy(specs + k, extra, (size_t)nextra * sizeof *specs);
  int rc = gt_opt_parse(argc, argv, specs, k + nextra, help, NULL);
  free(specs);
  free(help);
  if (rc >= 0) return rc;
  const char *slash = argc > 0 && argv[0] ? strrchr(argv[0], '/') : NULL;
  o->program = slash ? slash + 1 : argc > 0 && argv[0] && *argv[0] ? argv[0] : "run";
  if (from_env_and_check(o) != GT_OK) {
    fprintf(stderr, "%s: %s\n", o->program, gt_last_error());
    return GT_RUN_EXIT_USAGE;
  }
  return -1;
}
