/* giant-tokenize --tokenizer: byte-level BPE from a tokenizer.json, checked
 * id for id against Hugging Face's tokenizers (tests/core/bpe_reference.py)
 * on the fortunes corpus, on random bytes (invalid UTF-8 among them) and
 * on whole files; the stream against itself with buffer ends everywhere;
 * the JSON reader; and bad tokenizer files refused by name. Vocabularies
 * are trained here with tools/train_bpe.py. Skips (77) when Python's
 * tokenizers package is missing (tools/deps.sh giant_install_py_deps). */
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

#include "common/gt_skip.h"
#include "core/data/bpe.h"
#include "core/data/json.h"
#include "core/data/loader_engine.h"
#include "giant/data.h"

#define FORTUNES "/usr/share/games/fortunes"

static char dir[64];
static bool have_python; /* python3 with tokenizers, and the corpus */

static const char *edited(const char *name, const char *edit);

static const char *path_in(const char *name) {
  static char p[64][256];
  static int k;
  k = (k + 1) % 64;
  snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
  return p[k];
}

/* Runs argv with output to log; its exit status, or fails the test after
 * `secs` (training and the reference take seconds; allow for ASan and
 * two busy cores). */
static int run(const char *log, char *const *argv, int secs) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execv(argv[0], argv);
    _exit(127);
  }
  int st;
  for (long i = 0; i < secs * 100L; i++) {
    if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  fail_msg("%s did not finish in %d s", argv[0], secs);
  return -1;
}

static const char *tool(void) {
  static char exe[512];
  snprintf(exe, sizeof exe, "%s/tools/giant-tokenize", getenv("GT_BUILD_DIR"));
  if (access(exe, X_OK) != 0) fail_msg("%s is missing: build the giant-tokenize target", exe);
  return exe;
}

static void show_log(const char *log) {
  char buf[4096] = {0};
  FILE *f = fopen(log, "rb");
  if (!f) return;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  print_message("%s\n", buf);
}

static int python(const char *log, const char *script, const char *a, const char *b, const char *c, const char *d,
                  const char *e) {
  char sp[512];
  snprintf(sp, sizeof sp, "%s/%s", GT_SOURCE_DIR, script);
  char *argv[] = {GT_PYTHON3, sp, (char *)a, (char *)b, (char *)c, (char *)d, (char *)e, NULL};
  return run(log, argv, 600);
}

static int tokenize(const char *log, const char *tokenizer, const char *records, const char *out, const char *in) {
  char *argv[9] = {(char *)tool()};
  int n = 1;
  if (tokenizer) argv[n++] = "--tokenizer", argv[n++] = (char *)tokenizer;
  if (records) argv[n++] = "--records", argv[n++] = (char *)records;
  argv[n++] = (char *)out;
  argv[n++] = (char *)in;
  argv[n] = NULL;
  return run(log, argv, 300);
}

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *p = malloc((size_t)len + 1);
  assert_non_null(p);
  assert_int_equal(fread(p, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return p;
}

/* The ids of a token file, as uint32. */
static uint32_t *tok_ids(const char *path, size_t *count, gt_tokfile_header *h) {
  size_t n;
  unsigned char *b = slurp(path, &n);
  assert_int_equal(gt_tokfile_parse_header(b, n, path, h), GT_OK);
  uint32_t *ids = malloc(h->count * 4 + 4);
  assert_non_null(ids);
  for (uint64_t i = 0; i < h->count; i++) {
    const unsigned char *p = b + GT_TOKFILE_HEADER_BYTES + i * h->width;
    uint32_t v = 0;
    for (int k = (int)h->width - 1; k >= 0; k--) v = v << 8 | p[k];
    ids[i] = v;
  }
  free(b);
  *count = h->count;
  return ids;
}

/* giant-tokenize --tokenizer on `in` against tokenizers on the same records. */
static void same_as_reference(const char *tokenizer, const char *records, const char *in, uint32_t want_sep) {
  const char *log = path_in("run.log"), *bytes = path_in("bytes.tok"), *bpe = path_in("bpe.tok"),
             *ref = path_in("ref.ids");
  if (tokenize(log, NULL, records, bytes, in) != 0 || tokenize(log, tokenizer, records, bpe, in) != 0) {
    show_log(log);
    fail_msg("giant-tokenize failed");
  }
  if (python(log, "tests/core/bpe_reference.py", tokenizer, bytes, ref, NULL, NULL) != 0) {
    show_log(log);
    fail_msg("the reference failed");
  }
  gt_tokfile_header h;
  size_t n, nref;
  uint32_t *ids = tok_ids(bpe, &n, &h);
  uint32_t *want = (uint32_t *)slurp(ref, &nref);
  nref /= 4;
  assert_int_equal(h.doc_sep, want_sep);
  for (size_t i = 0; i < n && i < nref; i++)
    if (ids[i] != want[i]) fail_msg("%s: id %zu is %u, tokenizers says %u", in, i, ids[i], want[i]);
  assert_int_equal(n, nref);
  assert_true(n > 1000);
  for (size_t i = 0; i < n; i++) assert_true(ids[i] < h.vocab_size);
  free(ids);
  free(want);
}

static void test_gpt2_fortunes(void **state) {
  (void)state;
  if (!have_python) SKIP_CASE("no python3 with tokenizers, or no " FORTUNES);
  same_as_reference(path_in("gpt2.json"), NULL, FORTUNES, 0);
}

static void test_llama3_fortunes(void **state) {
  (void)state;
  if (!have_python) SKIP_CASE("no python3 with tokenizers, or no " FORTUNES);
  same_as_reference(path_in("llama3.json"), NULL, FORTUNES, 0);
}

/* GPT-2's own layout: <|endoftext|> an added token with the last id. */
static void test_gpt2_layout(void **state) {
  (void)state;
  if (!have_python) SKIP_CASE("no python3 with tokenizers, or no " FORTUNES);
  const char *tj = path_in("gpt2_layout.json"), *log = path_in("train.log");
  if (python(log, "tests/core/bpe_reference.py", "--gpt2-layout", tj, FORTUNES, NULL, NULL) != 0) {
    show_log(log);
    fail_msg("making the GPT-2 layout failed");
  }
  same_as_reference(tj, NULL, FORTUNES, 1000);
}

/* Random bytes: invalid UTF-8, control characters, and text with the
 * classes' edges (U+0085 and U+2028 are space, U+001C is not; long s). */
static void test_random_bytes(void **state) {
  (void)state;
  if (!have_python) SKIP_CASE("no python3 with tokenizers, or no " FORTUNES);
  const char *in = path_in("random.txt");
  FILE *f = fopen(in, "wb");
  assert_non_null(f);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  static const char spice[] =
      "h\xc3\xa9llo w\xc3\xb6rld \xe6\x97\xa5\xe6\x9c\xac '\xc5\xbf IT'S "
      "\xe2\x80\xa8 \xc2\x85\x1c\x1d 12345 \r\n\r\n  \n\t x<|endoftext|>y \xed\xa0\x80 "
      "\xf0\x9f\x98\x80\xf0\x9f\x98 ";
  for (int block = 0; block < 40; block++) {
    for (int i = 0; i < 8192; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      fputc((int)(x >> 56), f);
    }
    fwrite(spice, 1, sizeof spice - 1, f);
  }
  fclose(f);
  same_as_reference(path_in("gpt2.json"), "file", in, 0);
  same_as_reference(path_in("llama3.json"), "file", in, 0);
}

/* Added tokens where pieces begin and end, empty pieces between them, and
 * ByteLevel's add_prefix_space (a space before each piece lacking one). */
static void test_added_tokens(void **state) {
  (void)state;
  if (!have_python) SKIP_CASE("no python3 with tokenizers, or no " FORTUNES);
  const char *in = path_in("lines.txt");
  FILE *f = fopen(in, "wb");
  assert_non_null(f);
  for (int i = 0; i < 200; i++)
    fprintf(f,
            "<|endoftext|>\n<|endoftext|>abc\nabc<|endoftext|>\n x%d\nx\nx<|endoftext|><|endoftext|> y\n"
            "<|endoftext|> \n  \nhello world <|endoftext\n",
            i);
  fclose(f);
  const char *prefix = edited("prefix_space.json", "d['pre_tokenizer']['add_prefix_space']=True");
  same_as_reference(path_in("gpt2.json"), "line", in, 0);
  same_as_reference(path_in("llama3.json"), "line", in, 0);
  same_as_reference(prefix, "line", in, 0);
  same_as_reference(prefix, NULL, FORTUNES, 0);
}

/* Each fortune file (and index file) one record: pieces far longer than
 * the stream's buffer, binary among them. */
static void test_whole_files(void **state) {
  (void)state;
  if (!have_python) SKIP_CASE("no python3 with tokenizers, or no " FORTUNES);
  same_as_reference(path_in("llama3.json"), "file", FORTUNES, 0);
}

/* Ids of text through a stream that pre-tokenizes every `chunk` bytes. */
static uint32_t *encode_with_chunk(const gt_bpe *b, const unsigned char *text, size_t n, size_t chunk, size_t step,
                                   size_t *count) {
  const char *out = path_in("chunk.tok");
  gt_tokfile_writer *w;
  gt_bpe_stream *st;
  assert_int_equal(gt_tokfile_writer_open(out, gt_bpe_vocab_size(b), gt_bpe_eot(b, NULL), &w), GT_OK);
  assert_int_equal(gt_bpe_stream_open(b, w, &st), GT_OK);
  if (chunk) gt_bpe_stream_set_chunk(st, chunk);
  for (size_t i = 0; i < n; i += step)
    assert_int_equal(gt_bpe_stream_feed(st, text + i, n - i < step ? n - i : step), GT_OK);
  assert_int_equal(gt_bpe_stream_end(st, true), GT_OK);
  assert_int_equal(gt_bpe_stream_flush(st), GT_OK);
  gt_bpe_stream_free(st);
  assert_int_equal(gt_tokfile_writer_commit(w), GT_OK);
  gt_tokfile_header h;
  return tok_ids(out, count, &h);
}

/* Where the stream's buffer ends must not show in the ids. */
static void test_buffer_ends(void **state) {
  (void)state;
  if (!have_python) SKIP_CASE("no python3 with tokenizers, or no " FORTUNES);
  size_t n;
  unsigned char *text = slurp(path_in("random.txt"), &n);
  if (n > 120000) n = 120000;
  const char *files[] = {path_in("gpt2.json"), path_in("llama3.json"),
                         edited("prefix_space.json", "d['pre_tokenizer']['add_prefix_space']=True")};
  for (int kind = 0; kind < 3; kind++) {
    gt_bpe *b;
    assert_int_equal(gt_bpe_load(files[kind], &b), GT_OK);
    size_t nwant, ngot;
    uint32_t *want = encode_with_chunk(b, text, n, 0, n, &nwant);
    const size_t chunks[][2] = {{1, 1}, {2, 3}, {7, 5}, {64, 4096}, {1000, 17}};
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
      uint32_t *got = encode_with_chunk(b, text, n, chunks[c][0], chunks[c][1], &ngot);
      assert_int_equal(ngot, nwant);
      assert_memory_equal(got, want, nwant * 4);
      free(got);
    }
    free(want);
    gt_bpe_free(b);
  }
  free(text);
}

/* The ids of text encoded with the tokenizer.json text given. */
static size_t encode_small(const char *json, const char *text, uint32_t *ids, size_t cap) {
  const char *tj = path_in("small.json");
  FILE *f = fopen(tj, "wb");
  assert_non_null(f);
  fputs(json, f);
  fclose(f);
  gt_bpe *b;
  assert_int_equal(gt_bpe_load(tj, &b), GT_OK);
  size_t n;
  uint32_t *got = encode_with_chunk(b, (const unsigned char *)text, strlen(text), 0, 1, &n);
  assert_true(n <= cap);
  memcpy(ids, got, n * 4);
  free(got);
  gt_bpe_free(b);
  return n;
}

/* ignore_merges (Llama 3 sets it): a piece that is a token is that token,
 * whatever the merges would make; merges given as pairs; a byte without a
 * token dropped, as tokenizers drops it. */
static void test_ignore_merges(void **state) {
  (void)state;
  static const char fmt[] =
      "{\"model\": {\"type\": \"BPE\", \"ignore_merges\": %s, \"vocab\": "
      "{\"a\": 0, \"b\": 1, \"c\": 2, \"bc\": 3, \"abc\": 4, \"\\u0120\": 5}, "
      "\"merges\": [[\"b\", \"c\"]]}, \"normalizer\": null, "
      "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}}";
  char json[512];
  uint32_t ids[16];
  snprintf(json, sizeof json, fmt, "true");
  size_t n = encode_small(json, "abc abcd", ids, 16);
  assert_int_equal(n, 4);
  assert_memory_equal(ids, ((uint32_t[]){4, 5, 0, 3}), 4 * 4);
  snprintf(json, sizeof json, fmt, "false");
  n = encode_small(json, "abc abcd", ids, 16);
  assert_int_equal(n, 5);
  assert_memory_equal(ids, ((uint32_t[]){0, 3, 5, 0, 3}), 5 * 4);
}

static void test_json(void **state) {
  (void)state;
  static const char ok[] = " {\"a\": [1, -2.5e1, true, null, {\"b\": \"\\u00e9\\ud83d\\ude00\\n\\\"\"}], \"c\": {}} ";
  gt_json_doc *doc;
  const gt_json *root;
  assert_int_equal(gt_json_parse(ok, sizeof ok - 1, "ok", &doc, &root), GT_OK);
  const gt_json *a = gt_json_get(root, "a");
  assert_non_null(a);
  assert_int_equal(a->type, GT_JSON_ARRAY);
  assert_int_equal(a->count, 5);
  assert_true(a->child->next->number == -25.0);
  const gt_json *bv = gt_json_get(a->child->next->next->next->next, "b");
  assert_non_null(bv);
  assert_int_equal(bv->len, 2 + 4 + 2);
  assert_memory_equal(bv->str, "\xc3\xa9\xf0\x9f\x98\x80\n\"", 8);
  assert_int_equal(gt_json_get(root, "c")->count, 0);
  assert_null(gt_json_get(root, "d"));
  gt_json_free(doc);
  /* 64 levels are read; 65 are refused, not recursed into. */
  char deep[200];
  for (int depth = 64; depth <= 65; depth++) {
    memset(deep, '[', (size_t)depth);
    memset(deep + depth, ']', (size_t)depth);
    gt_status s = gt_json_parse(deep, 2 * (size_t)depth, "deep", &doc, &root);
    assert_int_equal(s, depth == 64 ? GT_OK : GT_EFORMAT);
    if (s == GT_OK) gt_json_free(doc);
  }
  assert_non_null(strstr(gt_last_error(), "nested too deeply"));
  static const char *const bad[] = {"{\"a\":1", "[1,]",     "\"\\ud800\"", "\"\x01\"", "01", "{\"a\" 1}",
                                    "[1] [2]",  "\"\xc3\"", "tru",         "-",        "1e", "\"\\uZZZZ\"",
                                    "",         "{1:2}"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    if (gt_json_parse(bad[i], strlen(bad[i]), "bad", &doc, &root) == GT_OK) fail_msg("\"%s\" was read as JSON", bad[i]);
    assert_non_null(strstr(gt_last_error(), "not valid JSON at line 1"));
  }
}

/* gpt2.json rewritten by a Python statement on d (the JSON, or a string
 * written as it is) into name. */
static const char *edited(const char *name, const char *edit) {
  const char *tj = path_in(name);
  char code[1024];
  snprintf(code, sizeof code,
           "import json,sys; d=json.load(open(sys.argv[1])); %s; "
           "open(sys.argv[2],'w').write(d if isinstance(d,str) else json.dumps(d))",
           edit);
  char *argv[] = {GT_PYTHON3, "-c", code, (char *)path_in("gpt2.json"), (char *)tj, NULL};
  assert_int_equal(run(path_in("edit.log"), argv, 120), 0);
  return tj;
}

/* A tokenizer.json edited so, refused by giant-tokenize with `words` in
 * its message and no output left. */
static void refused(const char *name, const char *edit, const char *words) {
  const char *tj = edited(name, edit), *log = path_in("bad.log"), *out = path_in("bad.tok");
  int rc = tokenize(log, tj, NULL, out, FORTUNES);
  char buf[4096] = {0};
  FILE *f = fopen(log, "rb");
  assert_non_null(f);
  buf[fread(buf, 1, sizeof buf - 1, f)] = '\0';
  fclose(f);
  if (rc != 1 || !strstr(buf, words)) fail_msg("%s: exit %d, \"%s\" lacks \"%s\"", name, rc, buf, words);
  assert_int_not_equal(access(out, F_OK), 0);
}

static void test_bad_tokenizers(void **state) {
  (void)state;
  if (!have_python) SKIP_CASE("no python3 with tokenizers, or no " FORTUNES);
  refused("truncated.json", "d=json.dumps(d); d=d[:len(d)//2]", "not valid JSON at line 1");
  refused("vocab_array.json", "d['model']['vocab']=[1,2]", "model.vocab is an array, not an object");
  refused("id_string.json", "d['model']['vocab']['a']='x'", "the id of vocabulary entry a is not a token id");
  refused("unknown_merge.json", "d['model']['merges'][5]='zzzq \\u0120'", "names \"zzzq\", which is not in");
  refused("bad_merge.json", "d['model']['merges'][3]='a'", "merge 3 is not two tokens");
  refused("made_unknown.json", "del d['model']['vocab'][d['model']['merges'][0].replace(' ','')]",
          "makes a token that is not in the vocabulary");
  refused("wordpiece.json", "d['model']['type']='WordPiece'", "the model is WordPiece, not BPE");
  refused("no_model.json", "del d['model']", "model is missing");
  refused("normalizer.json", "d['normalizer']={'type':'NFC'}", "a normalizer is set");
  refused("prefix.json",
          "d['pre_tokenizer']={'type':'Sequence','pretokenizers':[{'type':'Split','pattern':{'Regex':"
          "json.load(open(sys.argv[1].replace('gpt2','llama3')))['pre_tokenizer']['pretokenizers'][0]['pattern']"
          "['Regex']},'behavior':'Isolated','invert':False},{'type':'ByteLevel','use_regex':False,"
          "'add_prefix_space':True}]}",
          "has add_prefix_space true");
  refused("pattern.json",
          "d['pre_tokenizer']={'type':'Sequence','pretokenizers':[{'type':'Split','pattern':{'Regex':'x'},"
          "'behavior':'Isolated','invert':False},{'type':'ByteLevel','use_regex':False}]}",
          "neither GPT-2's nor Llama 3's");
  refused("lstrip.json", "d['added_tokens'][0]['lstrip']=True", "has lstrip set");
  refused("deep.json", "d='['*100000", "nested too deeply");
  char log[256];
  snprintf(log, sizeof log, "%s", path_in("missing.log"));
  assert_int_equal(tokenize(log, path_in("absent.json"), NULL, path_in("x.tok"), FORTUNES), 1);
}

static bool file_has(const char *path, const char *words) {
  char buf[8192] = {0};
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  buf[fread(buf, 1, sizeof buf - 1, f)] = '\0';
  fclose(f);
  return strstr(buf, words) != NULL;
}

/* The flag's usage: named in --help with its end-of-text token; misuse is
 * exit 2. */
static void test_cli(void **state) {
  (void)state;
  if (!getenv("GT_BUILD_DIR")) SKIP_CASE("GT_BUILD_DIR is not set (run under ctest)");
  const char *log = path_in("cli.log");
  char *help[] = {(char *)tool(), "--help", NULL};
  assert_int_equal(run(log, help, 60), 0);
  assert_true(file_has(log, "--tokenizer FILE"));
  assert_true(file_has(log, "<|endoftext|>"));
  char *bare[] = {(char *)tool(), "--tokenizer", NULL};
  assert_int_equal(run(log, bare, 60), 2);
  assert_true(file_has(log, "--tokenizer needs a tokenizer.json"));
  char *mixed[] = {(char *)tool(), "--tokenizer", "t.json", "--doc-sep", "x", "o.tok", "in", NULL};
  assert_int_equal(run(log, mixed, 60), 2);
  assert_true(file_has(log, "does not go with --tokenizer"));
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(p);
}

/* Trains the two vocabularies every case uses, once. */
static int setup(void **state) {
  (void)state;
  strcpy(dir, "/tmp/gt_test_bpe_XXXXXX");
  if (!mkdtemp(dir)) return -1;
  if (!getenv("GT_BUILD_DIR") || access(FORTUNES, R_OK) != 0) return 0;
  char *probe[] = {GT_PYTHON3, "-c", "import tokenizers", NULL};
  if (access(GT_PYTHON3, X_OK) != 0 || run(path_in("probe.log"), probe, 120) != 0) return 0;
  const char *log = path_in("train.log");
  if (python(log, "tools/train_bpe.py", "--vocab-size=2000", path_in("gpt2.json"), FORTUNES, NULL, NULL) != 0 ||
      python(log, "tools/train_bpe.py", "--kind=llama3", "--vocab-size=2000", path_in("llama3.json"), FORTUNES, NULL) !=
          0) {
    show_log(log);
    return -1;
  }
  have_python = true;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  return nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_json),          cmocka_unit_test(test_ignore_merges),   cmocka_unit_test(test_cli),
      cmocka_unit_test(test_gpt2_fortunes), cmocka_unit_test(test_llama3_fortunes), cmocka_unit_test(test_gpt2_layout),
      cmocka_unit_test(test_random_bytes),  cmocka_unit_test(test_added_tokens),    cmocka_unit_test(test_whole_files),
      cmocka_unit_test(test_buffer_ends),   cmocka_unit_test(test_bad_tokenizers),
  };
  return gt_test_exit(cmocka_run_group_tests(tests, setup, teardown));
}
