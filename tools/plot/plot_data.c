/* Reading metrics files for giant-plot. Every line is one JSON object (a
 * step line, a fail-slow line, an event line or an evaluation line); the
 * lines of restarts appended to one file repeat steps, and a value read
 * later replaces one read earlier at its step. */
#include "tools/plot/plot_data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/data/json.h"
#include "giant/log.h"

/* Lines longer than this are not metrics lines (a step line is ~600 bytes,
 * a fail-slow line of 1024 ranks ~40 KiB). */
#define MAX_LINE (4u << 20)
/* Bounds on what a line may claim, so that bad bytes cannot make the sheet
 * absurd (a rank of 2^31 is no job's). */
#define MAX_RANK 65535
#define MAX_STEP 1000000000

static int grow(void **p, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap * 2 : 64;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * size);
  if (!q) return -1;
  *p = q;
  *cap = c;
  return 0;
}

static int add_point(plot_data *d, plot_series *s, int step, int rank, double v) {
  if (!isfinite(v)) return 0; /* a non-finite value draws nothing */
  if (grow((void **)&s->p, &s->cap, s->n + 1, sizeof *s->p)) return -1;
  s->p[s->n++] = (plot_point){.step = step, .rank = rank, .v = v, .seq = d->seq++};
  return 0;
}

static int add_mark(plot_data *d, int step, plot_mark_kind kind, int derived, const char *label) {
  for (size_t i = 0; i < d->nmarks; i++)
    if (d->marks[i].step == step && !strcmp(d->marks[i].label, label)) return 0; /* every rank's file says it */
  if (grow((void **)&d->marks, &d->cap_marks, d->nmarks + 1, sizeof *d->marks)) return -1;
  plot_mark *m = &d->marks[d->nmarks++];
  *m = (plot_mark){.step = step, .kind = kind, .derived = derived};
  snprintf(m->label, sizeof m->label, "%s", label);
  return 0;
}

static const gt_json *num(const gt_json *o, const char *key) {
  const gt_json *v = gt_json_get(o, key);
  return v && v->type == GT_JSON_NUMBER ? v : NULL;
}

/* An integer member within [lo, hi], or def when absent; -2 when present
 * but out of range or not an integer (the caller says which line). */
static int int_member(const gt_json *o, const char *key, int lo, int hi, int def, int *out) {
  const gt_json *v = gt_json_get(o, key);
  if (!v) {
    *out = def;
    return 0;
  }
  if (v->type != GT_JSON_NUMBER || v->number != floor(v->number) || v->number < lo || v->number > hi) return -2;
  *out = (int)v->number;
  return 0;
}

static double num_or_nan(const gt_json *o, const char *key) {
  const gt_json *v = num(o, key);
  return v ? v->number : NAN;
}

/* A step line: the lead rank's values are picked in plot_finish. */
static int read_step(plot_data *d, const gt_json *o, int step, int rank, int *last_step) {
  d->step_lines++;
  if (step < d->first_step) d->first_step = step;
  if (step > d->last_step) d->last_step = step;
  if (d->lead_rank < 0 || rank < d->lead_rank) d->lead_rank = rank;
  /* A step at or before the last this file's first rank wrote: a restart
   * appended to the file, resumed from a checkpoint. */
  if (last_step[0] == rank && step <= last_step[1]) {
    if (add_mark(d, step, PLOT_RESUME, 1, "restart")) return -1;
    d->nslow = 0; /* the new run's monitor starts with every rank well */
  }
  if (last_step[0] < 0) last_step[0] = rank;
  if (last_step[0] == rank) last_step[1] = step;
  double compute = num_or_nan(o, "compute_s");
  if (!(compute > 0)) compute = num_or_nan(o, "step_time_s");
  double mfu = num_or_nan(o, "mfu");
  if (add_point(d, &d->loss, step, rank, num_or_nan(o, "loss")) ||
      add_point(d, &d->tokens_per_s, step, rank, num_or_nan(o, "tokens_per_s")) ||
      add_point(d, &d->mfu, step, rank, 100.0 * mfu) || add_point(d, &d->heat_step, step, rank, compute))
    return -1;
  return 0;
}

/* Whether key ("kind:rank:peer") is held slow; sets or clears it. */
static int slow_state(plot_data *d, const char *key, int slow, int *was) {
  size_t i = 0;
  while (i < d->nslow && strcmp(d->slow[i], key)) i++;
  *was = i < d->nslow;
  if (slow && !*was) {
    if (grow((void **)&d->slow, &d->cap_slow, d->nslow + 1, sizeof *d->slow)) return -1;
    snprintf(d->slow[d->nslow++], sizeof d->slow[0], "%s", key);
  } else if (!slow && *was) {
    memmove(d->slow[i], d->slow[i + 1], (d->nslow - i - 1) * sizeof *d->slow);
    d->nslow--;
  }
  return 0;
}

/* A fail-slow line: every rank's compute, and the verdicts; a rank (or
 * link) turning slow is marked at the step it was flagged. */
static int read_failslow(plot_data *d, const gt_json *o, int step) {
  const gt_json *c = gt_json_get(o, "compute_s");
  if (c && c->type == GT_JSON_ARRAY) {
    int r = 0;
    for (const gt_json *e = c->child; e && r <= MAX_RANK; e = e->next, r++)
      if (e->type == GT_JSON_NUMBER && add_point(d, &d->heat_failslow, step, r, e->number)) return -1;
  }
  const gt_json *vs = gt_json_get(o, "verdicts");
  if (!vs || vs->type != GT_JSON_ARRAY) return 0;
  for (const gt_json *v = vs->child; v; v = v->next) {
    const gt_json *state = gt_json_get(v, "state"), *kind = gt_json_get(v, "kind");
    int rank, peer, at;
    if (!state || state->type != GT_JSON_STRING || int_member(v, "rank", 0, MAX_RANK, -1, &rank) ||
        int_member(v, "peer", -1, MAX_RANK, -1, &peer) || int_member(v, "step", 0, MAX_STEP, step, &at) || rank < 0)
      continue; /* a verdict this reader does not know: the rest of the line still draws */
    int link = kind && kind->type == GT_JSON_STRING && !strcmp(kind->str, "link"), was;
    char key[32], label[64];
    snprintf(key, sizeof key, "%c:%d:%d", link ? 'l' : 'c', rank, peer);
    int slow = !strcmp(state->str, "slow");
    if (slow_state(d, key, slow, &was)) return -1;
    if (!slow || was) continue;
    double ratio = num_or_nan(v, "ratio");
    if (!link)
      snprintf(label, sizeof label, "rank %d slow x%.1f", rank, ratio);
    else if (peer < 0)
      snprintf(label, sizeof label, "rank %d link slow x%.1f", rank, ratio);
    else
      snprintf(label, sizeof label, "link %d-%d slow x%.1f", rank, peer, ratio);
    if (add_mark(d, at, PLOT_FLAGGED, 1, label)) return -1;
  }
  return 0;
}

/* An event's label, short: the sheet has room for a few words a mark, and
 * the step is on the axis. The job's own texts (run/events.c) are cut to
 * their point ("reshaped to dp=3 tp=1 pp=1 (world 3)": "reshape dp=3");
 * another text is its kind and the text, or the text alone where it names
 * its subject ("rank 3 slow x2.10", "ladder: S3 exclude"), cut at 40
 * characters. */
static void short_label(plot_mark_kind kind, const char *event, const char *text, char *label, size_t cap) {
  int dp, tp, pp, world;
  long gen;
  if (kind == PLOT_FAULT) {
    snprintf(label, cap, "fault"); /* "step N failed: why": its why is in the log */
  } else if (kind == PLOT_RESHAPE && sscanf(text, "reshaped to dp=%d tp=%d pp=%d", &dp, &tp, &pp) == 3) {
    int n = snprintf(label, cap, "reshape dp=%d", dp);
    if (tp > 1 && n > 0 && (size_t)n < cap) n += snprintf(label + n, cap - (size_t)n, " tp=%d", tp);
    if (pp > 1 && n > 0 && (size_t)n < cap) snprintf(label + n, cap - (size_t)n, " pp=%d", pp);
  } else if (kind == PLOT_RESUME && sscanf(text, "resumed at step %*d (generation %ld, world %d)", &gen, &world) == 2) {
    snprintf(label, cap, "resume, world %d", world);
  } else if (!*text) {
    snprintf(label, cap, "%s", event);
  } else if (!strncmp(text, event, strlen(event)) || !strncmp(text, "rank ", 5) || !strncmp(text, "link ", 5)) {
    snprintf(label, cap, "%s", text);
  } else {
    snprintf(label, cap, "%s %s", event, text);
  }
  if (strlen(label) > 40 && cap > 41) memcpy(label + 37, "...", 4);
}

/* An event line: a mark labelled by its kind and text ("reshape dp=3"). */
static int read_event(plot_data *d, const gt_json *o, const char *event, int step) {
  static const struct {
    const char *name;
    plot_mark_kind kind;
  } kinds[] = {{"fault", PLOT_FAULT},
               {"flagged", PLOT_FLAGGED},
               {"ladder", PLOT_LADDER},
               {"reshape", PLOT_RESHAPE},
               {"resume", PLOT_RESUME}};
  plot_mark_kind kind = PLOT_OTHER;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (!strcmp(event, kinds[i].name)) kind = kinds[i].kind;
  d->have_flagged_events |= kind == PLOT_FLAGGED;
  d->have_resume_events |= kind == PLOT_RESUME;
  const gt_json *t = gt_json_get(o, "text");
  char label[64];
  short_label(kind, event, t && t->type == GT_JSON_STRING ? t->str : "", label, sizeof label);
  return add_mark(d, step, kind, 0, label);
}

/* One parsed line. 1: fine; 0: a line of a kind not drawn; -1: failure
 * (message printed). */
static int read_object(plot_data *d, const gt_json *o, const char *path, size_t lineno, int *last_step) {
  int step, rank;
  const gt_json *ev = gt_json_get(o, "event");
  const char *key = gt_json_get(o, "failslow_step") ? "failslow_step" : "step";
  if (int_member(o, key, 0, MAX_STEP, -1, &step) || int_member(o, "rank", 0, MAX_RANK, 0, &rank)) {
    fprintf(stderr, "giant-plot: %s:%zu: \"%s\" or \"rank\" is not a whole number in range\n", path, lineno, key);
    return -1;
  }
  if (ev && ev->type == GT_JSON_STRING && strcmp(ev->str, "eval") != 0)
    return step < 0 ? 0 : read_event(d, o, ev->str, step) ? -1 : 1;
  if (step < 0) return 0;
  const gt_json *eval = num(o, "eval_loss");
  if (eval) return add_point(d, &d->eval, step, rank, eval->number) ? -1 : 1;
  if (!strcmp(key, "failslow_step")) return read_failslow(d, o, step) ? -1 : 1;
  if (gt_json_get(o, "loss")) return read_step(d, o, step, rank, last_step) ? -1 : 1;
  return 0;
}

/* Giant writes a non-finite loss as C prints it (nan, inf): not JSON, but
 * a real line of a real run. Those bare words, outside strings, become
 * null, which draws nothing. */
static void nonfinite_to_null(char *s) {
  int in_str = 0;
  for (char *p = s; *p; p++) {
    if (in_str) {
      if (*p == '\\' && p[1])
        p++;
      else if (*p == '"')
        in_str = 0;
      continue;
    }
    if (*p == '"') {
      in_str = 1;
      continue;
    }
    if (*p != ':' && *p != ',' && *p != '[') continue;
    char *w = p + 1;
    size_t n = *w == '-' ? 4 : 3;
    if ((!strncmp(w, "nan", 3) || !strncmp(w, "inf", 3) || !strncmp(w, "-nan", 4) || !strncmp(w, "-inf", 4)) &&
        (w[n] == ',' || w[n] == '}' || w[n] == ']')) {
      if (n == 3) memmove(w + 4, w + 3, strlen(w + 3) + 1); /* "null" is a byte longer than "nan" */
      memcpy(w, "null", 4);
      p = w + 3;
    }
  }
}

int plot_read_file(plot_data *d, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "giant-plot: cannot open %s: %s\n", path, strerror(errno));
    return -1;
  }
  char *line = NULL;
  size_t cap = 0, lineno = 0, drawn = 0;
  ssize_t n;
  int rc = 0, last_step[2] = {-1, -1};
  while ((n = getline(&line, &cap, f)) > 0) {
    lineno++;
    int whole = line[n - 1] == '\n';
    if (whole) line[--n] = 0;
    if (n == 0) continue;
    if ((size_t)n > MAX_LINE) {
      fprintf(stderr, "giant-plot: %s:%zu: a line of %zd bytes is no metrics line\n", path, lineno, n);
      rc = -1;
      break;
    }
    /* Room for "null" in place of every "nan": one byte more each. */
    char *text = malloc((size_t)n + (size_t)n / 3 + 2);
    if (!text) {
      fprintf(stderr, "giant-plot: out of memory reading %s\n", path);
      rc = -1;
      break;
    }
    memcpy(text, line, (size_t)n + 1);
    nonfinite_to_null(text);
    gt_json_doc *doc = NULL;
    const gt_json *root = NULL;
    gt_status s = gt_json_parse(text, strlen(text), path, &doc, &root);
    if (s == GT_OK && root->type != GT_JSON_OBJECT) s = GT_EINVAL;
    if (s != GT_OK && !whole) {
      /* The last line, cut short: the job was killed while writing it. */
      fprintf(stderr, "giant-plot: warning: %s:%zu: the last line is cut short (a job killed mid-write?): skipped\n",
              path, lineno);
    } else if (s != GT_OK) {
      /* The reader's message names its line 1 (it was given one line): the
       * column is what tells. */
      const char *why = root ? "valid JSON, but no object" : gt_last_error(), *col = strstr(why, "column ");
      fprintf(stderr, "giant-plot: %s:%zu: not a JSON object, so not a metrics line (%s)\n", path, lineno,
              col ? col : why);
      rc = -1;
    } else {
      int r = read_object(d, root, path, lineno, last_step);
      if (r < 0) rc = -1;
      drawn += r > 0;
    }
    gt_json_free(doc);
    free(text);
    if (rc) break;
  }
  if (!rc && ferror(f)) {
    fprintf(stderr, "giant-plot: reading %s failed: %s\n", path, strerror(errno));
    rc = -1;
  }
  free(line);
  fclose(f);
  if (!rc && !drawn) fprintf(stderr, "giant-plot: warning: %s holds no line giant-plot draws\n", path);
  return rc;
}

static int by_step_seq(const void *a, const void *b) {
  const plot_point *x = a, *y = b;
  if (x->step != y->step) return x->step < y->step ? -1 : 1;
  if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Sorted by step (and rank), the latest value of each (step, rank) kept;
 * with lead >= 0, only that rank's. */
static void settle(plot_series *s, int lead) {
  size_t k = 0;
  for (size_t i = 0; i < s->n; i++)
    if (lead < 0 || s->p[i].rank == lead) s->p[k++] = s->p[i];
  s->n = k;
  if (s->n) qsort(s->p, s->n, sizeof *s->p, by_step_seq);
  k = 0;
  for (size_t i = 0; i < s->n; i++) {
    if (k && s->p[k - 1].step == s->p[i].step && s->p[k - 1].rank == s->p[i].rank)
      s->p[k - 1] = s->p[i];
    else
      s->p[k++] = s->p[i];
  }
  s->n = k;
}

static int by_mark_step(const void *a, const void *b) {
  const plot_mark *x = a, *y = b;
  if (x->step != y->step) return x->step < y->step ? -1 : 1;
  return x->kind < y->kind ? -1 : x->kind > y->kind;
}

int plot_finish(plot_data *d, const char *what) {
  if (!d->step_lines) {
    fprintf(stderr,
            "giant-plot: no step lines in %s: give the metrics file(s) a run wrote with --metrics FILE (one JSON "
            "line a step, with \"step\" and \"loss\")\n",
            what);
    return -1;
  }
  settle(&d->loss, d->lead_rank);
  settle(&d->tokens_per_s, d->lead_rank);
  settle(&d->mfu, d->lead_rank);
  settle(&d->eval, -1);
  /* The monitor's lines hold every rank's compute in one place; without
   * them, each rank's own step lines (a %r in --metrics) do. */
  settle(&d->heat_failslow, -1);
  settle(&d->heat_step, -1);
  d->heat = d->heat_failslow.n ? &d->heat_failslow : &d->heat_step;
  d->heat_source = d->heat_failslow.n ? "the fail-slow monitor's lines" : "the ranks' step lines";
  /* Marks read from the evidence give way to event lines saying the same. */
  size_t k = 0;
  for (size_t i = 0; i < d->nmarks; i++) {
    plot_mark *m = &d->marks[i];
    if (m->derived &&
        ((m->kind == PLOT_FLAGGED && d->have_flagged_events) || (m->kind == PLOT_RESUME && d->have_resume_events)))
      continue;
    d->marks[k++] = *m;
  }
  d->nmarks = k;
  if (d->nmarks) qsort(d->marks, d->nmarks, sizeof *d->marks, by_mark_step);
  return 0;
}

void plot_data_free(plot_data *d) {
  plot_series *s[] = {&d->loss, &d->eval, &d->tokens_per_s, &d->mfu, &d->heat_failslow, &d->heat_step};
  for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) free(s[i]->p);
  free(d->marks);
  free(d->slow);
  *d = (plot_data){0};
}
