/* The text reader: a corpus given as files and directories, cut into
 * records by an option (giant/data.h: a file, a line, a paragraph, a
 * separator line; fortune files are one value of it).
 *
 * Directory entries are sorted by name so that the same corpus gives the
 * same token file on every file system. Inputs are compared with the output
 * by inode, so an output placed inside an input directory is never fed back
 * into itself.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/data/bpe.h"
#include "core/data/text.h"
#include "giant/data.h"

/* How one run reads its files. */
typedef struct reading {
  const char *sep; /* the line that ends a record: NULL none, "" an empty line */
  bool each_line;  /* every line a record */
  bool skip_index; /* leave out a directory's fortune index files */
} reading;

typedef struct job {
  gt_text_sink sink;
  reading r;
  struct stat out, tmp; /* st_ino 0 where absent */
  int nfiles;
} job;

static bool is_output(const job *j, const struct stat *st) {
  return (j->out.st_ino && st->st_dev == j->out.st_dev && st->st_ino == j->out.st_ino) ||
         (j->tmp.st_ino && st->st_dev == j->tmp.st_dev && st->st_ino == j->tmp.st_ino);
}

static gt_status add_file(job *j, const char *path, const struct stat *st) {
  if (is_output(j, st)) return GT_OK;
  GT_TRY(gt_text_tokenize_file(&j->sink, path, j->r.sep, j->r.each_line));
  j->nfiles++;
  return GT_OK;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static gt_status add_dir(job *j, const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return gt_errorf(GT_EIO, "cannot read directory %s: %s", dir, strerror(errno));
  char **names = NULL;
  size_t n = 0, cap = 0;
  gt_status s = GT_OK;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (j->r.skip_index && (ends_with(e->d_name, ".dat") || ends_with(e->d_name, ".u8"))) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      char **v = realloc(names, cap * sizeof *v);
      if (!v) break;
      names = v;
    }
    if (!(names[n] = strdup(e->d_name))) break;
    n++;
  }
  if (e) s = gt_errorf(GT_ENOMEM, "out of memory listing %s", dir);
  closedir(d);
  if (n) qsort(names, n, sizeof *names, by_name);
  size_t dl = strlen(dir);
  for (size_t i = 0; i < n && s == GT_OK; i++) {
    char *p = malloc(dl + strlen(names[i]) + 2);
    if (!p) {
      s = gt_errorf(GT_ENOMEM, "out of memory listing %s", dir);
      break;
    }
    strcpy(p, dir);
    p[dl] = '/';
    strcpy(p + dl + 1, names[i]);
    struct stat st;
    if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) s = add_file(j, p, &st);
    free(p);
  }
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
  return s;
}

static gt_status add_all(job *j, const char *const *inputs, int ninputs) {
  for (int i = 0; i < ninputs; i++) {
    const char *in = inputs[i];
    struct stat st;
    if (!in || stat(in, &st) != 0)
      return gt_errorf(in && errno == ENOENT ? GT_ENOTFOUND : GT_EIO, "input %s: %s", in ? in : "(null)",
                       in ? strerror(errno) : "no path");
    GT_TRY(S_ISDIR(st.st_mode) ? add_dir(j, in) : add_file(j, in, &st));
  }
  if (j->nfiles == 0)
    return gt_errorf(GT_EINVAL, j->r.skip_index ? "no input files found (a directory's *.dat and *.u8 files, and "
                                                  "its subdirectories, are left out)"
                                                : "no input files found (a directory's subdirectories are left out)");
  return GT_OK;
}

/* The bytes the inputs hold, for progress reports (a guess: files may
 * change, and the output is counted if it lies among them). */
static uint64_t input_bytes(const char *const *inputs, int ninputs, bool skip_index) {
  uint64_t total = 0;
  for (int i = 0; i < ninputs; i++) {
    struct stat st;
    if (!inputs[i] || stat(inputs[i], &st) != 0) continue;
    if (!S_ISDIR(st.st_mode)) {
      total += (uint64_t)st.st_size;
      continue;
    }
    DIR *d = opendir(inputs[i]);
    if (!d) continue;
    int fd = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (skip_index && (ends_with(e->d_name, ".dat") || ends_with(e->d_name, ".u8"))) continue;
      if (fstatat(fd, e->d_name, &st, 0) == 0 && S_ISREG(st.st_mode)) total += (uint64_t)st.st_size;
    }
    closedir(d);
  }
  return total;
}

static gt_status open_output(job *j, const char *out_path, const gt_bpe *bpe) {
  if (!bpe) return gt_tokfile_writer_open(out_path, GT_BYTE_VOCAB, GT_BYTE_DOC_SEP, &j->sink.w);
  GT_TRY(gt_tokfile_writer_open(out_path, gt_bpe_vocab_size(bpe), gt_bpe_eot(bpe, NULL), &j->sink.w));
  gt_status s = gt_bpe_stream_open(bpe, j->sink.w, &j->sink.bpe);
  if (s != GT_OK) gt_tokfile_writer_abort(j->sink.w);
  return s;
}

static void close_output(job *j) {
  gt_tokfile_writer_abort(j->sink.w);
  gt_bpe_stream_free(j->sink.bpe);
}

static gt_status tokenize(const char *const *inputs, int ninputs, reading r, const gt_text_options *o,
                          const char *out_path, uint64_t *ntokens) {
  if (!inputs || ninputs <= 0) return gt_errorf(GT_EINVAL, "no inputs to tokenize");
  if (r.sep && strchr(r.sep, '\n'))
    return gt_errorf(GT_EINVAL, "the document separator line must not contain a newline");
  job j = {.r = r};
  gt_bpe *bpe = NULL;
  if (o && o->tokenizer) GT_TRY(gt_bpe_load(o->tokenizer, &bpe));
  gt_status s = open_output(&j, out_path, bpe);
  if (s != GT_OK) {
    gt_bpe_free(bpe);
    return s;
  }
  if (o && o->progress) {
    j.sink.progress = o->progress;
    j.sink.progress_user = o->progress_user;
    j.sink.total = input_bytes(inputs, ninputs, r.skip_index);
  }
  size_t n = strlen(out_path);
  char *tmp = malloc(n + 5);
  if (!tmp) {
    close_output(&j);
    gt_bpe_free(bpe);
    return gt_errorf(GT_ENOMEM, "out of memory tokenizing into %s", out_path);
  }
  memcpy(tmp, out_path, n);
  memcpy(tmp + n, ".tmp", 5);
  if (stat(out_path, &j.out) != 0) j.out.st_ino = 0;
  if (stat(tmp, &j.tmp) != 0) j.tmp.st_ino = 0;
  free(tmp);
  s = add_all(&j, inputs, ninputs);
  if (s == GT_OK && j.sink.bpe) s = gt_bpe_stream_flush(j.sink.bpe);
  uint64_t count = gt_tokfile_writer_count(j.sink.w);
  gt_bpe_stream_free(j.sink.bpe);
  gt_bpe_free(bpe);
  if (s != GT_OK) {
    gt_tokfile_writer_abort(j.sink.w);
    return s;
  }
  GT_TRY(gt_tokfile_writer_commit(j.sink.w));
  if (ntokens) *ntokens = count;
  return GT_OK;
}

static const char *const record_names[] = {
    [GT_RECORDS_FILE] = "file",           [GT_RECORDS_LINE] = "line",       [GT_RECORDS_PARAGRAPH] = "paragraph",
    [GT_RECORDS_SEPARATOR] = "separator", [GT_RECORDS_FORTUNE] = "fortune",
};
enum { NRECORDS = sizeof record_names / sizeof record_names[0] };

const char *gt_text_records_name(gt_text_records r) { return (unsigned)r < NRECORDS ? record_names[r] : "unknown"; }

gt_status gt_text_records_parse(const char *name, gt_text_records *out) {
  for (int i = 0; name && i < NRECORDS; i++)
    if (strcmp(name, record_names[i]) == 0) {
      *out = (gt_text_records)i;
      return GT_OK;
    }
  return gt_errorf(GT_EINVAL, "unknown kind of record '%s' (file, line, paragraph, separator or fortune)",
                   name ? name : "(null)");
}

gt_status gt_tokenize_text(const char *const *inputs, int ninputs, const gt_text_options *opts, const char *out_path,
                           uint64_t *ntokens) {
  gt_text_options o = opts ? *opts : (gt_text_options){.records = GT_RECORDS_FILE};
  reading r = {0};
  switch (o.records) {
    case GT_RECORDS_FILE: break;
    case GT_RECORDS_LINE: r.each_line = true; break;
    case GT_RECORDS_PARAGRAPH: r.sep = ""; break;
    case GT_RECORDS_SEPARATOR:
      if (!o.separator)
        return gt_errorf(GT_EINVAL, "records cut by a separator line need the line (gt_text_options.separator)");
      r.sep = o.separator;
      break;
    case GT_RECORDS_FORTUNE:
      r.sep = "%";
      r.skip_index = true;
      break;
    default: return gt_errorf(GT_EINVAL, "unknown kind of record %d", (int)o.records);
  }
  return tokenize(inputs, ninputs, r, &o, out_path, ntokens);
}

gt_status gt_tokenize_paths(const char *const *inputs, int ninputs, const char *separator_line, const char *out_path,
                            uint64_t *ntokens) {
  return tokenize(inputs, ninputs, (reading){.sep = separator_line, .skip_index = true}, NULL, out_path, ntokens);
}

gt_status gt_tokenize_if_missing(const char *corpus, const char *out_path, bool *made, uint64_t *ntokens) {
  *made = false;
  *ntokens = 0;
  struct stat st;
  if (stat(out_path, &st) == 0) return GT_OK;
  if (errno != ENOENT) return gt_errorf(GT_EIO, "cannot read %s: %s", out_path, strerror(errno));
  if (stat(corpus, &st) != 0)
    return gt_errorf(GT_ENOTFOUND,
                     "%s is missing and so is the corpus %s (%s): give --corpus a text file or "
                     "directory, or --data an existing token file",
                     out_path, corpus, strerror(errno));
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", out_path);
  char *slash = strrchr(dir, '/');
  if (slash && slash != dir) {
    *slash = '\0';
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
      return gt_errorf(GT_EIO, "cannot create %s: %s", dir, strerror(errno));
  }
  const char *inputs[1] = {corpus};
  GT_TRY(gt_tokenize_paths(inputs, 1, "%", out_path, ntokens));
  *made = true;
  return GT_OK;
}
