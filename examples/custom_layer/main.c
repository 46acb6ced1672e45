/* examples/custom_layer: a byte-level language model made of a layer type
 * defined in this folder (residual_mlp.c) between built-in layers.
 *
 *   custom_layer [--steps N] [--data FILE.tok]
 *
 * The model sees one token at a time (no attention), so it learns byte
 * bigram statistics: its loss falls from ln(257) = 5.55 toward the bigram
 * entropy of the text. */
#include <stdio.h>

#include "giant/giant.h"
#include "giant/options.h"
#include "residual_mlp.h"

int main(int argc, char **argv) {
  const char *data = "data/fortunes.tok";
  int steps = 200, C = 64;
  gt_opt_spec specs[] = {{"--data", GT_OPT_STR, &data, 0, 0},
                         {"--steps", GT_OPT_INT, &steps, 1, 1e9},
                         {"--channels", GT_OPT_INT, &C, 1, 1 << 16}};
  int rc = gt_opt_parse(argc, argv, specs, 3, "usage: custom_layer [--data FILE.tok] [--steps N] [--channels C]\n", NULL);
  if (rc >= 0) return rc;
  gt_backend *be = NULL;
  gt_loader *loader = NULL;
  gt_model *m = NULL;
  gt_trainer *tr = NULL;
  gt_loader_config lc = {.path = data, .B = 16, .T_max = 64, .nshards = 1};
  gt_status s = gt_backend_create(NULL, &be);
  if (s == GT_OK) s = gt_loader_open(&lc, 0, &loader);
  int V = s == GT_OK ? (int)gt_loader_header(loader)->vocab_size : 0;
  gt_model_config mc = {.B_max = 16, .T_max = 64, .seed = 1};
  if (s == GT_OK) s = gt_model_create(be, &mc, &m);
  if (s == GT_OK) s = gt_model_add(m, &gt_embedding_layer, "embed", &(gt_embedding_config){V, C, 64, false}, NULL);
  for (int i = 0; i < 2 && s == GT_OK; i++) {
    char name[16];
    snprintf(name, sizeof name, "mlp%d", i);
    s = gt_model_add(m, &residual_mlp_layer, name, &(residual_mlp_config){C, 4 * C}, NULL);
  }
  if (s == GT_OK) s = gt_model_add(m, &gt_layernorm_layer, "ln", &(gt_layernorm_config){C}, NULL);
  if (s == GT_OK) s = gt_model_add(m, &gt_lm_head_layer, "head", &(gt_lm_head_config){C, V, "embed"}, NULL);
  if (s == GT_OK) s = gt_model_build(m);
  gt_trainer_config tc = {.optim = gt_optim_defaults(GT_OPTIM_ADAMW), .grad_clip = 1.0f, .grad_accum = 1,
                          .print_every = 20, .schedule = {3e-3f, 3e-4f, 10, steps}};
  if (s == GT_OK) s = gt_trainer_create(m, &tc, &tr);
  for (int i = 0; i < steps && s == GT_OK; i++) s = gt_trainer_step(tr, loader, NULL);
  if (s != GT_OK) fprintf(stderr, "custom_layer: %s (%s)\n", gt_last_error(), gt_status_name(s));
  gt_trainer_destroy(tr);
  gt_model_destroy(m);
  gt_loader_close(loader);
  gt_backend_destroy(be);
  return s == GT_OK ? 0 : 1;
}
