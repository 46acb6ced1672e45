/* examples/custom_layer: a byte-level language model made of a layer type
 * defined in this folder (residual_mlp.c) between built-in layers, trained
 * by Giant's run API: alone, or under giantrun with every resilience flag
 * (--ckpt-dir, --reshape, --failslow, --rebalance ...; --help lists them).
 *
 *   custom_layer [--steps N] [--data FILE.tok] [--channels C] [--layers L]
 *   giantrun --standalone --nproc-per-node 2 --reshape custom_layer --data FILE.tok
 *
 * The model sees one token at a time (no attention), so it learns byte
 * bigram statistics: its loss falls from ln(257) = 5.55 toward the bigram
 * entropy of the text. */
#include <stdio.h>

#include "giant/giant.h"
#include "residual_mlp.h"

typedef struct model_args {
  int C, layers, vocab;
} model_args;

static gt_status add_layers(gt_model *m, void *user) {
  const model_args *a = user;
  int T = gt_model_get_config(m)->T_max;
  GT_TRY(gt_model_add(m, &gt_embedding_layer, "embed", &(gt_embedding_config){a->vocab, a->C, T, false}, NULL));
  for (int i = 0; i < a->layers; i++) {
    char name[16];
    snprintf(name, sizeof name, "mlp%d", i);
    GT_TRY(gt_model_add(m, &residual_mlp_layer, name, &(residual_mlp_config){a->C, 4 * a->C}, NULL));
  }
  GT_TRY(gt_model_add(m, &gt_layernorm_layer, "ln", &(gt_layernorm_config){a->C}, NULL));
  return gt_model_add(m, &gt_lm_head_layer, "head", &(gt_lm_head_config){a->C, a->vocab, "embed"}, NULL);
}

/* residual_mlp has no tensor-parallel split: data and pipeline parallelism only. */
static bool can_split(int tp, void *user) {
  (void)user;
  return tp == 1;
}

int main(int argc, char **argv) {
  model_args ma = {.C = 64, .layers = 2};
  gt_opt_spec specs[] = {{"--channels", GT_OPT_INT, &ma.C, 1, 1 << 16}, {"--layers", GT_OPT_INT, &ma.layers, 1, 1024}};
  gt_run_options o;
  gt_run_options_init(&o);
  o.steps = 200;
  o.batch = 16;
  o.seq = 64;
  o.lr = 3e-3f;
  o.min_lr = 3e-4f;
  o.warmup = 10;
  o.print_every = 20;
  int rc = gt_run_parse(argc, argv,
                        "usage: custom_layer [options]\n"
                        "the model:\n"
                        "  --channels C        model width (default 64)\n"
                        "  --layers L          residual MLPs between the embedding and the head (default 2)\n",
                        specs, 2, &o);
  if (rc >= 0) return rc;
  gt_run *run = NULL;
  gt_status s = gt_run_open(&o, &run);
  /* The vocabulary is the data's: read from its header. */
  gt_loader *peek = NULL;
  gt_loader_config lc = {.path = o.data, .B = 1, .T_max = 1, .nshards = 1};
  if (s == GT_OK && (s = gt_loader_open(&lc, 0, &peek)) != GT_OK) {
    fprintf(stderr, "custom_layer: %s (%s)\n", gt_last_error(), gt_status_name(s));
    gt_run_destroy(run);
    return s == GT_ENOMEM ? GT_RUN_EXIT_FAILED : GT_RUN_EXIT_INPUT;
  }
  if (peek) ma.vocab = (int)gt_loader_header(peek)->vocab_size;
  gt_loader_close(peek);
  gt_run_model model = {.add_layers = add_layers, .can_split = can_split, .user = &ma};
  if (s == GT_OK) s = gt_run_start(run, &model);
  if (s == GT_OK) s = gt_run_train(run);
  rc = gt_run_exit_status(run, s);
  gt_run_destroy(run);
  return rc;
}
