/* The training-data loader: a memory-mapped, validated token file cut into
 * rows, handed out as (B, T) micro-batches.
 *
 * A row is a window of T_max+1 tokens at stride T_max (FIXED) or one
 * document (DOCUMENTS). Group micro-batch k takes rows k*total .. of an
 * endless sequence of epochs, each replica its B at its offset; with a seed, each epoch visits the rows in its
 * own seeded permutation. Everything follows from (file, B, offset, total,
 * T_max, mode, seed), so a shard's batch k is a pure function of k: seeking is free and
 * n shards together read exactly what one reader reads in n steps.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "giant/data.h"
#include "core/data/loader_engine.h"

struct gt_loader {
  gt_loader_config cfg;
  char *path;
  gt_tokfile_header h;
  /* The file is mapped only while it is opened (checked and indexed);
   * batches are read with pread, which reports a file truncated under the
   * loader as a short read where a mapping would raise SIGBUS. */
  int fd;
  bool file_failed;     /* a read found the file changed under the loader: its input, not a retry, is at fault */
  uint32_t vocab_limit; /* ids at or above it are refused (0: none but the data's own vocabulary) */
  unsigned char *map;
  size_t map_len;
  const unsigned char *tok;
  unsigned char *raw; /* one row's bytes, (T_max + 1) tokens */
  int32_t *row;       /* the same, decoded */
  uint64_t nrows;
  uint64_t *doc_start; /* DOCUMENTS: first token of each kept document */
  uint32_t *doc_len;   /* its row length: the document, plus the separator after it, <= T_max+1 */
  uint64_t *perm;      /* seeded order of the rows of epoch perm_epoch */
  uint64_t perm_epoch;
  bool perm_valid;
  int B_cap;     /* the B the buffers were allocated for */
  uint64_t base; /* the global row of the last restart */
  uint64_t pos;
  uint64_t *rows; /* this batch's B rows */
  int32_t *inputs, *targets;
};

static inline uint32_t tok_at(const gt_loader *l, uint64_t i) {
  const unsigned char *p = l->tok + i * l->h.width;
  switch (l->h.width) {
    case 1: return p[0];
    case 2: return (uint32_t)p[0] | (uint32_t)p[1] << 8;
    default: return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
  }
}

/* splitmix64: tiny, and gives the same numbers on every platform. */
static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void build_perm(gt_loader *l, uint64_t epoch) {
  uint64_t s = l->cfg.seed ^ (epoch * 0xD1B54A32D192ED03ull);
  for (uint64_t i = 0; i < l->nrows; i++) l->perm[i] = i;
  for (uint64_t i = l->nrows - 1; i > 0; i--) { /* Fisher-Yates */
    uint64_t j = splitmix64(&s) % (i + 1);
    uint64_t t = l->perm[i];
    l->perm[i] = l->perm[j];
    l->perm[j] = t;
  }
  l->perm_epoch = epoch;
  l->perm_valid = true;
}

/* The row that global row index j (counted across epochs) refers to. */
static uint64_t row_of(gt_loader *l, uint64_t j) {
  uint64_t epoch = j / l->nrows, idx = j % l->nrows;
  if (!l->cfg.seed) return idx;
  if (!l->perm_valid || l->perm_epoch != epoch) build_perm(l, epoch);
  return l->perm[idx];
}

static gt_status check_config(const gt_loader_config *c) {
  if (c && c->source) {
    if (!c->source->read || c->source->rows == 0 || c->source->vocab_size == 0)
      return gt_errorf(GT_EINVAL, "loader: a row source needs a read function, rows and a vocabulary");
    if (c->mode != GT_LOADER_FIXED)
      return gt_errorf(GT_EINVAL, "loader: a row source gives fixed-length rows: use GT_LOADER_FIXED");
  } else if (!c || !c->path || !*c->path) {
    return gt_errorf(GT_EINVAL, "loader: no data file path given");
  }
  if (c->B <= 0) return gt_errorf(GT_EINVAL, "loader: batch size B must be positive, got %d", c->B);
  if (c->T_max <= 0) return gt_errorf(GT_EINVAL, "loader: sequence length T_max must be positive, got %d", c->T_max);
  if ((uint64_t)c->B * (uint64_t)c->T_max > (1ull << 36))
    return gt_errorf(GT_EINVAL, "loader: B*T_max = %d*%d tokens per micro-batch is too large", c->B, c->T_max);
  if (c->nshards <= 0) return gt_errorf(GT_EINVAL, "loader: shard count must be positive, got %d", c->nshards);
  if (c->shard < 0 || c->shard >= c->nshards)
    return gt_errorf(GT_EINVAL, "loader: shard %d is out of range 0..%d", c->shard, c->nshards - 1);
  if (c->total && (c->offset < 0 || c->total < c->B || c->offset > c->total - c->B))
    return gt_errorf(GT_EINVAL, "loader: a share of %d rows at offset %d does not fit in a group micro-batch of %d",
                     c->B, c->offset, c->total);
  if (c->mode != GT_LOADER_FIXED && c->mode != GT_LOADER_DOCUMENTS)
    return gt_errorf(GT_EINVAL, "loader: unknown mode %d (use GT_LOADER_FIXED or GT_LOADER_DOCUMENTS)", (int)c->mode);
  return GT_OK;
}

static gt_status map_file(gt_loader *l) {
  const char *p = l->path;
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return gt_errorf(GT_ENOTFOUND, "data file %s not found (make one with giant-tokenize)", p);
    return gt_errorf(GT_EIO, "cannot open data file %s: %s", p, strerror(errno));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return gt_errorf(GT_EINVAL, "data file %s is not a regular file", p);
  }
  unsigned char head[GT_TOKFILE_HEADER_BYTES];
  ssize_t got = pread(fd, head, sizeof head, 0);
  if (got < 0 || (got < (ssize_t)sizeof head && st.st_size >= (off_t)sizeof head)) {
    close(fd);
    return gt_errorf(GT_EIO, "reading data file %s: %s", p, got < 0 ? strerror(errno) : "it shrank while being opened");
  }
  gt_status s = gt_tokfile_parse_header(head, (uint64_t)st.st_size, p, &l->h);
  if (s != GT_OK) {
    close(fd);
    return s;
  }
  l->map_len = (size_t)st.st_size;
  void *m = mmap(NULL, l->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
  l->fd = fd;
  if (m == MAP_FAILED) return gt_errorf(GT_EIO, "cannot map data file %s: %s", p, strerror(errno));
  l->map = m;
  l->tok = l->map + GT_TOKFILE_HEADER_BYTES;
  return GT_OK;
}

static gt_status check_tokens(const gt_loader *l, uint32_t vocab_limit) {
  const gt_tokfile_header *h = &l->h;
  if (h->count < 2)
    return gt_errorf(GT_EFORMAT, "%s: holds %llu token(s); training needs at least 2", l->path,
                     (unsigned long long)h->count);
  for (uint64_t i = 0; i < h->count; i++) {
    uint32_t v = tok_at(l, i);
    unsigned long long off = GT_TOKFILE_HEADER_BYTES + i * h->width;
    if (v >= h->vocab_size)
      return gt_errorf(GT_EFORMAT,
                       "%s: token id %u at position %llu is >= the file's vocabulary %u "
                       "(byte offset %llu); the file is corrupt, re-tokenize it",
                       l->path, v, (unsigned long long)i, h->vocab_size, off);
    /* Batches hold int32_t ids: a width-4 file may declare more. */
    if (v > INT32_MAX)
      return gt_errorf(GT_ERANGE,
                       "%s: token id %u at position %llu is over %d, the largest id a batch holds "
                       "(byte offset %llu); re-tokenize with a vocabulary of at most 2^31",
                       l->path, v, (unsigned long long)i, INT32_MAX, off);
    if (vocab_limit && v >= vocab_limit)
      return gt_errorf(GT_ERANGE,
                       "%s: token id %u at position %llu is >= the model's vocabulary %u "
                       "(byte offset %llu); use a model with a vocabulary of at least %u",
                       l->path, v, (unsigned long long)i, vocab_limit, off, h->vocab_size);
  }
  return GT_OK;
}

static gt_status find_documents(gt_loader *l) {
  const gt_tokfile_header *h = &l->h;
  if (h->doc_sep == GT_TOKFILE_NO_SEP)
    return gt_errorf(GT_EINVAL,
                     "%s: DOCUMENTS mode needs a file with a document separator, and this one "
                     "has none (header offset 28); use FIXED mode or re-tokenize with --doc-sep",
                     l->path);
  /* Two passes: count, then fill, so the index is allocated once. */
  uint64_t row_max = (uint64_t)l->cfg.T_max + 1, n = 0;
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) {
      l->doc_start = malloc((n ? n : 1) * sizeof *l->doc_start);
      l->doc_len = malloc((n ? n : 1) * sizeof *l->doc_len);
      if (!l->doc_start || !l->doc_len)
        return gt_errorf(GT_ENOMEM, "%s: out of memory indexing %llu documents", l->path, (unsigned long long)n);
      n = 0;
    }
    for (uint64_t a = 0; a < h->count;) {
      uint64_t b = a;
      while (b < h->count && tok_at(l, b) != h->doc_sep) b++;
      if (b - a >= 2) {
        if (pass == 1) {
          uint64_t row = b - a + (b < h->count); /* the separator is the last target */
          l->doc_start[n] = a;
          l->doc_len[n] = (uint32_t)(row < row_max ? row : row_max);
        }
        n++;
      }
      a = b + 1;
    }
  }
  if (n == 0)
    return gt_errorf(GT_EINVAL,
                     "%s: DOCUMENTS mode found no document of at least 2 tokens between "
                     "separators (id %u); use FIXED mode",
                     l->path, h->doc_sep);
  l->nrows = n;
  return GT_OK;
}

static gt_status open_rows(gt_loader *l, uint32_t vocab_limit) {
  l->vocab_limit = vocab_limit;
  if (l->cfg.source) {
    /* The rows as a file of FIXED rows would hold them: rows * T_max + 1 ids. */
    const gt_loader_source *src = l->cfg.source;
    l->nrows = src->rows;
    l->h = (gt_tokfile_header){.version = 1,
                               .width = 4,
                               .count = src->rows * (uint64_t)l->cfg.T_max + 1,
                               .vocab_size = src->vocab_size,
                               .doc_sep = GT_TOKFILE_NO_SEP};
  } else {
    GT_TRY(map_file(l));
    GT_TRY(check_tokens(l, vocab_limit));
    if (l->cfg.mode == GT_LOADER_DOCUMENTS)
      GT_TRY(find_documents(l));
    else
      l->nrows = (l->h.count - 1) / (uint64_t)l->cfg.T_max;
    if (l->nrows == 0)
      return gt_errorf(GT_EINVAL, "%s: holds %llu tokens, fewer than T_max+1 = %llu for one row", l->path,
                       (unsigned long long)l->h.count, (unsigned long long)l->cfg.T_max + 1);
  }
  size_t bt = (size_t)l->cfg.B * (size_t)l->cfg.T_max;
  l->raw = malloc(((size_t)l->cfg.T_max + 1) * (l->h.width ? l->h.width : 4));
  l->row = malloc(((size_t)l->cfg.T_max + 1) * sizeof *l->row);
  l->inputs = malloc(bt * sizeof *l->inputs);
  l->targets = malloc(bt * sizeof *l->targets);
  l->rows = malloc((size_t)l->cfg.B * sizeof *l->rows);
  if (l->cfg.seed) l->perm = malloc(l->nrows * sizeof *l->perm);
  if (!l->inputs || !l->targets || !l->rows || !l->raw || !l->row || (l->cfg.seed && !l->perm))
    return gt_errorf(GT_ENOMEM, "out of memory for the batch buffers of %s", l->path);
  if (l->map) munmap(l->map, l->map_len);
  l->map = NULL;
  l->tok = NULL;
  return GT_OK;
}

gt_status gt_loader_open(const gt_loader_config *cfg, uint32_t vocab_limit, gt_loader **out) {
  *out = NULL;
  GT_TRY(check_config(cfg));
  gt_loader *l = calloc(1, sizeof *l);
  const char *name = cfg->source ? (cfg->source->name ? cfg->source->name : "the program's rows") : cfg->path;
  if (!l || !(l->path = strdup(name))) {
    free(l);
    return gt_errorf(GT_ENOMEM, "out of memory opening %s", name);
  }
  l->cfg = *cfg;
  l->cfg.path = l->path;
  if (!l->cfg.total) {
    l->cfg.offset = cfg->shard * cfg->B;
    l->cfg.total = cfg->nshards * cfg->B;
  }
  l->B_cap = cfg->B;
  l->fd = -1;
  gt_status s = open_rows(l, vocab_limit);
  if (s != GT_OK) {
    gt_loader_close(l);
    return s;
  }
  *out = l;
  return GT_OK;
}

void gt_loader_close(gt_loader *l) {
  if (!l) return;
  if (l->map) munmap(l->map, l->map_len);
  if (l->fd >= 0) close(l->fd);
  free(l->raw);
  free(l->row);
  free(l->doc_start);
  free(l->doc_len);
  free(l->perm);
  free(l->inputs);
  free(l->rows);
  free(l->targets);
  free(l->path);
  free(l);
}

bool gt_loader_file_failed(const gt_loader *l) { return l && l->file_failed; }

const gt_tokfile_header *gt_loader_header(const gt_loader *l) { return &l->h; }
uint64_t gt_loader_position(const gt_loader *l) { return l->pos; }
uint64_t gt_loader_rows_per_epoch(const gt_loader *l) { return l->nrows; }
const gt_loader_config *gt_loader_get_config(const gt_loader *l) { return &l->cfg; }
uint64_t gt_loader_next_row(const gt_loader *l) { return l->base + l->pos * (uint64_t)l->cfg.total; }

gt_status gt_loader_reshare(gt_loader *l, int B, int offset, int total) {
  if (B < 1 || B > l->B_cap)
    return gt_errorf(GT_EINVAL, "loader: a share of %d rows is outside 1..%d, the B the loader was opened with", B,
                     l->B_cap);
  if (offset < 0 || total < B || offset > total - B)
    return gt_errorf(GT_EINVAL, "loader: a share of %d rows at offset %d does not fit in a group micro-batch of %d", B,
                     offset, total);
  uint64_t row = gt_loader_next_row(l);
  l->cfg.B = B;
  l->cfg.offset = offset;
  l->cfg.total = total;
  return gt_loader_restart_at(l, row);
}

gt_status gt_loader_restart_at(gt_loader *l, uint64_t row) {
  if (row > UINT64_MAX / 2)
    return gt_errorf(GT_ERANGE, "loader: restart row %llu is too large", (unsigned long long)row);
  l->base = row;
  return gt_loader_seek(l, 0);
}

gt_status gt_loader_seek(gt_loader *l, uint64_t index) {
  uint64_t per = (uint64_t)l->cfg.total;
  if (index > (UINT64_MAX / 2 - per) / per) /* base is at most half */
    return gt_errorf(GT_ERANGE, "loader: micro-batch index %llu is too large", (unsigned long long)index);
  l->pos = index;
  return GT_OK;
}

/* Tokens first..first+n-1 into l->row, by pread. */
static gt_status read_row(gt_loader *l, uint64_t first, int n) {
  size_t w = l->h.width, need = (size_t)n * w, got = 0;
  off_t off = (off_t)(GT_TOKFILE_HEADER_BYTES + first * w);
  while (got < need) {
    ssize_t r = pread(l->fd, l->raw + got, need - got, off + (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      l->file_failed = true;
      return gt_errorf(GT_EIO, "reading data file %s at byte offset %llu: %s", l->path, (unsigned long long)off + got,
                       strerror(errno));
    }
    if (r == 0) {
      l->file_failed = true;
      return gt_errorf(GT_EIO,
                       "data file %s ends at byte offset %llu, but its header promised %llu tokens "
                       "(%llu bytes): it was truncated or replaced while in use; restore it and "
                       "resume from a checkpoint",
                       l->path, (unsigned long long)off + got, (unsigned long long)l->h.count,
                       (unsigned long long)l->map_len);
    }
    got += (size_t)r;
  }
  for (int t = 0; t < n; t++) {
    const unsigned char *p = l->raw + (size_t)t * w;
    l->row[t] =
        (int32_t)(w == 1   ? p[0]
                  : w == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8
                           : (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
  }
  return GT_OK;
}

/* Row r of a FIXED batch: T_max inputs from window w, targets one later. */
/* Row w from the program's source, its ids checked. */
static gt_status read_source_row(gt_loader *l, uint64_t w, int n) {
  const gt_loader_source *src = l->cfg.source;
  gt_status s = src->read(src->user, w, l->row, n);
  if (s != GT_OK) return gt_error_context(s, "%s: row %llu", l->path, (unsigned long long)w);
  for (int t = 0; t < n; t++)
    if (l->row[t] < 0 || (uint32_t)l->row[t] >= src->vocab_size ||
        (l->vocab_limit && (uint32_t)l->row[t] >= l->vocab_limit)) {
      l->file_failed = true; /* the input's fault: it would give the same row again */
      return gt_errorf(GT_ERANGE, "%s: row %llu, token %d: id %d is outside the vocabulary [0, %u)", l->path,
                       (unsigned long long)w, t, l->row[t],
                       l->vocab_limit && l->vocab_limit < src->vocab_size ? l->vocab_limit : src->vocab_size);
    }
  return GT_OK;
}

static gt_status fill_fixed(gt_loader *l, int r, uint64_t w) {
  int T = l->cfg.T_max;
  if (l->cfg.source)
    GT_TRY(read_source_row(l, w, T + 1));
  else
    GT_TRY(read_row(l, w * (uint64_t)T, T + 1));
  int32_t *in = l->inputs + (size_t)r * T, *tg = l->targets + (size_t)r * T;
  memcpy(in, l->row, (size_t)T * sizeof *in);
  memcpy(tg, l->row + 1, (size_t)T * sizeof *tg);
  return GT_OK;
}

static gt_status fill_document(gt_loader *l, int r, int T, uint64_t d) {
  int n = (int)l->doc_len[d] - 1; /* targets in this row */
  GT_TRY(read_row(l, l->doc_start[d], n + 1));
  int32_t *in = l->inputs + (size_t)r * T, *tg = l->targets + (size_t)r * T;
  memcpy(in, l->row, (size_t)n * sizeof *in);
  memcpy(tg, l->row + 1, (size_t)n * sizeof *tg);
  for (int t = n; t < T; t++) {
    in[t] = 0;
    tg[t] = -1;
  }
  return GT_OK;
}

gt_status gt_loader_next(gt_loader *l, gt_batch *b) {
  if (gt_loader_seek(l, l->pos) != GT_OK) return GT_ERANGE;
  int B = l->cfg.B;
  uint64_t j0 = l->base + l->pos * (uint64_t)l->cfg.total + (uint64_t)l->cfg.offset;
  int T = l->cfg.T_max;
  int64_t ntargets = 0;
  for (int r = 0; r < B; r++) l->rows[r] = row_of(l, j0 + r);
  if (l->cfg.mode == GT_LOADER_FIXED) {
    for (int r = 0; r < B; r++) GT_TRY(fill_fixed(l, r, l->rows[r]));
    ntargets = (int64_t)B * T;
  } else {
    /* Rows are laid out at this batch's T, so find it first. */
    T = 1;
    for (int r = 0; r < B; r++) {
      int n = (int)l->doc_len[l->rows[r]] - 1;
      if (n > T) T = n;
      ntargets += n;
    }
    for (int r = 0; r < B; r++) GT_TRY(fill_document(l, r, T, l->rows[r]));
  }
  b->B = B;
  b->T = T;
  b->inputs = l->inputs;
  b->targets = l->targets;
  b->ntargets = ntargets;
  b->epoch = j0 / l->nrows;
  b->row = j0;
  l->pos++;
  return GT_OK;
}
