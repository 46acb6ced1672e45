/* giant-plot: one sheet that shows a training job, from its metrics files.
 *
 *   giant-plot METRICS.jsonl... -o run.png [--svg run.svg] [--title T]
 *              [--size WxH]
 *
 * The sheet (docs/observability.md): loss against step, train and eval;
 * tokens/s and MFU; each rank's compute time per step as a heat strip; and
 * on every panel a labelled mark where a fault was seen, a rank flagged
 * slow, the ladder acted, or the job reshaped or resumed. Drawn by
 * gnuplot (Debian: gnuplot-nox).
 * Exit status: 0 drawn, 1 failed (bad input, no gnuplot), 2 bad usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/plot/plot_data.h"
#include "tools/plot/plot_sheet.h"

static int usage(FILE *f, int rc) {
  fprintf(f,
          "usage: giant-plot METRICS.jsonl... -o OUT.png [--svg OUT.svg] [--title TEXT] [--size WxH]\n"
          "  Draws one sheet of a training job from the metrics files its ranks wrote\n"
          "  (--metrics FILE; with a %%r, one file a rank: give them all): loss (train and\n"
          "  eval), tokens/s and MFU, each rank's compute time per step, and the job's\n"
          "  faults, slow ranks, ladder decisions, reshapes and resumes as marks.\n"
          "  Lines of restarts appended to one file are drawn in file order, a later\n"
          "  value at a step replacing an earlier one. Needs gnuplot (gnuplot-nox).\n"
          "  --size defaults to 1600x1200 pixels.\n");
  return rc;
}

int main(int argc, char **argv) {
  plot_sheet_opts o = {.title = "Giant training run", .width = 1600, .height = 1200};
  const char **inputs = calloc((size_t)argc, sizeof *inputs);
  int ninputs = 0;
  if (!inputs) return 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int has_value = i + 1 < argc;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      free(inputs);
      return usage(stdout, 0);
    } else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && has_value) {
      o.png = argv[++i];
    } else if (!strcmp(a, "--svg") && has_value) {
      o.svg = argv[++i];
    } else if (!strcmp(a, "--title") && has_value) {
      o.title = argv[++i];
    } else if (!strcmp(a, "--size") && has_value) {
      char end;
      if (sscanf(argv[++i], "%dx%d%c", &o.width, &o.height, &end) != 2 || o.width < 400 || o.height < 300 ||
          o.width > 10000 || o.height > 10000) {
        fprintf(stderr, "giant-plot: --size %s: want WIDTHxHEIGHT in pixels, 400x300 to 10000x10000\n", argv[i]);
        free(inputs);
        return 2;
      }
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "giant-plot: %s: %s\n", a,
              !strcmp(a, "-o") || !strcmp(a, "--svg") || !strcmp(a, "--title") || !strcmp(a, "--size")
                  ? "needs a value"
                  : "unknown option");
      free(inputs);
      return usage(stderr, 2);
    } else {
      inputs[ninputs++] = a;
    }
  }
  if (!ninputs || !o.png) {
    fprintf(stderr, "giant-plot: %s\n", !ninputs ? "no metrics file given" : "no output given (-o OUT.png)");
    free(inputs);
    return usage(stderr, 2);
  }
  /* The input is judged first: its faults are the user's to fix whether
   * or not gnuplot is here. */
  plot_data d = PLOT_DATA_INIT;
  int rc = 0;
  for (int i = 0; i < ninputs && !rc; i++) rc = plot_read_file(&d, inputs[i]) ? 1 : 0;
  if (!rc && plot_finish(&d, ninputs == 1 ? inputs[0] : "the files given")) rc = 1;
  char buf[4096];
  const char *gnuplot = rc ? NULL : plot_find_gnuplot(buf, sizeof buf);
  if (!rc && (!gnuplot || plot_sheet(&d, &o, gnuplot))) rc = 1;
  if (!rc)
    fprintf(stderr, "giant-plot: drew %s%s%s (%zu step lines, %zu marks)\n", o.png, o.svg ? " and " : "",
            o.svg ? o.svg : "", d.step_lines, d.nmarks);
  plot_data_free(&d);
  free(inputs);
  return rc;
}
