/* Token files, the byte tokenizer, the loader and giant-tokenize, checked
 * against naive slices of known token arrays. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "giant/data.h"
#include "core/data/loader_engine.h"
#include "core/data/text.h"

static char dir[64];

static char *path_in(const char *name) {
  static char p[4][256];
  static int k;
  k = (k + 1) % 4;
  snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
  return p[k];
}

static void write_bytes(const char *path, const void *b, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(b, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

static void put_le(unsigned char *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* A raw token file, for crafting broken ones. */
static size_t raw_file(unsigned char *buf, uint32_t version, uint32_t width, uint64_t count, uint32_t vocab,
                       uint32_t sep, const uint32_t *tok, uint64_t ntok) {
  memset(buf, 0, GT_TOKFILE_HEADER_BYTES);
  memcpy(buf, "GIANTTOK", 8);
  put_le(buf + 8, version, 4);
  put_le(buf + 12, width, 4);
  put_le(buf + 16, count, 8);
  put_le(buf + 24, vocab, 4);
  put_le(buf + 28, sep, 4);
  for (uint64_t i = 0; i < ntok; i++) put_le(buf + 64 + i * width, tok[i], (int)width);
  return 64 + ntok * width;
}

static gt_loader_config cfg_of(const char *path, int B, int T, gt_loader_mode mode, uint64_t seed) {
  gt_loader_config c = {.path = path, .B = B, .T_max = T, .mode = mode, .shard = 0, .nshards = 1, .seed = seed};
  return c;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(p);
}

static int setup(void **state) {
  (void)state;
  strcpy(dir, "/tmp/gt_test_data_XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  return nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- token files ---- */

static void test_roundtrip_widths(void **state) {
  (void)state;
  const uint32_t vocabs[] = {200, 256, 257, 65536, 70000};
  const uint32_t widths[] = {1, 1, 2, 2, 4};
  enum { N = 1000 };
  uint32_t tok[N];
  for (int v = 0; v < 5; v++) {
    uint64_t s = 12345 + v;
    for (int i = 0; i < N; i++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      tok[i] = (uint32_t)((s >> 33) % vocabs[v]);
    }
    tok[7] = vocabs[v] - 1; /* the largest id must survive the width */
    const char *p = path_in("rt.tok");
    assert_int_equal(gt_tokfile_write(p, tok, N, vocabs[v], 0), GT_OK);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_size, 64 + N * widths[v]);
    assert_int_not_equal(access(path_in("rt.tok.tmp"), F_OK), 0);
    gt_loader_config c = cfg_of(p, 1, N - 1, GT_LOADER_FIXED, 0);
    gt_loader *l;
    assert_int_equal(gt_loader_open(&c, 0, &l), GT_OK);
    const gt_tokfile_header *h = gt_loader_header(l);
    assert_int_equal(h->version, 1);
    assert_int_equal(h->width, widths[v]);
    assert_int_equal(h->count, N);
    assert_int_equal(h->vocab_size, vocabs[v]);
    assert_int_equal(h->doc_sep, 0);
    gt_batch b;
    assert_int_equal(gt_loader_next(l, &b), GT_OK);
    assert_int_equal(b.B, 1);
    assert_int_equal(b.T, N - 1);
    for (int i = 0; i < N - 1; i++) {
      assert_int_equal(b.inputs[i], tok[i]);
      assert_int_equal(b.targets[i], tok[i + 1]);
    }
    gt_loader_close(l);
  }
  /* A bad id is refused before anything reaches the path. */
  for (int i = 0; i < 10; i++) tok[i] = (uint32_t)i;
  tok[3] = 300;
  const char *p = path_in("bad.tok");
  assert_int_equal(gt_tokfile_write(p, tok, 10, 257, GT_TOKFILE_NO_SEP), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "token id 300 at position 3"));
  assert_int_not_equal(access(p, F_OK), 0);
  assert_int_not_equal(access(path_in("bad.tok.tmp"), F_OK), 0);
  assert_int_equal(gt_tokfile_write(p, tok, 2, 257, 257), GT_EINVAL);
  assert_int_equal(gt_tokfile_write(path_in("nodir/x.tok"), tok, 2, 257, 0), GT_EIO);
}

/* ---- FIXED mode ---- */

enum { NT = 103, TM = 8, NWIN = (NT - 1) / TM };
static uint32_t seq[NT];

static const char *seq_file(void) {
  for (int i = 0; i < NT; i++) seq[i] = 1000 + i; /* a window is known by its first token */
  const char *p = path_in("seq.tok");
  assert_int_equal(gt_tokfile_write(p, seq, NT, 2000, GT_TOKFILE_NO_SEP), GT_OK);
  return p;
}

static void check_window(const gt_batch *b, int r, int w) {
  for (int t = 0; t < TM; t++) {
    assert_int_equal(b->inputs[r * TM + t], seq[w * TM + t]);
    assert_int_equal(b->targets[r * TM + t], seq[w * TM + t + 1]);
  }
}

static void test_fixed_exact_and_wrap(void **state) {
  (void)state;
  gt_loader_config c = cfg_of(seq_file(), 5, TM, GT_LOADER_FIXED, 0);
  gt_loader *l;
  assert_int_equal(gt_loader_open(&c, 2000, &l), GT_OK);
  assert_int_equal(gt_loader_rows_per_epoch(l), NWIN);
  gt_batch b;
  int32_t *in0 = NULL;
  for (int g = 0; g < 11; g++) { /* 55 rows: past four wraps of 12 windows */
    assert_int_equal(gt_loader_position(l), g);
    assert_int_equal(gt_loader_next(l, &b), GT_OK);
    if (g == 0) in0 = b.inputs;
    assert_ptr_equal(b.inputs, in0);
    assert_int_equal(b.B, 5);
    assert_int_equal(b.T, TM);
    assert_int_equal(b.ntargets, 5 * TM);
    assert_int_equal(b.epoch, (uint64_t)(g * 5) / NWIN);
    for (int r = 0; r < 5; r++) check_window(&b, r, (g * 5 + r) % NWIN);
  }
  gt_loader_close(l);
}

static void test_fixed_seeded(void **state) {
  (void)state;
  const char *p = seq_file();
  enum { ROWS = NWIN * 5, B = 5 }; /* five epochs */
  int order[2][ROWS];
  const uint64_t seeds[2] = {42, 43};
  for (int s = 0; s < 2; s++) {
    gt_loader_config c = cfg_of(p, B, TM, GT_LOADER_FIXED, seeds[s]);
    gt_loader *l;
    assert_int_equal(gt_loader_open(&c, 0, &l), GT_OK);
    gt_batch b;
    for (int g = 0; g < ROWS / B; g++) {
      assert_int_equal(gt_loader_next(l, &b), GT_OK);
      for (int r = 0; r < B; r++) {
        int w = (b.inputs[r * TM] - 1000) / TM;
        assert_true(w >= 0 && w < NWIN);
        check_window(&b, r, w);
        order[s][g * B + r] = w;
      }
    }
    gt_loader_close(l);
    for (int e = 0; e < ROWS / NWIN; e++) { /* each epoch is a permutation */
      int seen[NWIN] = {0};
      for (int i = 0; i < NWIN; i++) seen[order[s][e * NWIN + i]]++;
      for (int i = 0; i < NWIN; i++) assert_int_equal(seen[i], 1);
    }
    assert_memory_not_equal(order[s], order[s] + NWIN, NWIN * sizeof(int)); /* per epoch */
    int identity = 1;
    for (int i = 0; i < NWIN; i++) identity &= order[s][i] == i;
    assert_false(identity);
  }
  assert_memory_not_equal(order[0], order[1], sizeof order[0]);
  /* Same seed, same order: a fresh loader seeking into epoch 3 agrees. */
  gt_loader_config c = cfg_of(p, B, TM, GT_LOADER_FIXED, 42);
  gt_loader *l;
  assert_int_equal(gt_loader_open(&c, 0, &l), GT_OK);
  assert_int_equal(gt_loader_seek(l, 8), GT_OK);
  gt_batch b;
  assert_int_equal(gt_loader_next(l, &b), GT_OK);
  for (int r = 0; r < B; r++) assert_int_equal((b.inputs[r * TM] - 1000) / TM, order[0][40 + r]);
  assert_int_equal(gt_loader_position(l), 9);
  gt_loader_close(l);
}

/* ---- DOCUMENTS mode ---- */

enum { SEP = 299 };
/* Documents of 5, 1, 3, 12, 0, 2 and 7 tokens; the last ends at end of file. */
static const int doc_lens[] = {5, 1, 3, 12, 0, 2, 7};
enum { NDOC = 7 };
static uint32_t dtok[64];
static int dstart[NDOC], dn;

static const char *doc_file(void) {
  dn = 0;
  for (int d = 0; d < NDOC; d++) {
    dstart[d] = dn;
    for (int i = 0; i < doc_lens[d]; i++) dtok[dn++] = (uint32_t)(10 * d + i + 1);
    if (d < NDOC - 1) dtok[dn++] = SEP;
  }
  const char *p = path_in("docs.tok");
  assert_int_equal(gt_tokfile_write(p, dtok, (uint64_t)dn, 300, SEP), GT_OK);
  return p;
}

/* The naive row of document d: its tokens, then the separator if one
 * follows, cut to T_max+1. */
static int naive_row(int d, int T_max, uint32_t *row) {
  int n = 0;
  for (int i = 0; i < doc_lens[d]; i++) row[n++] = dtok[dstart[d] + i];
  if (d < NDOC - 1) row[n++] = SEP;
  return n < T_max + 1 ? n : T_max + 1;
}

static void test_documents(void **state) {
  (void)state;
  const char *p = doc_file();
  const int kept[] = {0, 2, 3, 5, 6}; /* documents of at least 2 tokens */
  const int T_max = 6;
  for (int B = 1; B <= 3; B++) {
    gt_loader_config c = cfg_of(p, B, T_max, GT_LOADER_DOCUMENTS, 0);
    gt_loader *l;
    assert_int_equal(gt_loader_open(&c, 300, &l), GT_OK);
    assert_int_equal(gt_loader_rows_per_epoch(l), 5);
    gt_batch b;
    int32_t *in0 = NULL, *tg0 = NULL;
    for (int g = 0; g < 8; g++) {
      assert_int_equal(gt_loader_next(l, &b), GT_OK);
      if (!in0) {
        in0 = b.inputs;
        tg0 = b.targets;
      }
      assert_ptr_equal(b.inputs, in0);
      assert_ptr_equal(b.targets, tg0);
      uint32_t row[B][16];
      int len[B], T = 0, nt = 0;
      for (int r = 0; r < B; r++) {
        len[r] = naive_row(kept[(g * B + r) % 5], T_max, row[r]) - 1;
        if (len[r] > T) T = len[r];
        nt += len[r];
      }
      assert_int_equal(b.B, B);
      assert_int_equal(b.T, T);
      assert_true(b.T <= T_max);
      assert_int_equal(b.ntargets, nt);
      assert_int_equal(b.epoch, (uint64_t)(g * B) / 5);
      for (int r = 0; r < B; r++)
        for (int t = 0; t < T; t++) {
          assert_int_equal(b.inputs[r * T + t], t < len[r] ? (int32_t)row[r][t] : 0);
          assert_int_equal(b.targets[r * T + t], t < len[r] ? (int32_t)row[r][t + 1] : -1);
        }
    }
    gt_loader_close(l);
  }
  /* B = 1 spelled out: T per batch, and the separator as the last target. */
  const int expect_T[] = {5, 3, 6, 2, 6, 5};
  gt_loader_config c = cfg_of(p, 1, T_max, GT_LOADER_DOCUMENTS, 0);
  gt_loader *l;
  assert_int_equal(gt_loader_open(&c, 0, &l), GT_OK);
  gt_batch b;
  for (int g = 0; g < 6; g++) {
    assert_int_equal(gt_loader_next(l, &b), GT_OK);
    assert_int_equal(b.T, expect_T[g]);
    if (g == 1) {
      const int32_t in[] = {21, 22, 23}, tg[] = {22, 23, SEP};
      assert_memory_equal(b.inputs, in, sizeof in);
      assert_memory_equal(b.targets, tg, sizeof tg);
    }
  }
  gt_loader_close(l);
  /* A seeded order visits every document once per epoch. */
  c = cfg_of(p, 5, T_max, GT_LOADER_DOCUMENTS, 9);
  assert_int_equal(gt_loader_open(&c, 0, &l), GT_OK);
  for (int e = 0; e < 3; e++) {
    assert_int_equal(gt_loader_next(l, &b), GT_OK);
    int seen[NDOC] = {0};
    for (int r = 0; r < 5; r++) seen[b.inputs[r * b.T] / 10]++;
    for (int k = 0; k < 5; k++) assert_int_equal(seen[kept[k]], 1);
  }
  gt_loader_close(l);
}

/* ---- sharding and resume ---- */

static void same_batch(const gt_batch *a, const gt_batch *b) {
  assert_int_equal(a->B, b->B);
  assert_int_equal(a->T, b->T);
  assert_int_equal(a->ntargets, b->ntargets);
  assert_int_equal(a->epoch, b->epoch);
  assert_memory_equal(a->inputs, b->inputs, (size_t)a->B * a->T * sizeof(int32_t));
  assert_memory_equal(a->targets, b->targets, (size_t)a->B * a->T * sizeof(int32_t));
}

static void test_sharding(void **state) {
  (void)state;
  const char *files[2] = {seq_file(), doc_file()};
  enum { K = 6, BMAX = 3 * K };
  for (int m = 0; m < 2; m++)
    for (uint64_t seed = 0; seed < 2; seed++)
      for (int n = 1; n <= 3; n++) {
        gt_loader_config c = cfg_of(files[m], 3, m ? 6 : TM, (gt_loader_mode)m, seed * 77);
        gt_loader *ref, *sh[3];
        assert_int_equal(gt_loader_open(&c, 0, &ref), GT_OK);
        for (int s = 0; s < n; s++) {
          c.shard = s;
          c.nshards = n;
          assert_int_equal(gt_loader_open(&c, 0, &sh[s]), GT_OK);
        }
        /* n shards' k-th batches are the unsharded reader's n steps. */
        for (int k = 0; k < K; k++)
          for (int s = 0; s < n; s++) {
            gt_batch a, b;
            assert_int_equal(gt_loader_next(ref, &a), GT_OK);
            assert_int_equal(gt_loader_next(sh[s], &b), GT_OK);
            same_batch(&a, &b);
          }
        gt_loader_close(ref);
        for (int s = 0; s < n; s++) gt_loader_close(sh[s]);
      }
}

/* Replicas of uneven shares (3:1, then 1:3 after a reshare at the same
 * step) take every row once, in the order one reader of B=1 takes them, and
 * the cursor counts whole group micro-batches. */
static void test_uneven_shares(void **state) {
  (void)state;
  enum { K = 5, TOTAL = 4 };
  int share[2][2] = {{3, 1}, {1, 3}};
  gt_loader_config c = cfg_of(seq_file(), 1, TM, GT_LOADER_FIXED, 31);
  gt_loader *ref, *rep[2];
  assert_int_equal(gt_loader_open(&c, 0, &ref), GT_OK);
  /* Replica 0 opens at its share; replica 1 opens with even shares and the
   * same capacity, then takes its share before its first batch. */
  c = cfg_of(seq_file(), 3, TM, GT_LOADER_FIXED, 31);
  c.nshards = 2;
  c.offset = 0;
  c.total = TOTAL;
  assert_int_equal(gt_loader_open(&c, 0, &rep[0]), GT_OK);
  c.shard = 1;
  c.total = 0;
  assert_int_equal(gt_loader_open(&c, 0, &rep[1]), GT_OK);
  assert_int_equal(gt_loader_reshare(rep[1], 1, 3, TOTAL), GT_OK);
  uint64_t want = 0;
  for (int k = 0; k < 2 * K; k++) {
    int phase = k >= K;
    if (k == K)
      for (int s = 0; s < 2; s++) {
        assert_int_equal(gt_loader_next_row(rep[s]), (uint64_t)K * TOTAL);
        assert_int_equal(gt_loader_reshare(rep[s], share[1][s], s ? share[1][0] : 0, TOTAL), GT_OK);
      }
    for (int s = 0; s < 2; s++) {
      gt_batch b, a;
      assert_int_equal(gt_loader_next(rep[s], &b), GT_OK);
      assert_int_equal(b.B, share[phase][s]);
      assert_int_equal(b.row, want);
      for (int r = 0; r < b.B; r++, want++) {
        assert_int_equal(gt_loader_next(ref, &a), GT_OK);
        assert_memory_equal(a.inputs, b.inputs + (size_t)r * TM, TM * sizeof(int32_t));
        assert_memory_equal(a.targets, b.targets + (size_t)r * TM, TM * sizeof(int32_t));
      }
    }
  }
  assert_int_equal(gt_loader_next_row(rep[0]), 2 * K * TOTAL);
  /* A share larger than the buffers, or one that does not fit, is refused. */
  assert_int_equal(gt_loader_reshare(rep[0], 4, 0, 8), GT_EINVAL);
  assert_int_equal(gt_loader_reshare(rep[0], 2, 3, 4), GT_EINVAL);
  assert_int_equal(gt_loader_reshare(rep[0], 0, 0, 4), GT_EINVAL);
  c.B = 2;
  c.offset = 3;
  c.total = 4;
  gt_loader *bad = NULL;
  assert_int_equal(gt_loader_open(&c, 0, &bad), GT_EINVAL);
  assert_null(bad);
  for (int s = 0; s < 2; s++) gt_loader_close(rep[s]);
  gt_loader_close(ref);
}

static void test_seek_resume(void **state) {
  (void)state;
  gt_loader_config c = cfg_of(doc_file(), 2, 6, GT_LOADER_DOCUMENTS, 5);
  c.shard = 1;
  c.nshards = 2;
  gt_loader *a, *b;
  assert_int_equal(gt_loader_open(&c, 0, &a), GT_OK);
  assert_int_equal(gt_loader_open(&c, 0, &b), GT_OK);
  gt_batch x, y;
  for (int i = 0; i < 7; i++) assert_int_equal(gt_loader_next(a, &x), GT_OK);
  assert_int_equal(gt_loader_position(a), 7);
  assert_int_equal(gt_loader_seek(b, 6), GT_OK);
  assert_int_equal(gt_loader_position(b), 6);
  assert_int_equal(gt_loader_next(b, &y), GT_OK);
  same_batch(&x, &y);
  assert_int_equal(gt_loader_seek(b, UINT64_MAX / 2), GT_ERANGE);
  gt_loader_close(a);
  gt_loader_close(b);
}

/* ---- the byte tokenizer ---- */

static int read_tokens(const char *p, gt_tokfile_header *h, uint32_t *tok, int cap) {
  unsigned char buf[4096];
  FILE *f = fopen(p, "rb");
  assert_non_null(f);
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  assert_int_equal(gt_tokfile_parse_header(buf, n, p, h), GT_OK);
  assert_true(h->count <= (uint64_t)cap);
  for (uint64_t i = 0; i < h->count; i++) {
    const unsigned char *q = buf + 64 + i * h->width;
    tok[i] = h->width == 1 ? q[0] : (uint32_t)q[0] | (uint32_t)q[1] << 8;
  }
  return (int)h->count;
}

static void expect_tokens(const char *p, const uint32_t *want, int n) {
  gt_tokfile_header h;
  uint32_t got[512];
  int k = read_tokens(p, &h, got, 512);
  assert_int_equal(h.vocab_size, GT_BYTE_VOCAB);
  assert_int_equal(h.doc_sep, GT_BYTE_DOC_SEP);
  assert_int_equal(h.width, 2);
  assert_int_equal(k, n);
  for (int i = 0; i < n; i++) assert_int_equal(got[i], want[i]);
}

enum { S_ = GT_BYTE_DOC_SEP };

static void test_tokenizer(void **state) {
  (void)state;
  const char *txt = path_in("t.txt"), *out = path_in("t.tok");
  const char *text = "ab\ncd\n%\nxy\n%\n%\n\nz %\n%%\nlast";
  write_bytes(txt, text, strlen(text));
  uint64_t n = 0;
  assert_int_equal(gt_tokenize_bytes(txt, "%", out, &n), GT_OK);
  const uint32_t want[] = {'a', 'b', '\n', 'c', 'd', S_,   'x', 'y', S_,  '\n', 'z',
                           ' ', '%', '\n', '%', '%', '\n', 'l', 'a', 's', 't',  S_};
  assert_int_equal(n, sizeof want / sizeof *want);
  expect_tokens(out, want, (int)n);

  const char *t2 = "q\n---\n\xff\x00r\n---";
  write_bytes(txt, t2, 13);
  assert_int_equal(gt_tokenize_bytes(txt, "---", out, &n), GT_OK);
  const uint32_t want2[] = {'q', S_, 0xff, 0, 'r', S_};
  expect_tokens(out, want2, 6);

  write_bytes(txt, "x\n\ny\n", 5); /* the end of file ends a document like a separator */
  assert_int_equal(gt_tokenize_bytes(txt, "%", out, &n), GT_OK);
  const uint32_t want4[] = {'x', '\n', '\n', 'y', S_};
  expect_tokens(out, want4, 5);
  write_bytes(txt, "x\n%", 3);
  assert_int_equal(gt_tokenize_bytes(txt, "%", out, &n), GT_OK);
  const uint32_t want6[] = {'x', S_};
  expect_tokens(out, want6, 2);
  write_bytes(txt, "x\n%%", 4);
  assert_int_equal(gt_tokenize_bytes(txt, "%%%", out, &n), GT_OK);
  const uint32_t want5[] = {'x', '\n', '%', '%', S_};
  expect_tokens(out, want5, 5);

  write_bytes(txt, "a\n%\nb\n", 6); /* no separator lines: one document */
  assert_int_equal(gt_tokenize_bytes(txt, NULL, out, &n), GT_OK);
  const uint32_t want3[] = {'a', '\n', '%', '\n', 'b', S_};
  expect_tokens(out, want3, 6);

  /* Round trip through the detokenizer. */
  const char *fort = "A fortune.\n%\nAnother\none.\n%\n";
  write_bytes(txt, fort, strlen(fort));
  assert_int_equal(gt_tokenize_bytes(txt, "%", out, &n), GT_OK);
  gt_tokfile_header h;
  uint32_t tk[64];
  int k = read_tokens(out, &h, tk, 64);
  int32_t ids[64];
  for (int i = 0; i < k; i++) ids[i] = (int32_t)tk[i];
  char back[128];
  assert_int_equal(gt_detokenize_bytes(ids, (size_t)k, back, sizeof back), strlen(fort));
  assert_string_equal(back, fort);
  assert_int_equal(gt_detokenize_bytes(ids, (size_t)k, back, 5), 4);
  assert_string_equal(back, "A fo");
  const int32_t odd[] = {'x', -1, 300, S_};
  assert_int_equal(gt_detokenize_bytes(odd, 4, back, sizeof back), 5);
  assert_string_equal(back, "x?\n%\n");

  write_bytes(txt, "", 0); /* empty: a valid file with no tokens */
  assert_int_equal(gt_tokenize_bytes(txt, "%", out, &n), GT_OK);
  assert_int_equal(n, 0);
  assert_int_equal(gt_tokenize_bytes(path_in("absent.txt"), "%", out, &n), GT_ENOTFOUND);
  assert_non_null(strstr(gt_last_error(), "absent.txt"));
  assert_int_equal(gt_tokenize_bytes(dir, "%", out, &n), GT_EINVAL);
  assert_int_equal(gt_tokenize_bytes(txt, "a\nb", out, &n), GT_EINVAL);
}

static void test_tokenize_paths(void **state) {
  (void)state;
  char d[256], f[256], out[256];
  snprintf(d, sizeof d, "%s", path_in("fortunes"));
  snprintf(f, sizeof f, "%s", path_in("extra"));
  snprintf(out, sizeof out, "%s", path_in("paths.tok"));
  assert_int_equal(mkdir(d, 0755), 0);
  write_bytes(path_in("fortunes/zeta"), "Z\n%\n", 4);
  write_bytes(path_in("fortunes/alpha"), "al\n%\nph\n%\n", 10);
  write_bytes(path_in("fortunes/alpha.dat"), "junk", 4);
  write_bytes(f, "e", 1);
  const char *inputs[2] = {f, d}; /* a file, then a directory */
  uint64_t n = 0;
  assert_int_equal(gt_tokenize_paths(inputs, 2, "%", out, &n), GT_OK);
  const uint32_t want[] = {'e', S_, 'a', 'l', S_, 'p', 'h', S_, 'Z', S_};
  assert_int_equal(n, 10);
  expect_tokens(out, want, 10);
  assert_int_not_equal(access(path_in("paths.tok.tmp"), F_OK), 0);

  assert_int_equal(mkdir(path_in("empty"), 0755), 0);
  const char *none[1] = {path_in("empty")};
  assert_int_equal(gt_tokenize_paths(none, 1, "%", out, &n), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "no input files"));
  expect_tokens(out, want, 10); /* a failed run leaves the old output whole */
  assert_int_not_equal(access(path_in("paths.tok.tmp"), F_OK), 0);
  const char *missing[2] = {f, path_in("missing")};
  assert_int_equal(gt_tokenize_paths(missing, 2, "%", out, &n), GT_ENOTFOUND);
  assert_non_null(strstr(gt_last_error(), "missing"));
  assert_int_equal(gt_tokenize_paths(inputs, 0, "%", out, &n), GT_EINVAL);
}

/* A token file made on first use, then reused; a missing corpus leaves
 * no directory behind. */
static void test_tokenize_if_missing(void **state) {
  (void)state;
  char corpus[256], out[256];
  snprintf(corpus, sizeof corpus, "%s", path_in("once.txt"));
  snprintf(out, sizeof out, "%s", path_in("made/once.tok"));
  write_bytes(corpus, "ab\n%\nc\n%\n", 9);
  bool made = false;
  uint64_t n = 0;
  assert_int_equal(gt_tokenize_if_missing(corpus, out, &made, &n), GT_OK);
  assert_true(made);
  const uint32_t want[] = {'a', 'b', S_, 'c', S_};
  assert_int_equal(n, 5);
  expect_tokens(out, want, 5);
  write_bytes(corpus, "zz\n", 3); /* an existing token file is kept as it is */
  assert_int_equal(gt_tokenize_if_missing(corpus, out, &made, &n), GT_OK);
  assert_false(made);
  expect_tokens(out, want, 5);
  char gone[256];
  snprintf(out, sizeof out, "%s", path_in("never/x.tok"));
  snprintf(gone, sizeof gone, "%s", path_in("no-such-corpus"));
  assert_int_equal(gt_tokenize_if_missing(gone, out, &made, &n), GT_ENOTFOUND);
  assert_non_null(strstr(gt_last_error(), "and so is the corpus"));
  assert_int_not_equal(access(path_in("never"), F_OK), 0);
}

/* ---- the text reader's records ---- */

/* Tokenizes the one file at `txt` holding `text` as `r` says and checks the
 * tokens against `want`. */
static void expect_records(const char *text, gt_text_records r, const uint32_t *want, int n) {
  const char *txt = path_in("rec.txt"), *out = path_in("rec.tok");
  write_bytes(txt, text, strlen(text));
  const char *inputs[1] = {txt};
  uint64_t got = 0;
  gt_text_options o = {.records = r};
  if (gt_tokenize_text(inputs, 1, &o, out, &got) != GT_OK)
    fail_msg("%s on \"%s\": %s", gt_text_records_name(r), text, gt_last_error());
  assert_int_equal(got, (uint64_t)n);
  if (n > 0) expect_tokens(out, want, n);
}

static void test_text_records(void **state) {
  (void)state;
  /* One text, every way of cutting it. */
  const char *text = "A\n%\nB\n\nC\nD\n";
  const uint32_t fortune[] = {'A', S_, 'B', '\n', '\n', 'C', '\n', 'D', S_};
  expect_records(text, GT_RECORDS_FORTUNE, fortune, 9);
  const uint32_t paragraph[] = {'A', '\n', '%', '\n', 'B', S_, 'C', '\n', 'D', S_};
  expect_records(text, GT_RECORDS_PARAGRAPH, paragraph, 10);
  const uint32_t file[] = {'A', '\n', '%', '\n', 'B', '\n', '\n', 'C', '\n', 'D', S_};
  expect_records(text, GT_RECORDS_FILE, file, 11);
  const uint32_t line[] = {'A', S_, '%', S_, 'B', S_, 'C', S_, 'D', S_};
  expect_records(text, GT_RECORDS_LINE, line, 10);

  /* Paragraphs: runs of empty lines, at the start, inside and at the end,
   * end one record each; a line of spaces or a lone \r is text. */
  const uint32_t para2[] = {'A', '\n', 'a', S_, 'B', S_};
  expect_records("\n\nA\na\n\n\n\nB\n\n", GT_RECORDS_PARAGRAPH, para2, 6);
  const uint32_t para3[] = {'A', '\n', ' ', '\n', 'B', '\r', '\n', '\r', '\n', 'C', S_};
  expect_records("A\n \nB\r\n\r\nC", GT_RECORDS_PARAGRAPH, para3, 11);
  /* Lines: empty ones give nothing, a last line without its newline is
   * one, \r is a byte of the line. */
  const uint32_t line2[] = {'x', 'y', S_, 'z', '\r', S_, 'w', S_};
  expect_records("\n\nxy\n\nz\r\nw", GT_RECORDS_LINE, line2, 8);
  /* An empty file gives no tokens in every mode; so do empty lines alone. */
  const uint32_t two_newlines[] = {'\n', '\n', S_}; /* the last newline is dropped */
  for (int r = GT_RECORDS_FILE; r <= GT_RECORDS_FORTUNE; r++) {
    if (r == GT_RECORDS_SEPARATOR) continue;
    expect_records("", (gt_text_records)r, NULL, 0);
    if (r == GT_RECORDS_FILE || r == GT_RECORDS_FORTUNE)
      expect_records("\n\n\n", (gt_text_records)r, two_newlines, 3);
    else
      expect_records("\n\n\n", (gt_text_records)r, NULL, 0);
  }
  /* A separator line of one's own. (path_in's buffers are reused: copies.) */
  char txt[256], out[256];
  snprintf(txt, sizeof txt, "%s", path_in("rec.txt"));
  snprintf(out, sizeof out, "%s", path_in("rec.tok"));
  write_bytes(txt, "q\n--\nr\n---\ns", 12);
  const char *inputs[1] = {txt};
  uint64_t n = 0;
  gt_text_options sep = {.records = GT_RECORDS_SEPARATOR, .separator = "--"};
  assert_int_equal(gt_tokenize_text(inputs, 1, &sep, out, &n), GT_OK);
  const uint32_t want_sep[] = {'q', S_, 'r', '\n', '-', '-', '-', '\n', 's', S_};
  expect_tokens(out, want_sep, 10);
  /* NULL options: each file one record. */
  assert_int_equal(gt_tokenize_text(inputs, 1, NULL, out, &n), GT_OK);
  assert_int_equal(n, 13);

  /* A directory: fortune leaves its index files out, the others read them;
   * subdirectories are never entered. */
  char d[256];
  snprintf(d, sizeof d, "%s", path_in("texts"));
  assert_int_equal(mkdir(d, 0755), 0);
  assert_int_equal(mkdir(path_in("texts/sub"), 0755), 0);
  write_bytes(path_in("texts/b"), "b1\n\nb2\n", 7);
  write_bytes(path_in("texts/a"), "a\n%\n", 4);
  write_bytes(path_in("texts/a.dat"), "\x01", 1);
  write_bytes(path_in("texts/sub/c"), "c", 1);
  const char *dirs[1] = {d};
  gt_text_options o = {.records = GT_RECORDS_FORTUNE};
  assert_int_equal(gt_tokenize_text(dirs, 1, &o, out, &n), GT_OK);
  const uint32_t want_f[] = {'a', S_, 'b', '1', '\n', '\n', 'b', '2', S_};
  expect_tokens(out, want_f, 9);
  o.records = GT_RECORDS_PARAGRAPH;
  assert_int_equal(gt_tokenize_text(dirs, 1, &o, out, &n), GT_OK);
  const uint32_t want_p[] = {'a', '\n', '%', S_, 1, S_, 'b', '1', S_, 'b', '2', S_};
  expect_tokens(out, want_p, 12);

  /* With "%", the older entry and the fortune records give the same bytes. */
  char out2[256];
  snprintf(out2, sizeof out2, "%s", path_in("rec2.tok"));
  o.records = GT_RECORDS_FORTUNE;
  assert_int_equal(gt_tokenize_text(dirs, 1, &o, out, &n), GT_OK);
  assert_int_equal(gt_tokenize_paths(dirs, 1, "%", out2, &n), GT_OK);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", out, out2);
  assert_int_equal(system(cmd), 0);
}

static void test_text_records_bad(void **state) {
  (void)state;
  /* Names: each parses back to its kind; anything else is refused, and the
   * message lists the names. */
  for (int r = GT_RECORDS_FILE; r <= GT_RECORDS_FORTUNE; r++) {
    gt_text_records back = (gt_text_records)-1;
    assert_int_equal(gt_text_records_parse(gt_text_records_name((gt_text_records)r), &back), GT_OK);
    assert_int_equal(back, r);
  }
  assert_string_equal(gt_text_records_name(GT_RECORDS_PARAGRAPH), "paragraph");
  assert_string_equal(gt_text_records_name((gt_text_records)99), "unknown");
  gt_text_records r = GT_RECORDS_LINE;
  assert_int_equal(gt_text_records_parse("Fortune", &r), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "'Fortune'"));
  assert_non_null(strstr(gt_last_error(), "paragraph"));
  assert_int_equal(gt_text_records_parse("", &r), GT_EINVAL);
  assert_int_equal(gt_text_records_parse(NULL, &r), GT_EINVAL);
  assert_int_equal(r, GT_RECORDS_LINE); /* untouched */

  /* Bad options fail before anything is written; an old output stays. */
  char txt[256], out[256];
  snprintf(txt, sizeof txt, "%s", path_in("bad.txt"));
  snprintf(out, sizeof out, "%s", path_in("bad.tok"));
  write_bytes(txt, "x\ny\n", 4);
  const char *inputs[1] = {txt};
  uint64_t n = 0;
  gt_text_options o = {.records = GT_RECORDS_LINE};
  assert_int_equal(gt_tokenize_text(inputs, 1, &o, out, &n), GT_OK);
  const uint32_t want[] = {'x', S_, 'y', S_};
  expect_tokens(out, want, 4);
  o = (gt_text_options){.records = GT_RECORDS_SEPARATOR};
  assert_int_equal(gt_tokenize_text(inputs, 1, &o, out, &n), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "separator"));
  o.separator = "a\nb";
  assert_int_equal(gt_tokenize_text(inputs, 1, &o, out, &n), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "newline"));
  o = (gt_text_options){.records = (gt_text_records)99};
  assert_int_equal(gt_tokenize_text(inputs, 1, &o, out, &n), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "unknown kind of record"));
  o = (gt_text_options){.records = GT_RECORDS_PARAGRAPH};
  assert_int_equal(gt_tokenize_text(inputs, 0, &o, out, &n), GT_EINVAL);
  const char *missing[1] = {path_in("absent.txt")};
  assert_int_equal(gt_tokenize_text(missing, 1, &o, out, &n), GT_ENOTFOUND);
  assert_int_equal(mkdir(path_in("none"), 0755), 0);
  const char *none[1] = {path_in("none")};
  assert_int_equal(gt_tokenize_text(none, 1, &o, out, &n), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "no input files"));
  expect_tokens(out, want, 4);
  assert_int_not_equal(access(path_in("bad.tok.tmp"), F_OK), 0);
}

/* ---- bad input ---- */

static void expect_open_error(const char *p, gt_loader_mode mode, uint32_t limit, gt_status want, const char *words1,
                              const char *words2) {
  gt_loader_config c = cfg_of(p, 2, 4, mode, 0);
  gt_loader *l = (gt_loader *)&c;
  gt_status s = gt_loader_open(&c, limit, &l);
  if (s != want) fail_msg("%s: got %s (%s), want %s", p, gt_status_name(s), gt_last_error(), gt_status_name(want));
  assert_null(l);
  if (!strstr(gt_last_error(), words1) || (words2 && !strstr(gt_last_error(), words2)))
    fail_msg("message \"%s\" lacks \"%s\" / \"%s\"", gt_last_error(), words1, words2 ? words2 : "");
  assert_non_null(strstr(gt_last_error(), p)); /* every message names the file */
}

static void test_bad_files(void **state) {
  (void)state;
  static unsigned char buf[8192];
  uint32_t tok[2000];
  for (int i = 0; i < 2000; i++) tok[i] = (uint32_t)(i % 250);
  const char *p = path_in("bad.tok");
  expect_open_error(path_in("missing.tok"), GT_LOADER_FIXED, 0, GT_ENOTFOUND, "not found", NULL);
  size_t n = raw_file(buf, 1, 2, 100, 257, 256, tok, 100);
  write_bytes(p, buf, 30);
  expect_open_error(p, GT_LOADER_FIXED, 0, GT_EFORMAT, "truncated header", NULL);
  write_bytes(p, buf, 0);
  expect_open_error(p, GT_LOADER_FIXED, 0, GT_EFORMAT, "truncated header", NULL);
  write_bytes(p, buf, n - 100);
  expect_open_error(p, GT_LOADER_FIXED, 0, GT_EFORMAT, "truncated body", NULL);
  write_bytes(p, buf, n);
  write_bytes(path_in("long.tok"), buf, n); /* then one byte too many */
  FILE *f = fopen(path_in("long.tok"), "ab");
  fputc(0, f);
  fclose(f);
  expect_open_error(path_in("long.tok"), GT_LOADER_FIXED, 0, GT_EFORMAT, "does not match", NULL);
  memcpy(buf, "GIANTTOX", 8);
  write_bytes(p, buf, n);
  expect_open_error(p, GT_LOADER_FIXED, 0, GT_EFORMAT, "wrong magic", "offset 0");
  n = raw_file(buf, 2, 2, 100, 257, 256, tok, 100);
  write_bytes(p, buf, n);
  expect_open_error(p, GT_LOADER_FIXED, 0, GT_EUNSUPPORTED, "unsupported version 2", "offset 8");
  n = raw_file(buf, 1, 3, 100, 257, 256, tok, 100);
  write_bytes(p, buf, n);
  expect_open_error(p, GT_LOADER_FIXED, 0, GT_EFORMAT, "bad token width 3", "offset 12");
  n = raw_file(buf, 1, 1, 100, 300, GT_TOKFILE_NO_SEP, tok, 100);
  write_bytes(p, buf, n);
  expect_open_error(p, GT_LOADER_FIXED, 0, GT_EFORMAT, "does not fit width", NULL);
  n = raw_file(buf, 1, 2, 100, 257, 257, tok, 100);
  write_bytes(p, buf, n);
  expect_open_error(p, GT_LOADER_FIXED, 0, GT_EFORMAT, "separator id 257", NULL);
  n = raw_file(buf, 1, 2, 100, 257, 256, tok, 100);
  buf[40] = 1;
  write_bytes(p, buf, n);
  expect_open_error(p, GT_LOADER_FIXED, 0, GT_EFORMAT, "reserved", "offset 40");
  n = raw_file(buf, 1, 2, 1, 257, 256, tok, 1);
  write_bytes(p, buf, n);
  expect_open_error(p, GT_LOADER_FIXED, 0, GT_EFORMAT, "at least 2", NULL);

  tok[5] = 300; /* beyond the file's own vocabulary */
  n = raw_file(buf, 1, 2, 100, 257, 256, tok, 100);
  write_bytes(p, buf, n);
  expect_open_error(p, GT_LOADER_FIXED, 0, GT_EFORMAT, "token id 300 at position 5 is >= the file's vocabulary 257",
                    "offset 74");
  tok[5] = 5;
  tok[1234] = 300; /* fine for the file, too big for the model */
  assert_int_equal(gt_tokfile_write(p, tok, 2000, 70000, GT_TOKFILE_NO_SEP), GT_OK);
  expect_open_error(p, GT_LOADER_FIXED, 257, GT_ERANGE,
                    "token id 300 at position 1234 is >= the model's vocabulary 257", NULL);
  gt_loader_config c = cfg_of(p, 2, 4, GT_LOADER_FIXED, 0);
  gt_loader *l;
  assert_int_equal(gt_loader_open(&c, 301, &l), GT_OK);
  gt_loader_close(l);
  tok[1234] = 0x80000000u; /* a width-4 file may declare 2^32-1 ids; a batch holds int32 */
  assert_int_equal(gt_tokfile_write(p, tok, 2000, 0xFFFFFFFFu, GT_TOKFILE_NO_SEP), GT_OK);
  expect_open_error(p, GT_LOADER_FIXED, 0, GT_ERANGE, "token id 2147483648 at position 1234 is over 2147483647",
                    "at most 2^31");
  tok[1234] = 0x7FFFFFFFu; /* the largest id that fits: read back as itself */
  assert_int_equal(gt_tokfile_write(p, tok, 2000, 0xFFFFFFFFu, GT_TOKFILE_NO_SEP), GT_OK);
  c = cfg_of(p, 1, 4, GT_LOADER_FIXED, 0);
  assert_int_equal(gt_loader_open(&c, 0, &l), GT_OK);
  assert_int_equal(gt_loader_seek(l, 1234 / 4), GT_OK); /* rows of 5 tokens at stride 4 */
  gt_batch b;
  assert_int_equal(gt_loader_next(l, &b), GT_OK);
  assert_int_equal(b.inputs[1234 % 4], INT32_MAX);
  gt_loader_close(l);
  tok[1234] = 1234 % 250;
  expect_open_error(p, GT_LOADER_DOCUMENTS, 0, GT_EINVAL, "DOCUMENTS", "separator");
  const uint32_t lonely[] = {1, 9, 2, 9, 9, 3};
  assert_int_equal(gt_tokfile_write(p, lonely, 6, 10, 9), GT_OK);
  expect_open_error(p, GT_LOADER_DOCUMENTS, 0, GT_EINVAL, "no document of at least 2", NULL);
  assert_int_equal(gt_tokfile_write(p, tok, 4, 257, 256), GT_OK);
  expect_open_error(p, GT_LOADER_FIXED, 0, GT_EINVAL, "fewer than T_max+1", NULL); /* T_max 4 */
  expect_open_error(dir, GT_LOADER_FIXED, 0, GT_EINVAL, "not a regular file", NULL);
}

static void test_bad_config(void **state) {
  (void)state;
  uint32_t tok[100] = {0};
  const char *p = path_in("ok.tok");
  assert_int_equal(gt_tokfile_write(p, tok, 100, 257, 256), GT_OK);
  struct {
    int B, T, shard, nshards, mode;
    const char *path, *words;
  } cases[] = {
      {0, 4, 0, 1, 0, p, "B must be positive"},
      {-3, 4, 0, 1, 0, p, "B must be positive"},
      {2, 0, 0, 1, 0, p, "T_max must be positive"},
      {2, -1, 0, 1, 0, p, "T_max must be positive"},
      {2, 4, 0, 0, 0, p, "shard count"},
      {2, 4, 2, 2, 0, p, "shard 2 is out of range"},
      {2, 4, -1, 2, 0, p, "shard -1 is out of range"},
      {2, 4, 0, 1, 7, p, "unknown mode"},
      {2, 4, 0, 1, 0, NULL, "no data file"},
      {1 << 30, 1 << 30, 0, 1, 0, p, "too large"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    gt_loader_config c = {.path = cases[i].path,
                          .B = cases[i].B,
                          .T_max = cases[i].T,
                          .mode = (gt_loader_mode)cases[i].mode,
                          .shard = cases[i].shard,
                          .nshards = cases[i].nshards};
    gt_loader *l;
    assert_int_equal(gt_loader_open(&c, 0, &l), GT_EINVAL);
    assert_null(l);
    if (!strstr(gt_last_error(), cases[i].words))
      fail_msg("case %zu: \"%s\" lacks \"%s\"", i, gt_last_error(), cases[i].words);
  }
}

/* ---- giant-tokenize ---- */

/* Runs the tool with output to `log`; returns its exit status, bounded at 20 s
 * (it takes milliseconds on these small inputs, tens on busy cores). */
static int run_tool(const char *log, const char *const *args) {
  const char *bd = getenv("GT_BUILD_DIR");
  char exe[512];
  snprintf(exe, sizeof exe, "%s/tools/giant-tokenize", bd);
  if (access(exe, X_OK) != 0) fail_msg("%s is missing: build the giant-tokenize target", exe);
  char *argv[16] = {exe};
  int n = 1;
  for (; args[n - 1]; n++) argv[n] = (char *)args[n - 1];
  argv[n] = NULL;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execv(exe, argv);
    _exit(127);
  }
  int st;
  for (int i = 0; i < 2000; i++) {
    if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  fail_msg("giant-tokenize did not finish in 20 s");
  return -1;
}

static void log_has(const char *log, const char *words) {
  char buf[4096] = {0};
  FILE *f = fopen(log, "rb");
  assert_non_null(f);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  if (!strstr(buf, words)) fail_msg("output \"%s\" lacks \"%s\"", buf, words);
}

static void test_cli(void **state) {
  (void)state;
  if (!getenv("GT_BUILD_DIR")) skip();
  char log[256], out[256];
  snprintf(log, sizeof log, "%s", path_in("cli.log"));
  assert_int_equal(run_tool(log, (const char *[]){NULL}), 2);
  log_has(log, "usage");
  assert_int_equal(run_tool(log, (const char *[]){"--bogus", "o.tok", "x", NULL}), 2);
  log_has(log, "unknown flag --bogus");
  assert_int_equal(run_tool(log, (const char *[]){"--doc-sep", NULL}), 2);
  log_has(log, "--doc-sep needs a LINE");
  assert_int_equal(run_tool(log, (const char *[]){path_in("o.tok"), NULL}), 2);
  log_has(log, "at least one input");
  assert_int_equal(run_tool(log, (const char *[]){path_in("o.tok"), path_in("nope"), NULL}), 1);
  log_has(log, "nope: No such file");
  assert_int_not_equal(access(path_in("o.tok"), F_OK), 0);

  /* A fortune-style directory: index files and subfolders are left out,
   * files are read in name order, and each ends a document. */
  char corpus[256];
  snprintf(corpus, sizeof corpus, "%s", path_in("corpus"));
  assert_int_equal(mkdir(corpus, 0755), 0);
  assert_int_equal(mkdir(path_in("corpus/sub"), 0755), 0);
  write_bytes(path_in("corpus/b"), "B1\n%\nB2\n", 8);
  write_bytes(path_in("corpus/a"), "A1\n%\nA2", 7);
  write_bytes(path_in("corpus/a.dat"), "\x01\x02", 2);
  assert_int_equal(symlink("a", path_in("corpus/a.u8")), 0);
  write_bytes(path_in("corpus/sub/c"), "C", 1);
  const uint32_t want[] = {'A', '1', S_, 'A', '2', S_, 'B', '1', S_, 'B', '2', S_};
  snprintf(out, sizeof out, "%s", path_in("corpus/all.tok")); /* must not read itself */
  for (int rep = 0; rep < 2; rep++) {
    assert_int_equal(run_tool(log, (const char *[]){out, corpus, NULL}), 0);
    log_has(log, "12 tokens (88 bytes)");
    expect_tokens(out, want, 12);
  }
  assert_int_equal(run_tool(log, (const char *[]){"--no-doc-sep", out, path_in("corpus/b"), NULL}), 0);
  const uint32_t want2[] = {'B', '1', '\n', '%', '\n', 'B', '2', S_};
  expect_tokens(out, want2, 8);
  assert_int_equal(run_tool(log, (const char *[]){"--doc-sep", "B2", "--", out, path_in("corpus/b"), NULL}), 0);
  const uint32_t want3[] = {'B', '1', '\n', '%', S_};
  expect_tokens(out, want3, 5);
  assert_int_equal(run_tool(log, (const char *[]){path_in("nodir/o.tok"), corpus, NULL}), 1);
  log_has(log, "cannot create");

  /* --records: the fortune reader by name gives the default's bytes; the
   * others read a directory's index files too. */
  assert_int_equal(run_tool(log, (const char *[]){"--records", "fortune", out, corpus, NULL}), 0);
  expect_tokens(out, want, 12);
  assert_int_equal(run_tool(log, (const char *[]){"--records", "file", out, corpus, NULL}), 0);
  const uint32_t want_file[] = {'A', '1',  '\n', '%', '\n', 'A', '2', S_,   1,   2,    S_,  'A', '1', '\n',
                                '%', '\n', 'A',  '2', S_,   'B', '1', '\n', '%', '\n', 'B', '2', S_};
  expect_tokens(out, want_file, 27);
  assert_int_equal(run_tool(log, (const char *[]){"--records", "line", out, path_in("corpus/b"), NULL}), 0);
  const uint32_t want_line[] = {'B', '1', S_, '%', S_, 'B', '2', S_};
  expect_tokens(out, want_line, 8);
  write_bytes(path_in("para.txt"), "P1\nP1b\n\nP2\n", 11);
  assert_int_equal(run_tool(log, (const char *[]){"--records", "paragraph", out, path_in("para.txt"), NULL}), 0);
  const uint32_t want_para[] = {'P', '1', '\n', 'P', '1', 'b', S_, 'P', '2', S_};
  expect_tokens(out, want_para, 10);
  assert_int_equal(
      run_tool(log, (const char *[]){"--records", "fortune", "--doc-sep", "B2", out, path_in("corpus/b"), NULL}), 0);
  expect_tokens(out, want3, 5);

  /* Bad values are usage errors that say what is wanted, and write nothing. */
  assert_int_equal(unlink(out), 0);
  assert_int_equal(run_tool(log, (const char *[]){"--records", "lines", out, corpus, NULL}), 2);
  log_has(log, "--records: unknown mode 'lines'");
  log_has(log, "fortune, paragraph, file or line");
  assert_int_equal(run_tool(log, (const char *[]){"--records", "separator", out, corpus, NULL}), 2);
  log_has(log, "--doc-sep LINE");
  assert_int_equal(run_tool(log, (const char *[]){"--records", NULL}), 2);
  log_has(log, "--records needs a MODE");
  assert_int_equal(run_tool(log, (const char *[]){"--records", "line", "--no-doc-sep", out, corpus, NULL}), 2);
  log_has(log, "--no-doc-sep changes the fortune reader's separator line; it does not go with --records line");
  assert_int_not_equal(access(out, F_OK), 0);
  assert_int_equal(run_tool(log, (const char *[]){"--help", NULL}), 0);
  log_has(log, "--records MODE");
  log_has(log, "paragraph");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_roundtrip_widths, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fixed_exact_and_wrap, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fixed_seeded, setup, teardown),
      cmocka_unit_test_setup_teardown(test_documents, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sharding, setup, teardown),
      cmocka_unit_test_setup_teardown(test_uneven_shares, setup, teardown),
      cmocka_unit_test_setup_teardown(test_seek_resume, setup, teardown),
      cmocka_unit_test_setup_teardown(test_tokenizer, setup, teardown),
      cmocka_unit_test_setup_teardown(test_tokenize_if_missing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_tokenize_paths, setup, teardown),
      cmocka_unit_test_setup_teardown(test_text_records, setup, teardown),
      cmocka_unit_test_setup_teardown(test_text_records_bad, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_files, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_config, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cli, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
