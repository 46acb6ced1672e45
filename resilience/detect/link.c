/* Slow links: noticed as communication waits rising job-wide while compute
 * stays normal, confirmed and localised by an active probe, a ping-pong
 * of a payload between every pair of ranks. A node's own link (all its
 * ranks' traffic to other nodes) shows as ranks all of whose round trips
 * are slow; a link between two ranks as one pair. Every decision here is
 * taken from the gathered telemetry and from round trips every rank
 * receives alike, so every rank probes on the same steps and reaches the
 * same verdicts. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "giant/log.h"
#include "resilience/detect/monitor.h"
#include "giant/engine/comm.h"
#include "giant/engine/detector.h"
#include "resilience/detect/failslow.h"

enum { PROBE_MAX_RANKS = 64 };

gt_status gt_failslow_link_init(gt_failslow *fs) {
  link_watch *l = &fs->link;
  l->npairs = fs->n * (fs->n - 1) / 2;
  int w = fs->cfg.window > l->npairs ? fs->cfg.window : l->npairs;
  w = w > fs->n ? w : fs->n;
  l->history = calloc((size_t)fs->cfg.window, sizeof(double));
  l->scratch = calloc((size_t)w, sizeof(double));
  l->vals = calloc((size_t)w, sizeof(double));
  l->rtt = calloc((size_t)l->npairs, sizeof(float));
  l->payload_n = (size_t)(fs->cfg.probe_bytes + 3) / 4;
  l->payload = calloc(l->payload_n, sizeof(float));
  l->behind = calloc((size_t)fs->n, 1);
  l->flagged = calloc((size_t)fs->n, 1);
  l->flagged_a = l->flagged_b = l->suspect_a = l->suspect_b = -1;
  if (!l->history || !l->scratch || !l->vals || !l->rtt || !l->payload || !l->behind || !l->flagged)
    return gt_errorf(GT_ENOMEM, "out of memory for the link watch of %d ranks", fs->n);
  return GT_OK;
}

void gt_failslow_link_free(gt_failslow *fs) {
  link_watch *l = &fs->link;
  free(l->history);
  free(l->scratch);
  free(l->vals);
  free(l->rtt);
  free(l->payload);
  free(l->behind);
  free(l->flagged);
}

/* The pairs (i < j) in one order that every rank walks: each pair's lower
 * rank sends the payload and waits for it back, probe_rounds times, and
 * keeps the fastest round trip (the least disturbed by scheduling); the
 * others move on to their next pair. Then one all-reduce gives every rank
 * every pair's round trip. */
static gt_status probe(gt_failslow *fs) {
  link_watch *l = &fs->link;
  float *word = l->payload;
  size_t nw = l->payload_n;
  int p = 0;
  for (int i = 0; i < fs->n; i++)
    for (int j = i + 1; j < fs->n; j++, p++) {
      l->rtt[p] = 0;
      if (fs->rank != i && fs->rank != j) continue;
      double best = 1e30;
      for (int k = 0; k < fs->cfg.probe_rounds; k++) {
        double t0 = gt_now();
        if (fs->rank == i) {
          GT_TRY(gt_comm_send(fs->world, word, nw, GT_F32, j));
          GT_TRY(gt_comm_recv(fs->world, word, nw, GT_F32, j));
        } else {
          GT_TRY(gt_comm_recv(fs->world, word, nw, GT_F32, i));
          GT_TRY(gt_comm_send(fs->world, word, nw, GT_F32, i));
        }
        best = fmin(best, gt_now() - t0);
      }
      if (fs->rank == i) l->rtt[p] = (float)best;
    }
  return gt_comm_allreduce(fs->world, l->rtt, (size_t)l->npairs, GT_F32, GT_COMM_SUM);
}

/* The pair whose round trip stands out most against the median pair's, if
 * any does by more than three times: a busy machine's scheduling jitter on
 * a small message reaches twice the median. Whether the link matters next
 * to the step was for the waits to say; the probe only says where it is.
 * Its ratio in *ratio. */
static int standout(gt_failslow *fs, double *ratio) {
  link_watch *l = &fs->link;
  double *rtt = l->vals;
  for (int p = 0; p < l->npairs; p++) rtt[p] = l->rtt[p];
  double med = gt_failslow_median(l->scratch, rtt, l->npairs), best = 0;
  int at = -1;
  for (int p = 0; p < l->npairs; p++) {
    double r = rtt[p] / fmax(med, 1e-7);
    if (r > 3 && r > best) {
      best = r;
      at = p;
    }
  }
  *ratio = best;
  return at;
}

/* The ranks behind one slow link: those whose median round trip, over
 * their pairs, is more than three times the median over the pairs without
 * them (a pair of ranks on the same node, whose traffic stays there, is
 * fast, and so is every pair of the others). Marks them in l->behind;
 * returns how many, the largest such ratio in *ratio. With fewer than
 * four ranks there are too few pairs without a rank to compare with. */
static int endpoints(gt_failslow *fs, double *ratio) {
  link_watch *l = &fs->link;
  int n = fs->n, count = 0;
  *ratio = 0;
  if (n < 4) return 0;
  double *with = l->vals; /* max(window, npairs, n) doubles */
  double *tmp = malloc(sizeof(double) * (size_t)l->npairs);
  double *rest = malloc(sizeof(double) * (size_t)l->npairs);
  if (!tmp || !rest) { /* no verdict this probe, none wrong either */
    free(tmp);
    free(rest);
    return 0;
  }
  for (int r = 0; r < n; r++) {
    int nw = 0, no = 0, p = 0;
    for (int i = 0; i < n; i++)
      for (int j = i + 1; j < n; j++, p++) {
        if (i == r || j == r)
          with[nw++] = l->rtt[p];
        else
          rest[no++] = l->rtt[p];
      }
    double mine = gt_failslow_median(tmp, with, nw), others = gt_failslow_median(tmp, rest, no);
    double x = mine / fmax(others, 1e-7);
    l->behind[r] = x > 3;
    if (x > 3) {
      count++;
      *ratio = fmax(*ratio, x);
    }
  }
  free(tmp);
  free(rest);
  return count;
}

static void pair_of(int n, int p, int *a, int *b) {
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      if (p-- == 0) {
        *a = i;
        *b = j;
        return;
      }
}

static void add_verdict(gt_failslow *fs, int a, int b, bool flagged, double ratio, int onset, int step) {
  fs->verdicts[fs->nverdicts++] = (gt_failslow_verdict){
      .rank = a, .kind = GT_FAILSLOW_LINK, .peer = b, .flagged = flagged, .ratio = ratio, .onset = onset, .step = step};
}

/* Are the waits up? The job-wide wait (the median rank's time not
 * computing) against its median over the history, by more than theta
 * of the median rank's compute, so that a wait that costs nothing next to
 * the step does not count, and by more than four robust spreads of the
 * history, so that the jitter of a busy machine does not (*raised); and
 * is compute not to blame (no rank flagged slow, whose peers then wait for
 * it)? A slow rank not flagged yet may trigger a few probes; they find no
 * pair standing out. */
static bool waits_up(gt_failslow *fs, double *wait, double *base_out, bool *raised) {
  link_watch *l = &fs->link;
  double *w = l->vals, *comp = fs->e; /* fs->e is free once the detector has run */
  for (int r = 0; r < fs->n; r++) {
    /* All of the step that was not compute or loading: the waits the
     * telemetry names, and those it does not (a send that holds up the
     * progress thread delays whatever that rank does next on it). */
    const gt_step_telemetry *t = &fs->tel[r];
    w[r] = fmax(t->step_s - t->compute_s - t->data_s, t->dp_wait_s + t->pp_wait_s + t->tp_wait_s);
    comp[r] = fs->tel[r].compute_s;
  }
  double mw = gt_failslow_median(l->scratch, w, fs->n);
  double mc = gt_failslow_median(l->scratch, comp, fs->n);
  *wait = mw;
  *base_out = l->nhist ? gt_failslow_median(l->scratch, l->history, l->nhist) : mw;
  *raised = false;
  if (l->nhist < fs->cfg.warmup) return false;
  double base = *base_out;
  for (int i = 0; i < l->nhist; i++) w[i] = fabs(l->history[i] - base);
  double spread = 1.4826 * gt_failslow_median(l->scratch, w, l->nhist);
  bool compute_ok = true;
  for (int r = 0; r < fs->n; r++) compute_ok = compute_ok && !gt_detector_flagged(fs->det, r);
  *raised = mw - base > fmax(fs->cfg.theta * mc, 4 * spread);
  return compute_ok && *raised;
}

static void remember(link_watch *l, double wait, int window) {
  l->history[l->hist_at] = wait;
  l->hist_at = (l->hist_at + 1) % window;
  if (l->nhist < window) l->nhist++;
}

/* Flags the suspect: the pair a-b, or (b -1) every rank behind one link. */
static void flag(gt_failslow *fs, int a, int b, double ratio, int step) {
  link_watch *l = &fs->link;
  l->flagged_a = a;
  l->flagged_b = b;
  l->streak = 0;
  l->quiet = 0;
  for (int r = 0; r < fs->n; r++) l->flagged[r] = b < 0 && l->behind[r];
  if (b >= 0) add_verdict(fs, a, b, true, ratio, l->onset, step);
  for (int r = 0; r < fs->n; r++)
    if (l->flagged[r]) add_verdict(fs, r, -1, true, ratio, l->onset, step);
}

static void clear(gt_failslow *fs, int step) {
  link_watch *l = &fs->link;
  if (l->flagged_b >= 0) add_verdict(fs, l->flagged_a, l->flagged_b, false, 1.0, step, step);
  for (int r = 0; r < fs->n; r++)
    if (l->flagged[r]) add_verdict(fs, r, -1, false, 1.0, step, step);
  memset(l->flagged, 0, (size_t)fs->n);
  l->flagged_a = l->flagged_b = -1;
  l->quiet = 0;
}

gt_status gt_failslow_link_step(gt_failslow *fs, int step, gt_failslow_report *rep) {
  link_watch *l = &fs->link;
  const gt_failslow_config *c = &fs->cfg;
  double wait = 0, base = 0;
  bool raised = false;
  /* The first gathered step carries one-time costs; the history starts
   * after. It learns the waits of steps where they are not raised: raised
   * waits with a rank flagged slow are not a link's, nor the machine's
   * normal either (learnt, they would lift the bar over a slow link that
   * raised them too, and it would be cleared while it played). */
  bool up = fs->gathered >= 1 && waits_up(fs, &wait, &base, &raised);
  rep->wait_s = wait;
  rep->wait_base_s = base;
  if (fs->gathered >= 1 && !raised) remember(l, wait, c->window);
  l->high = up ? l->high + 1 : 0;
  if (l->high == 1) l->onset = step;
  /* A flagged link is not probed again: it is cleared once the waits it
   * raised have stayed down for k steps, whatever compute does meanwhile
   * (ranks flagged slow beside a slow link, whose waits hold up their
   * steps, cleared the link while it played when they counted). */
  if (l->flagged_a >= 0) {
    l->quiet = raised ? 0 : l->quiet + 1;
    if (l->quiet >= c->k) clear(fs, step);
    return GT_OK;
  }
  /* Two steps up in a row before probing: one slow step is not a link.
   * The probe walks the pairs one after another, so its time grows with
   * the square of the ranks; past PROBE_MAX_RANKS it is not run. */
  if (l->high < 2 || fs->n > PROBE_MAX_RANKS) {
    if (!up) l->streak = 0;
    return GT_OK;
  }
  double t0 = gt_now();
  GT_TRY(probe(fs));
  rep->probed = true;
  rep->probe_s = gt_now() - t0;
  /* The ranks behind one slow link first: their pairs are most of the
   * slow ones, which can make the median pair slow, and then no pair
   * stands out against it. */
  double ratio = 0;
  int a = -1, b = -1;
  if (endpoints(fs, &ratio) > 0) {
    for (int r = fs->n - 1; r >= 0; r--)
      if (l->behind[r]) a = r;
  } else {
    int p = standout(fs, &ratio);
    if (p >= 0) pair_of(fs->n, p, &a, &b);
  }
  /* Waits that rose with no link to blame are the machine's new normal
   * (other work came), not a link: the history learns them, so that the
   * probing stops once its median has moved. */
  if (a < 0) remember(l, wait, c->window);
  l->streak = a >= 0 && a == l->suspect_a && b == l->suspect_b ? l->streak + 1 : (a >= 0 ? 1 : 0);
  l->suspect_a = a;
  l->suspect_b = b;
  if (l->streak >= c->k) flag(fs, a, b, ratio, step);
  return GT_OK;
}
