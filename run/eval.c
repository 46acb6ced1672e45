/* The validation loss: the fixed rows shared out over the data-parallel
 * replicas (row r to replica r mod dp), each replica's rows forward in
 * micro-batches of the activations' size, the token losses summed and
 * reduced. Tensor-parallel ranks of a replica run its rows together. */
#include "eval.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/data/loader_engine.h"
#include "giant/engine/comm.h"
#include "giant/engine/grid.h"

enum { EVAL_ROWS_DEFAULT = 64 };

static uint32_t token_at(const run_eval *e, uint64_t i) {
  const unsigned char *p = (const unsigned char *)e->map + GT_TOKFILE_HEADER_BYTES + i * e->width;
  uint32_t v = 0;
  for (int k = (int)e->width - 1; k >= 0; k--) v = v << 8 | p[k];
  return v;
}

/* --eval-split's training rows: row i is tokens [i*T, i*T + T] of the
 * part before the evaluation tokens, as the loader cuts a file. */
static gt_status train_read(void *user, uint64_t index, int32_t *tokens, int n) {
  const run_eval *e = user;
  uint64_t at = index * (uint64_t)e->T;
  if (at + (uint64_t)n > e->first)
    return gt_errorf(GT_ERANGE, "training row %llu is past the split", (unsigned long long)index);
  for (int k = 0; k < n; k++) tokens[k] = (int32_t)token_at(e, at + (uint64_t)k);
  return GT_OK;
}

static gt_status map_file(run_eval *e, const char *path) {
  e->path = path;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return gt_errorf(GT_EIO, "cannot open %s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0 || sb.st_size < (off_t)GT_TOKFILE_HEADER_BYTES) {
    close(fd);
    return gt_errorf(GT_EINVAL, "%s is not a token file (too short)", path);
  }
  e->map_len = (size_t)sb.st_size;
  void *m = mmap(NULL, e->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return gt_errorf(GT_EIO, "cannot map %s: %s", path, strerror(errno));
  e->map = m;
  gt_tokfile_header h;
  GT_TRY(gt_tokfile_parse_header(m, e->map_len, path, &h));
  e->width = h.width;
  e->vocab = h.vocab_size;
  e->count = h.count;
  return GT_OK;
}

gt_status run_eval_open(run_eval *e, const gt_run_options *o, const gt_loader_source **train) {
  *e = (run_eval){0};
  if (!o->eval_every) return GT_OK; /* the flags' agreement: gt_run_parse */
  e->every = o->eval_every;
  e->T = o->seq;
  gt_status s = map_file(e, o->eval_data ? o->eval_data : o->data);
  if (s != GT_OK) return gt_error_context(s, "%s", o->eval_data ? "--eval-data" : "--eval-split");
  if (o->eval_split > 0) {
    uint64_t held = (uint64_t)((double)e->count * o->eval_split);
    e->first = e->count - held;
    e->count = held;
    if (e->first < (uint64_t)e->T + 1)
      return gt_errorf(GT_EINVAL, "--eval-split %g leaves %llu tokens of %s to train on, under one row of %d",
                       o->eval_split, (unsigned long long)e->first, o->data, e->T + 1);
    e->train = (gt_loader_source){.rows = (e->first - 1) / (uint64_t)e->T,
                                  .vocab_size = e->vocab,
                                  .read = train_read,
                                  .user = e,
                                  .name = o->data};
    *train = &e->train;
  }
  uint64_t avail = e->count > 0 ? (e->count - 1) / (uint64_t)e->T : 0;
  int want = o->eval_rows ? o->eval_rows : EVAL_ROWS_DEFAULT;
  if (avail == 0)
    return gt_errorf(GT_EINVAL, "%s: %llu evaluation tokens, under one row of %d", e->path,
                     (unsigned long long)e->count, e->T + 1);
  e->rows = avail < (uint64_t)want ? (int)avail : want;
  for (uint64_t i = 0; i < (uint64_t)e->rows * (uint64_t)e->T + 1; i++)
    if (token_at(e, e->first + i) >= e->vocab)
      return gt_errorf(GT_EINVAL, "%s: token %llu is %u, past the vocabulary of %u", e->path,
                       (unsigned long long)(e->first + i), token_at(e, e->first + i), e->vocab);
  return GT_OK;
}

void run_eval_close(run_eval *e) {
  if (e->map) munmap(e->map, e->map_len);
  e->map = NULL;
}

bool run_eval_due(const run_eval *e, int step, int steps) {
  return e->every > 0 && ((step + 1) % e->every == 0 || step + 1 == steps);
}

gt_status run_eval_loss(run_eval *e, gt_model *m, gt_dist *dist, const gt_plan *plan, int cap, float *loss) {
  if (plan->layout.pp > 1)
    return gt_errorf(GT_EUNSUPPORTED, "the validation loss is not computed at pipeline layouts (pp %d)",
                     plan->layout.pp);
  int dp = plan->layout.dp, me = plan->me.dp, T = e->T;
  int32_t *in = malloc((size_t)cap * T * sizeof *in), *tg = malloc((size_t)cap * T * sizeof *tg);
  gt_acts *acts = NULL;
  gt_status s = in && tg ? gt_acts_create(m, &acts) : gt_errorf(GT_ENOMEM, "out of memory for the evaluation rows");
  double sum = 0, tokens = 0;
  for (int r = me; s == GT_OK && r < e->rows;) {
    int B = 0;
    for (; B < cap && r < e->rows; B++, r += dp)
      for (int t = 0; t < T; t++) {
        uint64_t at = e->first + (uint64_t)r * T + (uint64_t)t;
        in[B * T + t] = (int32_t)token_at(e, at);
        tg[B * T + t] = (int32_t)token_at(e, at + 1);
      }
    gt_batch b = {.B = B, .T = T, .inputs = in, .targets = tg, .ntargets = (int64_t)B * T, .row = 0};
    float l = 0;
    s = gt_model_forward(m, acts, &b, &l);
    sum += (double)l * b.ntargets; /* the batch's mean loss, back to its sum */
    tokens += (double)b.ntargets;
  }
  gt_acts_destroy(acts);
  free(in);
  free(tg);
  GT_TRY(s);
  float red[2] = {(float)sum, (float)tokens};
  if (dist && dp > 1)
    GT_TRY(gt_comm_allreduce(gt_grid_comm(gt_dist_grid(dist), GT_GRID_DP), red, 2, GT_F32, GT_COMM_SUM));
  *loss = red[1] > 0 ? red[0] / red[1] : NAN;
  return GT_OK;
}
