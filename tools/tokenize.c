/* giant-tokenize: turns text files into one byte-level token file.
 *
 *   giant-tokenize [--doc-sep LINE | --no-doc-sep] OUT.tok INPUT...
 *
 * An INPUT directory stands for its regular files, sorted by name, leaving
 * out fortune index files (*.dat, *.u8). Each file ends a document; inside a
 * file a line reading exactly LINE ("%" by default, as in fortune files)
 * ends one too. The format is described in docs/token-format.md.
 * Exit status: 0 done, 1 failed, 2 bad usage.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "giant/data.h"
#include "giant/log.h"

static int usage(FILE *f, int rc) {
  fprintf(f,
          "usage: giant-tokenize [--doc-sep LINE | --no-doc-sep] OUT.tok INPUT...\n"
          "  Writes the byte-level tokens (ids 0..255, document separator 256) of the\n"
          "  INPUT files to OUT.tok. An INPUT directory means every regular file in it\n"
          "  not ending in .dat or .u8, sorted by name. Each file ends a document.\n"
          "  --doc-sep LINE  a line reading exactly LINE ends a document (default \"%%\")\n"
          "  --no-doc-sep    no separator lines: each file is one document\n");
  return rc;
}

int main(int argc, char **argv) {
  const char *sep = "%";
  int i = 1;
  for (; i < argc && argv[i][0] == '-' && argv[i][1] != '\0'; i++) {
    if (strcmp(argv[i], "--") == 0) {
      i++;
      break;
    } else if (strcmp(argv[i], "--doc-sep") == 0) {
      if (i + 1 >= argc) {
        fprintf(stderr, "giant-tokenize: --doc-sep needs a LINE\n");
        return usage(stderr, 2);
      }
      sep = argv[++i];
      if (strchr(sep, '\n')) {
        fprintf(stderr, "giant-tokenize: --doc-sep LINE must not contain a newline\n");
        return 2;
      }
    } else if (strcmp(argv[i], "--no-doc-sep") == 0) {
      sep = NULL;
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      return usage(stdout, 0);
    } else {
      fprintf(stderr, "giant-tokenize: unknown flag %s\n", argv[i]);
      return usage(stderr, 2);
    }
  }
  if (argc - i < 2) {
    fprintf(stderr, "giant-tokenize: need an output file and at least one input\n");
    return usage(stderr, 2);
  }
  const char *out = argv[i];
  double t0 = gt_now();
  uint64_t n = 0;
  if (gt_tokenize_paths((const char *const *)(argv + i + 1), argc - i - 1, sep, out, &n) != GT_OK) {
    fprintf(stderr, "giant-tokenize: %s\n", gt_last_error());
    return 1;
  }
  struct stat st;
  long long bytes = stat(out, &st) == 0 ? (long long)st.st_size : -1;
  printf("giant-tokenize: wrote %s: %llu tokens (%lld bytes) in %.3f s\n", out,
         (unsigned long long)n, bytes, gt_now() - t0);
  if (n < 2)
    fprintf(stderr, "giant-tokenize: warning: %s holds fewer than 2 tokens; it cannot be trained on\n",
            out);
  return 0;
}
