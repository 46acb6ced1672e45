/* giant-ckpt: looks at checkpoints (docs/checkpoint-format.md).
 *
 *   giant-ckpt ls DIR            committed checkpoints: step, layout, size
 *   giant-ckpt verify PATH       every slice's SHA-256
 *   giant-ckpt convert PATH OUT  one file in the single-process layout
 *   giant-ckpt diff A B          largest relative difference per tensor
 *   giant-ckpt export --format safetensors [--names hf-gpt2|hf-llama --heads NH] PATH OUT
 *                                the parameters as OUT/model.safetensors
 *
 * PATH is a step directory, or a checkpoint root (its newest committed
 * checkpoint). Exit status: 0 done (verify: every hash good), 1 failed,
 * 2 bad usage.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "giant/ckpt.h"

static int usage(FILE *f, int rc) {
  fprintf(f,
          "usage: giant-ckpt ls DIR | verify PATH | convert PATH OUT | diff A B |\n"
          "       export --format safetensors [--names giant|hf-gpt2|hf-llama] [--heads NH] PATH OUT\n"
          "  ls       the committed checkpoints under DIR, newest first: step, layout, tensors, bytes\n"
          "  verify   reads every slice of PATH and checks its SHA-256\n"
          "  convert  writes PATH as one file OUT in the single-process layout, for export\n"
          "  diff     the largest relative difference of every tensor of A and B\n"
          "  export   writes PATH's parameters to the directory OUT: model.safetensors (fp32) under\n"
          "           Giant's names (giant, the default) or Hugging Face's GPT2LMHeadModel's (hf-gpt2)\n"
          "           or LlamaForCausalLM's (hf-llama), both with config.json; --heads gives the\n"
          "           model's (query) head count\n"
          "PATH is a step directory (DIR/step-00001200) or a root DIR (its newest committed one).\n");
  return rc;
}

static int fail(const char *what) {
  fprintf(stderr, "giant-ckpt: %s: %s\n", what, gt_last_error());
  return 1;
}

/* A step directory, or the newest committed checkpoint under a root. */
static int resolve(const char *path, char *out, size_t cap) {
  char manifest[4200];
  struct stat st;
  snprintf(manifest, sizeof manifest, "%s/MANIFEST", path);
  if (stat(manifest, &st) == 0) {
    snprintf(out, cap, "%s", path);
    return 0;
  }
  int step, n;
  if (gt_ckpt_list(path, &step, 1, &n) != GT_OK) return fail(path);
  if (n == 0) {
    fprintf(stderr, "giant-ckpt: %s holds no committed checkpoint (no MANIFEST, no step-*/MANIFEST)\n", path);
    return 1;
  }
  snprintf(out, cap, "%s/step-%08d", path, step);
  return 0;
}

static void describe(const char *path, const gt_ckpt_summary *s) {
  printf("%-40s step %8d  dp=%d,tp=%d,pp=%d%s  %d tensors in %d slices, %d shard files, %.2f MiB\n", path, s->step,
         s->layout.dp, s->layout.tp, s->layout.pp,
         s->zero == 3   ? " ZeRO-3"
         : s->zero == 2 ? " ZeRO-2"
         : s->zero1     ? " ZeRO-1"
                        : "",
         s->tensors, s->slices, s->files, (double)s->bytes / (1 << 20));
}

static int cmd_ls(const char *root) {
  int steps[4096], n;
  if (gt_ckpt_list(root, steps, 4096, &n) != GT_OK) return fail(root);
  if (n == 0) printf("%s: no committed checkpoint\n", root);
  for (int i = 0; i < n && i < 4096; i++) {
    char dir[4200];
    gt_ckpt_summary s;
    snprintf(dir, sizeof dir, "%s/step-%08d", root, steps[i]);
    if (gt_ckpt_describe(dir, &s) != GT_OK) {
      printf("%-40s unreadable: %s\n", dir, gt_last_error());
      continue;
    }
    describe(dir, &s);
  }
  return 0;
}

/* export --format safetensors [--names N] [--heads H] PATH OUT */
static int cmd_export(int argc, char **argv) {
  const char *format = NULL, *names = "giant", *args[2];
  int heads = 0, nargs = 0;
  for (int i = 2; i < argc; i++) {
    bool value = i + 1 < argc;
    if (!strcmp(argv[i], "--format") && value) {
      format = argv[++i];
    } else if (!strcmp(argv[i], "--names") && value) {
      names = argv[++i];
    } else if (!strcmp(argv[i], "--heads") && value) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (*end || v < 1 || v > 1 << 20) {
        fprintf(stderr, "giant-ckpt: --heads needs a count of 1 or more, got '%s'\n", argv[i]);
        return 2;
      }
      heads = (int)v;
    } else if (argv[i][0] == '-' || nargs == 2) {
      return usage(stderr, 2);
    } else {
      args[nargs++] = argv[i];
    }
  }
  if (nargs != 2 || !format) return usage(stderr, 2);
  if (strcmp(format, "safetensors")) {
    fprintf(stderr, "giant-ckpt: unknown export format '%s' (safetensors is the one there is)\n", format);
    return 2;
  }
  char a[4200];
  if (resolve(args[0], a, sizeof a)) return 1;
  if (gt_ckpt_export_safetensors(a, names, heads, args[1]) != GT_OK) return fail("exporting");
  printf("%s -> %s/model.safetensors (%s names)\n", a, args[1], names);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage(stderr, 2);
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) return usage(stdout, 0);
  char a[4200], b[4200];
  if (!strcmp(cmd, "ls") && argc == 3) return cmd_ls(argv[2]);
  if (!strcmp(cmd, "verify") && argc == 3) {
    if (resolve(argv[2], a, sizeof a)) return 1;
    int bad;
    gt_status s = gt_ckpt_verify(a, stderr, &bad);
    printf("%s: %s\n", a, s == GT_OK ? "every hash good" : "DAMAGED");
    if (s != GT_OK) printf("%d bad slice(s)\n", bad);
    return s == GT_OK ? 0 : 1;
  }
  if (!strcmp(cmd, "convert") && argc == 4) {
    if (resolve(argv[2], a, sizeof a)) return 1;
    if (gt_ckpt_export(a, argv[3]) != GT_OK) return fail("converting");
    printf("%s -> %s\n", a, argv[3]);
    return 0;
  }
  if (!strcmp(cmd, "export")) return cmd_export(argc, argv);
  if (!strcmp(cmd, "diff") && argc == 4) {
    if (resolve(argv[2], a, sizeof a) || resolve(argv[3], b, sizeof b)) return 1;
    double worst;
    if (gt_ckpt_diff(a, b, stdout, &worst) != GT_OK) return fail("comparing");
    printf("max relative difference %.3e\n", worst);
    return 0;
  }
  return usage(stderr, 2);
}
