/* examples/gpt: train a byte-level GPT on a text corpus and sample from it.
 *
 *   gpt [--steps N] [--data FILE.tok | --corpus PATH] [...]   (--help lists all)
 *   giantrun --standalone --nproc-per-node 4 --plan dp=2,tp=2 gpt [...]
 *
 * With no --data, the text of Debian's fortunes is tokenized once into
 * data/fortunes.tok. Each step prints its loss, learning rate, gradient
 * norm, time, tokens/s and MFU; at the end the model writes a sample.
 * The model is gpt.c; everything else a run does (planning, the layout of
 * --plan, checkpoints, fail-slow mitigation, reshaping when a rank dies)
 * is Giant's run API (giant/run.h), which this program hands its model,
 * its data and its flags. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "giant/giant.h"
#include "gpt.h"

typedef struct gpt_args {
  const char *corpus, *annotate;
  int layers, channels, heads, sample;
  float temperature;
  bool untied;
  gpt_config gc; /* the model, once the data's vocabulary is known */
} gpt_args;

static const char *usage =
    "usage: gpt [options]\n"
    "Trains a byte-level GPT on a text corpus, then prints a sample.\n\n"
    "the model:\n"
    "  --corpus PATH       text file or directory tokenized into --data when it is missing\n"
    "                      (default /usr/share/games/fortunes)\n"
    "  --layers L  --channels C  --heads NH   (default 4, 128, 4; --seq sets T)\n"
    "  --untied            do not tie the output matrix to the embedding\n"
    "  --annotate LIST     the model's annotations (docs/annotations.md), any of replicate=N,\n"
    "                      split=K, stages=S, pipeline=M, offload=W, embed (a replicated embedding\n"
    "                      and first block before the split body; needs --untied)\n"
    "  --sample N          tokens to generate at the end (default 300, 0 = none)\n"
    "  --temperature X     sampling temperature (default 0.8)\n";

/* Tokenize the corpus on first use; an existing token file is reused. */
static gt_status ensure_data(const gt_run_options *o, void *user) {
  const gpt_args *g = user;
  bool made;
  uint64_t n;
  GT_TRY(gt_tokenize_if_missing(g->corpus, o->data, &made, &n));
  if (made) printf("tokenized %s into %s: %llu tokens\n", g->corpus, o->data, (unsigned long long)n);
  return GT_OK;
}

static gt_status add_layers(gt_model *m, void *user) { return gpt_add_layers(m, &((gpt_args *)user)->gc); }

/* Tensor-parallel sizes a GPT takes: they divide the heads, the MLP width
 * and the vocabulary. */
static bool can_split(int tp, void *user) {
  const gpt_config *c = &((gpt_args *)user)->gc;
  return c->NH % tp == 0 && (4 * c->C) % tp == 0 && c->vocab_size % tp == 0;
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
 * each); the lead prints. data_vocab: the ids the data can hold. */
static gt_status generate(gt_model *m, const gt_run_options *o, const gpt_args *g, int data_vocab, bool lead) {
  gt_acts *acts = NULL;
  GT_TRY(gt_acts_create(m, &acts));
  int32_t *ctx = calloc((size_t)o->seq, sizeof *ctx);
  int32_t *out = calloc((size_t)g->sample + 1, sizeof *out);
  float *probs = malloc((size_t)g->gc.vocab_size * sizeof *probs);
  char *text = malloc(4 * (size_t)g->sample + 16);
  gt_status s = ctx && out && probs && text ? GT_OK : gt_errorf(GT_ENOMEM, "out of memory for sampling");
  uint64_t rng = o->seed ^ 0x5eed;
  int n = 0;
  out[n++] = data_vocab > GT_BYTE_DOC_SEP ? GT_BYTE_DOC_SEP : '\n'; /* start as a new document */
  while (s == GT_OK && n <= g->sample) {
    int T = n < o->seq ? n : o->seq;
    memcpy(ctx, out + n - T, (size_t)T * sizeof *ctx);
    gt_batch b = {.B = 1, .T = T, .inputs = ctx, .targets = NULL};
    s = gt_model_forward(m, acts, &b, NULL);
    if (s == GT_OK) s = gt_model_probs(m, acts, 0, T - 1, probs);
    /* Only ids the data can hold; the padding rows are never drawn. */
    if (s == GT_OK) out[n++] = sample_token(probs, data_vocab, g->temperature, &rng);
  }
  if (s == GT_OK && lead) {
    gt_detokenize_bytes(out + 1, (size_t)n - 1, text, 4 * (size_t)g->sample + 16);
    printf("\n---- sample (%d tokens, temperature %.2f) ----\n%s\n----\n", n - 1, g->temperature, text);
  }
  free(ctx);
  free(out);
  free(probs);
  free(text);
  gt_acts_destroy(acts);
  return s;
}

/* The model's vocabulary is the file's rounded up to a multiple of 64, as
 * GPT-2 pads 50257 to 50304: the extra rows are never targets, and the
 * size then divides among tensor-parallel ranks. */
static gt_status configure(const gt_run_options *o, gpt_args *g, int *data_vocab) {
  gt_loader *peek = NULL;
  gt_loader_config lc = {.path = o->data, .B = 1, .T_max = 1, .nshards = 1};
  GT_TRY(gt_loader_open(&lc, 0, &peek));
  *data_vocab = (int)gt_loader_header(peek)->vocab_size;
  gt_loader_close(peek);
  g->gc = (gpt_config){.vocab_size = (*data_vocab + 63) / 64 * 64,
                       .T_max = o->seq,
                       .C = g->channels,
                       .NH = g->heads,
                       .L = g->layers,
                       .tie_weights = !g->untied};
  return gpt_parse_annotations(g->annotate, &g->gc.ann);
}

int main(int argc, char **argv) {
  gpt_args g = {.corpus = "/usr/share/games/fortunes",
                .layers = 4,
                .channels = 128,
                .heads = 4,
                .sample = 300,
                .temperature = 0.8f};
  gt_opt_spec specs[] = {
      {"--corpus", GT_OPT_STR, &g.corpus, 0, 0},
      {"--annotate", GT_OPT_STR, &g.annotate, 0, 0},
      {"--layers", GT_OPT_INT, &g.layers, 0, 1e4},
      {"--channels", GT_OPT_INT, &g.channels, 1, 1e6},
      {"--heads", GT_OPT_INT, &g.heads, 1, 1e4},
      {"--sample", GT_OPT_INT, &g.sample, 0, 1e7},
      {"--temperature", GT_OPT_FLOAT, &g.temperature, 1e-3, 100},
      {"--untied", GT_OPT_FLAG, &g.untied, 0, 0},
  };
  gt_run_options o;
  gt_run_options_init(&o);
  int rc = gt_run_parse(argc, argv, usage, specs, (int)(sizeof specs / sizeof specs[0]), &o);
  if (rc >= 0) return rc;
  gt_run *run = NULL;
  int data_vocab = 0;
  gt_run_model model = {.add_layers = add_layers, .can_split = can_split, .user = &g};
  gt_status s = gt_run_open(&o, &run);
  if (s == GT_OK) s = gt_run_prepare(run, ensure_data, &g);
  if (s == GT_OK && (s = configure(&o, &g, &data_vocab)) != GT_OK) {
    fprintf(stderr, "gpt: reading the data and the annotations: %s (%s)\n", gt_last_error(), gt_status_name(s));
    gt_run_destroy(run);
    return s == GT_ENOMEM ? GT_RUN_EXIT_FAILED : s == GT_EINVAL ? GT_RUN_EXIT_USAGE : GT_RUN_EXIT_INPUT;
  }
  if (s == GT_OK) s = gt_run_start(run, &model);
  if (s == GT_OK) s = gt_run_train(run);
  gt_model *m = s == GT_OK ? gt_run_trained_model(run) : NULL;
  bool lead = gt_run_rank(run) == 0;
  if (m && g.sample > 0 && gt_run_pipeline_stages(run) > 1) {
    if (lead) printf("(no sample: generation runs the whole model on one rank, and this one is cut into stages)\n");
  } else if (m && g.sample > 0 && (s = generate(m, &o, &g, data_vocab, lead)) != GT_OK) {
    fprintf(stderr, "gpt: sampling: %s (%s)\n", gt_last_error(), gt_status_name(s));
  }
  rc = gt_run_exit_status(run, s);
  gt_run_destroy(run);
  return rc;
}
