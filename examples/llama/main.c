/* examples/llama: train a byte-level Llama on a text corpus.
 *
 *   llama [--steps N] [--data FILE.tok | --corpus PATH] [...]   (--help lists all)
 *   giantrun --standalone --nproc-per-node 4 --plan dp=2,tp=2 llama [...]
 *
 * With no --data, the text of Debian's fortunes is tokenized once into
 * data/fortunes.tok. Each step prints its loss, learning rate, gradient
 * norm, time, tokens/s and MFU. The model is llama.c; everything else a
 * run does (planning, the layout of --plan, checkpoints, fail-slow
 * mitigation, reshaping when a rank dies) is Giant's run API
 * (giant/run.h), which this program hands its model, its data and its
 * flags. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "giant/giant.h"
#include "llama.h"

typedef struct llama_args {
  const char *corpus, *annotate;
  int layers, channels, heads, kv_heads, mlp_hidden;
  float rope_theta, rope_scale;
  llama_config lc; /* the model, once the data's vocabulary is known */
} llama_args;

static const char *usage =
    "usage: llama [options]\n"
    "Trains a byte-level Llama (RMSNorm, grouped-query attention with rotary embeddings, SwiGLU)\n"
    "on a text corpus.\n\n"
    "the model:\n"
    "  --corpus PATH       text file or directory tokenized into --data when it is missing\n"
    "                      (default /usr/share/games/fortunes)\n"
    "  --layers L  --channels C  --heads NH   (default 4, 128, 4; --seq sets T)\n"
    "  --kv-heads K        key/value heads, dividing NH (default 0: NH, multi-head attention)\n"
    "  --mlp-hidden H      the MLP's width (default 0: 2/3 of 4C, rounded up to 32)\n"
    "  --rope-theta X      the rotary base (default 10000)\n"
    "  --rope-scale X      linear position scaling (default 1: none)\n"
    "  --annotate LIST     the model's annotations (docs/annotations.md), any of replicate=N,\n"
    "                      split=K, stages=S, pipeline=M, offload=W, zero=S\n";

/* Tokenize the corpus on first use; an existing token file is reused. */
static gt_status ensure_data(const gt_run_options *o, void *user) {
  const llama_args *g = user;
  bool made;
  uint64_t n;
  GT_TRY(gt_tokenize_if_missing(g->corpus, o->data, &made, &n));
  if (made) printf("tokenized %s into %s: %llu tokens\n", g->corpus, o->data, (unsigned long long)n);
  return GT_OK;
}

static gt_status add_layers(gt_model *m, void *user) { return llama_add_layers(m, &((llama_args *)user)->lc); }

/* Tensor-parallel sizes a Llama takes: they divide the query and key/value
 * heads, the MLP width and the vocabulary. */
static bool can_split(int tp, void *user) {
  const llama_config *c = &((llama_args *)user)->lc;
  int kv = c->n_kv_heads > 0 ? c->n_kv_heads : c->NH;
  return c->NH % tp == 0 && kv % tp == 0 && llama_mlp_hidden(c) % tp == 0 && c->vocab_size % tp == 0;
}

/* The model's vocabulary is the file's rounded up to a multiple of 64: the
 * extra rows are never targets, and the size then divides among
 * tensor-parallel ranks. */
static gt_status configure(const gt_run_options *o, llama_args *g) {
  gt_loader *peek = NULL;
  gt_loader_config lc = {.path = o->data, .B = 1, .T_max = 1, .nshards = 1};
  GT_TRY(gt_loader_open(&lc, 0, &peek));
  int data_vocab = (int)gt_loader_header(peek)->vocab_size;
  gt_loader_close(peek);
  g->lc = (llama_config){.vocab_size = (data_vocab + 63) / 64 * 64,
                         .T_max = o->seq,
                         .C = g->channels,
                         .NH = g->heads,
                         .L = g->layers,
                         .n_kv_heads = g->kv_heads,
                         .mlp_hidden = g->mlp_hidden,
                         .rope_theta = g->rope_theta,
                         .rope_scale = g->rope_scale};
  return llama_parse_annotations(g->annotate, &g->lc.ann);
}

int main(int argc, char **argv) {
  llama_args g = {.corpus = "/usr/share/games/fortunes", .layers = 4, .channels = 128, .heads = 4};
  gt_opt_spec specs[] = {
      {"--corpus", GT_OPT_STR, &g.corpus, 0, 0},
      {"--annotate", GT_OPT_STR, &g.annotate, 0, 0},
      {"--layers", GT_OPT_INT, &g.layers, 0, 1e4},
      {"--channels", GT_OPT_INT, &g.channels, 1, 1e6},
      {"--heads", GT_OPT_INT, &g.heads, 1, 1e4},
      {"--kv-heads", GT_OPT_INT, &g.kv_heads, 0, 1e4},
      {"--mlp-hidden", GT_OPT_INT, &g.mlp_hidden, 0, 1e7},
      {"--rope-theta", GT_OPT_FLOAT, &g.rope_theta, 0, 1e9},
      {"--rope-scale", GT_OPT_FLOAT, &g.rope_scale, 0, 1e6},
  };
  gt_run_options o;
  gt_run_options_init(&o);
  int rc = gt_run_parse(argc, argv, usage, specs, (int)(sizeof specs / sizeof specs[0]), &o);
  if (rc >= 0) return rc;
  gt_run *run = NULL;
  gt_run_model model = {.add_layers = add_layers, .can_split = can_split, .user = &g};
  gt_status s = gt_run_open(&o, &run);
  if (s == GT_OK) s = gt_run_prepare(run, ensure_data, &g);
  if (s == GT_OK && (s = configure(&o, &g)) != GT_OK) {
    fprintf(stderr, "llama: reading the data and the annotations: %s (%s)\n", gt_last_error(), gt_status_name(s));
    gt_run_destroy(run);
    return s == GT_ENOMEM ? GT_RUN_EXIT_FAILED : s == GT_EINVAL ? GT_RUN_EXIT_USAGE : GT_RUN_EXIT_INPUT;
  }
  if (s == GT_OK) s = gt_run_start(run, &model);
  if (s == GT_OK) s = gt_run_train(run);
  rc = gt_run_exit_status(run, s);
  gt_run_destroy(run);
  return rc;
}
