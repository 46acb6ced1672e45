/* giant-tokenize: turns text files into one token file, of bytes or of a
 * byte-level BPE vocabulary.
 *
 *   giant-tokenize [--tokenizer tokenizer.json] [--records MODE]
 *                  [--doc-sep LINE | --no-doc-sep] OUT.tok INPUT...
 *
 * An INPUT directory stands for its regular files, sorted by name. The
 * text is cut into records, each a document of the token file: by fortune
 * files' "%" lines (the default; a directory's fortune index files, *.dat
 * and *.u8, left out), paragraphs, whole files or lines (--records).
 * --doc-sep and --no-doc-sep change the fortune reader's separator line.
 * --tokenizer encodes with a byte-level BPE vocabulary (Hugging Face
 * tokenizers' tokenizer.json) instead of bytes.
 * The format is described in docs/token-format.md.
 * Exit status: 0 done, 1 failed, 2 bad usage.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "giant/data.h"
#include "giant/log.h"

static int usage(FILE *f, int rc) {
  fprintf(f,
          "usage: giant-tokenize [--tokenizer FILE] [--records MODE] [--doc-sep LINE | --no-doc-sep]\n"
          "                      OUT.tok INPUT...\n"
          "  Writes the byte-level tokens (ids 0..255, document separator 256) of the\n"
          "  INPUT files to OUT.tok, each record of the text one document. An INPUT\n"
          "  directory means every regular file in it, sorted by name. Each file ends\n"
          "  a record.\n"
          "  --tokenizer FILE  encode with the byte-level BPE vocabulary in FILE, a\n"
          "                  Hugging Face tokenizers tokenizer.json of GPT-2's or Llama 3's\n"
          "                  kind (tools/train_bpe.py makes one). Records are then ended by\n"
          "                  its end-of-text token: <|endoftext|>, else <|end_of_text|>,\n"
          "                  else </s> (none if it has none of them). Invalid UTF-8 is\n"
          "                  read as U+FFFD, as Python's errors=\"replace\" does.\n"
          "  --records MODE  how the text is cut into records:\n"
          "                    fortune    a line reading exactly \"%%\" ends one, and a\n"
          "                               directory's fortune index files (*.dat, *.u8)\n"
          "                               are left out (the default)\n"
          "                    paragraph  one or more empty lines end one\n"
          "                    file       each file is one\n"
          "                    line       each line is one; empty lines give none\n"
          "  --doc-sep LINE  fortune records ended by a line reading exactly LINE\n"
          "                  instead of \"%%\"\n"
          "  --no-doc-sep    fortune files without separator lines: each file is one\n"
          "                  record (index files still left out)\n");
  return rc;
}

/* The progress bar, on a terminal only, redrawn at most ten times a second. */
typedef struct progress_state {
  double t0, last;
  bool shown;
} progress_state;

static void progress(void *user, uint64_t done, uint64_t total) {
  progress_state *ps = user;
  double now = gt_now();
  if (now - ps->last < 0.1 && done < total) return; /* the last one always shows */
  ps->last = now;
  ps->shown = true;
  double frac = total ? (double)done / (double)total : 0;
  if (frac > 1) frac = 1;
  int filled = (int)(frac * 30);
  char bar[31];
  for (int k = 0; k < 30; k++) bar[k] = k < filled ? '#' : '.';
  bar[30] = '\0';
  double mb = (double)done / 1e6, secs = now - ps->t0;
  fprintf(stderr, "\rgiant-tokenize: [%s] %3.0f%% %.1f MB, %.1f MB/s", bar, frac * 100, mb, secs > 0 ? mb / secs : 0);
  fflush(stderr);
}

int main(int argc, char **argv) {
  gt_text_options opts = {.records = GT_RECORDS_FORTUNE};
  const char *records = NULL;  /* --records, as given */
  const char *sep_flag = NULL; /* --doc-sep or --no-doc-sep, as given */
  const char *sep = "%";
  int i = 1;
  for (; i < argc && argv[i][0] == '-' && argv[i][1] != '\0'; i++) {
    if (strcmp(argv[i], "--") == 0) {
      i++;
      break;
    } else if (strcmp(argv[i], "--records") == 0) {
      if (i + 1 >= argc) {
        fprintf(stderr, "giant-tokenize: --records needs a MODE (fortune, paragraph, file or line)\n");
        return usage(stderr, 2);
      }
      records = argv[++i];
      if (gt_text_records_parse(records, &opts.records) != GT_OK || opts.records == GT_RECORDS_SEPARATOR) {
        fprintf(stderr,
                "giant-tokenize: --records: unknown mode '%s': use fortune, paragraph, file or line "
                "(or --doc-sep LINE for a separator line of your own)\n",
                records);
        return 2;
      }
    } else if (strcmp(argv[i], "--tokenizer") == 0) {
      if (i + 1 >= argc) {
        fprintf(stderr, "giant-tokenize: --tokenizer needs a tokenizer.json\n");
        return usage(stderr, 2);
      }
      opts.tokenizer = argv[++i];
    } else if (strcmp(argv[i], "--doc-sep") == 0) {
      if (i + 1 >= argc) {
        fprintf(stderr, "giant-tokenize: --doc-sep needs a LINE\n");
        return usage(stderr, 2);
      }
      sep_flag = argv[i];
      sep = argv[++i];
      if (strchr(sep, '\n')) {
        fprintf(stderr, "giant-tokenize: --doc-sep LINE must not contain a newline\n");
        return 2;
      }
    } else if (strcmp(argv[i], "--no-doc-sep") == 0) {
      sep_flag = argv[i];
      sep = NULL;
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      return usage(stdout, 0);
    } else {
      fprintf(stderr, "giant-tokenize: unknown flag %s\n", argv[i]);
      return usage(stderr, 2);
    }
  }
  if (sep_flag && opts.tokenizer) {
    fprintf(stderr, "giant-tokenize: %s does not go with --tokenizer (use --records)\n", sep_flag);
    return 2;
  }
  if (sep_flag && opts.records != GT_RECORDS_FORTUNE) {
    fprintf(stderr,
            "giant-tokenize: %s changes the fortune reader's separator line; it does not go with "
            "--records %s\n",
            sep_flag, records);
    return 2;
  }
  if (argc - i < 2) {
    fprintf(stderr, "giant-tokenize: need an output file and at least one input\n");
    return usage(stderr, 2);
  }
  const char *out = argv[i];
  double t0 = gt_now();
  uint64_t n = 0;
  const char *const *inputs = (const char *const *)(argv + i + 1);
  progress_state ps = {.t0 = t0};
  if (isatty(STDERR_FILENO)) {
    opts.progress = progress;
    opts.progress_user = &ps;
  }
  /* The fortune reader with its own separator line is the older entry,
   * gt_tokenize_paths; with "%" both give the same bytes. */
  gt_status s = sep_flag ? gt_tokenize_paths(inputs, argc - i - 1, sep, out, &n)
                         : gt_tokenize_text(inputs, argc - i - 1, &opts, out, &n);
  if (ps.shown) fputc('\n', stderr);
  if (s != GT_OK) {
    fprintf(stderr, "giant-tokenize: %s\n", gt_last_error());
    return 1;
  }
  struct stat st;
  long long bytes = stat(out, &st) == 0 ? (long long)st.st_size : -1;
  printf("giant-tokenize: wrote %s: %llu tokens (%lld bytes) in %.3f s\n", out, (unsigned long long)n, bytes,
         gt_now() - t0);
  if (n < 2) fprintf(stderr, "giant-tokenize: warning: %s holds fewer than 2 tokens; it cannot be trained on\n", out);
  return 0;
}
