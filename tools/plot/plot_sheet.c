/* The sheet, drawn by gnuplot (docs/observability.md says why gnuplot):
 * three panels, one above the other on one step axis (loss; tokens/s and
 * MFU; each rank's compute as a heat strip), the job's events as labelled
 * vertical marks across all three. The script and its data go to a
 * scratch directory; gnuplot draws into it and the pictures are copied to
 * where they were asked for, so a failed drawing leaves an older picture
 * there untouched. */
#include "tools/plot/plot_sheet.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

const char *plot_find_gnuplot(char *buf, size_t n) {
  const char *env = getenv("GIANT_GNUPLOT");
  if (env && *env) {
    if (access(env, X_OK) == 0) return env;
    fprintf(stderr, "giant-plot: GIANT_GNUPLOT=%s is not an executable: %s\n", env, strerror(errno));
    return NULL;
  }
  const char *path = getenv("PATH");
  for (const char *p = path ? path : ""; *p;) {
    const char *end = strchr(p, ':');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len && len + sizeof "/gnuplot" <= n) {
      memcpy(buf, p, len);
      memcpy(buf + len, "/gnuplot", sizeof "/gnuplot");
      if (access(buf, X_OK) == 0) return buf;
    }
    p += len + (end != NULL);
  }
  fprintf(stderr,
          "giant-plot: gnuplot not found on PATH; giant-plot draws with it: install it (Debian/Ubuntu: apt-get install "
          "gnuplot-nox) or name it in GIANT_GNUPLOT\n");
  return NULL;
}

/* s as a gnuplot single-quoted string: ' doubled, control bytes (a
 * newline would end the command) turned to spaces. */
static void put_str(FILE *f, const char *s) {
  fputc('\'', f);
  for (; *s; s++) {
    if (*s == '\'') fputc('\'', f);
    fputc((unsigned char)*s < 0x20 ? ' ' : *s, f);
  }
  fputc('\'', f);
}

static int write_series(const char *dir, const char *name, const plot_series *s, int with_rank) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  for (size_t i = 0; i < s->n; i++) {
    if (with_rank)
      fprintf(f, "%d %d %.9g\n", s->p[i].step, s->p[i].rank, s->p[i].v);
    else
      fprintf(f, "%d %.9g\n", s->p[i].step, s->p[i].v);
  }
  return fclose(f);
}

static const char *mark_colour(plot_mark_kind k) {
  switch (k) {
    case PLOT_FAULT: return "#d62728";
    case PLOT_FLAGGED: return "#e08000";
    case PLOT_LADDER: return "#8e44ad";
    case PLOT_RESHAPE: return "#0b8a8a";
    case PLOT_RESUME: return "#2ca02c";
    default: return "#555555";
  }
}

/* The marks, as gnuplot arrows and labels in every panel: one line a
 * step, a label an event. */
static void write_marks(FILE *f, const plot_data *d) {
  int arrow = 1, label = 1;
  for (size_t i = 0; i < d->nmarks;) {
    int step = d->marks[i].step;
    fprintf(f, "set arrow %d from %d, graph 0 to %d, graph 1 nohead lw 2 dt 2 lc rgb '%s' front\n", arrow++, step, step,
            mark_colour(d->marks[i].kind));
    /* Each event at the step a label of its own colour, side by side left
     * of the line, on a white box: readable over the heat strip. */
    for (int k = 0; i < d->nmarks && d->marks[i].step == step; i++, k++) {
      fprintf(f, "set label %d ", label++);
      put_str(f, d->marks[i].label);
      fprintf(f, " at %d, graph 0.97 right rotate by 90 offset character %.1f,0 font ',10' tc rgb '%s' boxed front\n",
              step, -1.2 - 2.0 * k, mark_colour(d->marks[i].kind));
    }
  }
}

static void range_of(const plot_series *s, int *lo, int *hi, int *max_rank) {
  for (size_t i = 0; i < s->n; i++) {
    if (s->p[i].step < *lo) *lo = s->p[i].step;
    if (s->p[i].step > *hi) *hi = s->p[i].step;
    if (max_rank && s->p[i].rank > *max_rank) *max_rank = s->p[i].rank;
  }
}

/* The heat strip's boxes are as wide as the least gap between its steps
 * (the monitor may gather every few steps). */
static double heat_half_width(const plot_series *s) {
  int gap = 0;
  for (size_t i = 1; i < s->n; i++)
    if (s->p[i].step > s->p[i - 1].step && (!gap || s->p[i].step - s->p[i - 1].step < gap))
      gap = s->p[i].step - s->p[i - 1].step;
  return gap ? gap / 2.0 : 0.5;
}

static void write_script(FILE *f, const plot_data *d, const plot_sheet_opts *o, const char *dir) {
  int lo = d->first_step, hi = d->last_step, max_rank = 0;
  range_of(&d->loss, &lo, &hi, NULL);
  range_of(&d->eval, &lo, &hi, NULL);
  range_of(d->heat, &lo, &hi, &max_rank);
  for (size_t i = 0; i < d->nmarks; i++) {
    if (d->marks[i].step < lo) lo = d->marks[i].step;
    if (d->marks[i].step > hi) hi = d->marks[i].step;
  }
  if (hi <= lo) hi = lo + 1;
  fprintf(f,
          "set termoption noenhanced\n"
          "set multiplot layout 3,1 title ");
  put_str(f, o->title);
  fprintf(f,
          " font ',18'\n"
          "set lmargin 13\nset rmargin 16\n"
          "set xrange [%d:%d]\n"
          "set grid xtics ytics lc rgb '#dddddd'\n"
          "set key top right box opaque\n"
          "set border lc rgb '#444444'\n"
          "set title font ',14'\n"
          "set style textbox opaque noborder margins 0.5,0.5\n",
          lo, hi);
  write_marks(f, d);
  /* A panel whose series are all empty says so in words: gnuplot will not
   * plot a file without points. */
  const char *note =
      "set label 998 '%s' at graph 0.5, graph 0.5 center front\nset yrange [0:1]\nunset key\n"
      "plot 2 with points notitle\nunset label 998\nset yrange [*:*]\nset key\n";
  fprintf(f, "set title 'Loss'\nset ylabel 'loss'\n");
  if (d->loss.n || d->eval.n) {
    fprintf(f, "plot ");
    if (d->loss.n) fprintf(f, "'%s/loss.dat' using 1:2 with lines lw 2 lc rgb '#1f4e9c' title 'train'", dir);
    if (d->eval.n)
      fprintf(f, "%s'%s/eval.dat' using 1:2 with linespoints pt 7 ps 1.2 lw 2 lc rgb '#d6007e' title 'eval'",
              d->loss.n ? ", " : "", dir);
    fprintf(f, "\n");
  } else {
    fprintf(f, note, "no finite loss in these metrics");
  }
  /* tokens/s on the left axis, MFU on the right; MFU alone takes the left. */
  fprintf(f, "set title 'Throughput'\nset ylabel '%s'\nset yrange [0:*]\n", d->tokens_per_s.n ? "tokens/s" : "MFU %");
  if (d->tokens_per_s.n && d->mfu.n)
    fprintf(f,
            "set y2label 'MFU %%'\nset ytics nomirror\nset y2tics\nset y2range [0:*]\n"
            "plot '%s/tps.dat' using 1:2 with lines lw 2 lc rgb '#1f4e9c' title 'tokens/s' axes x1y1, "
            "'%s/mfu.dat' using 1:2 with lines lw 2 lc rgb '#8c564b' title 'MFU %%' axes x1y2\n"
            "unset y2tics\nunset y2label\nset ytics mirror\n",
            dir, dir);
  else if (d->tokens_per_s.n || d->mfu.n)
    fprintf(f, "plot '%s/%s' using 1:2 with lines lw 2 lc rgb '#1f4e9c' title '%s'\n", dir,
            d->tokens_per_s.n ? "tps.dat" : "mfu.dat", d->tokens_per_s.n ? "tokens/s" : "MFU %");
  else
    fprintf(f, note, "no tokens/s or MFU in these metrics");
  fprintf(f,
          "set title \"Each rank's compute time per step (from %s)\"\nset ylabel 'rank'\nset xlabel 'step'\n"
          "set yrange [-0.5:%d.5]\nset ytics %d\nset grid noytics\n"
          "set palette defined (0 '#fff7bc', 0.4 '#fec44f', 0.7 '#ec7014', 1 '#662506')\n"
          "set cblabel 'compute s'\nunset key\n"
          /* In the right margin, so that the strip is as wide as the panels above. */
          "set colorbox vertical user origin graph 1.02, graph 0 size graph 0.02, graph 1\n",
          d->heat_source, max_rank, max_rank < 16 ? 1 : max_rank / 8);
  if (d->heat->n)
    fprintf(f, "plot '%s/heat.dat' using 1:2:(%g):(0.5):3 with boxxyerror fill solid 1.0 noborder lc palette\n", dir,
            heat_half_width(d->heat));
  else
    fprintf(f, note, "no per-rank timing in these metrics");
  fprintf(f, "unset multiplot\n");
}

/* Copies the drawn file to where it was asked for. */
static int copy_out(const char *from, const char *to) {
  FILE *in = fopen(from, "rb");
  if (!in) {
    fprintf(stderr, "giant-plot: gnuplot wrote no %s (its messages, if any, are above)\n", to);
    return -1;
  }
  FILE *out = fopen(to, "wb");
  if (!out) {
    fprintf(stderr, "giant-plot: cannot write %s: %s\n", to, strerror(errno));
    fclose(in);
    return -1;
  }
  char buf[65536];
  size_t n, total = 0;
  int rc = 0;
  while ((n = fread(buf, 1, sizeof buf, in)) > 0) {
    total += n;
    if (fwrite(buf, 1, n, out) != n) rc = -1;
  }
  if (ferror(in)) rc = -1;
  fclose(in);
  if (fclose(out) != 0) rc = -1;
  if (rc) fprintf(stderr, "giant-plot: writing %s failed: %s\n", to, strerror(errno));
  if (!rc && !total) {
    fprintf(stderr, "giant-plot: gnuplot drew an empty %s (its messages, if any, are above)\n", to);
    rc = -1;
  }
  return rc;
}

static int run_gnuplot(const char *gnuplot, const char *script) {
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "giant-plot: cannot start gnuplot: %s\n", strerror(errno));
    return -1;
  }
  if (pid == 0) {
    dup2(2, 1); /* its chatter, if any, with ours on stderr */
    execl(gnuplot, "gnuplot", script, (char *)NULL);
    fprintf(stderr, "giant-plot: cannot run %s: %s\n", gnuplot, strerror(errno));
    _exit(127);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
  fprintf(stderr, "giant-plot: gnuplot failed (%s %d) drawing the sheet; its messages are above\n",
          WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
  return -1;
}

static const char *const scratch_files[] = {"loss.dat", "eval.dat", "tps.dat",   "mfu.dat",  "heat.dat",
                                            "body.gp",  "sheet.gp", "sheet.png", "sheet.svg"};

int plot_sheet(const plot_data *d, const plot_sheet_opts *o, const char *gnuplot) {
  char dir[] = "/tmp/giant-plot-XXXXXX", path[512];
  if (!mkdtemp(dir)) {
    fprintf(stderr, "giant-plot: cannot make a scratch directory in /tmp: %s\n", strerror(errno));
    return -1;
  }
  int rc = -1;
  if (write_series(dir, "loss.dat", &d->loss, 0) || write_series(dir, "eval.dat", &d->eval, 0) ||
      write_series(dir, "tps.dat", &d->tokens_per_s, 0) || write_series(dir, "mfu.dat", &d->mfu, 0) ||
      write_series(dir, "heat.dat", d->heat, 1)) {
    fprintf(stderr, "giant-plot: cannot write the data for gnuplot in %s: %s\n", dir, strerror(errno));
    goto out;
  }
  /* body.gp draws the sheet; sheet.gp loads it once a picture. */
  snprintf(path, sizeof path, "%s/body.gp", dir);
  FILE *f = fopen(path, "w");
  if (!f) goto io;
  write_script(f, d, o, dir);
  if (fclose(f)) goto io;
  snprintf(path, sizeof path, "%s/sheet.gp", dir);
  if (!(f = fopen(path, "w"))) goto io;
  fprintf(f,
          "set terminal pngcairo size %d,%d font 'Sans,11' background '#ffffff'\n"
          "set output '%s/sheet.png'\nload '%s/body.gp'\nset output\n",
          o->width, o->height, dir, dir);
  if (o->svg)
    fprintf(f,
            "reset\nset terminal svg size %d,%d font 'Sans,11' background '#ffffff'\n"
            "set output '%s/sheet.svg'\nload '%s/body.gp'\nset output\n",
            o->width, o->height, dir, dir);
  if (fclose(f)) goto io;
  if (run_gnuplot(gnuplot, path)) goto out;
  snprintf(path, sizeof path, "%s/sheet.png", dir);
  if (copy_out(path, o->png)) goto out;
  snprintf(path, sizeof path, "%s/sheet.svg", dir);
  if (o->svg && copy_out(path, o->svg)) goto out;
  rc = 0;
  goto out;
io:
  fprintf(stderr, "giant-plot: cannot write gnuplot's script in %s: %s\n", dir, strerror(errno));
out:
  for (size_t i = 0; i < sizeof scratch_files / sizeof scratch_files[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, scratch_files[i]);
    unlink(path);
  }
  rmdir(dir);
  return rc;
}
