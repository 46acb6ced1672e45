/* --rebalance in the GPT example: every rank gathers every rank's step
 * telemetry, so all of them feed identical data to the pure decision and
 * change shares at the same step. */
#include "rebalance.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "giant/grid.h"

/* Steps of telemetry at the current shares before a decision: enough for
 * the median to ignore a hiccup, few enough to react within seconds. The
 * first steps (allocation, cold caches) are not the job's speed. A switch
 * must shrink the predicted step by 7% (more than one row of 16), and the
 * decision must propose the same shares at PERSIST steps in a row: ranks
 * that share busy cores differ by a third for a few steps now and then, and
 * following that would move rows back and forth, while a slow device stays
 * slow. */
enum { WINDOW = 8, WARMUP = 3, HORIZON = 50, PERSIST = 5 };
#define MIN_GAIN 0.07

struct gpt_rebalance {
  gt_plan plan;
  gt_comm *world;
  gt_backend *be;
  int *shares, *next, cap;
  double *speed;
  int *proposed;           /* the shares the last decisions proposed */
  gt_step_telemetry *ring; /* WINDOW steps x world ranks, oldest first */
  void *dev;               /* the gather's buffer, on the device the communicators use */
  int filled, agreed;      /* steps in the ring; decisions in a row that proposed `proposed` */
  bool urgent;             /* the monitor flagged or cleared a rank: act on the next change proposed */
};

_Static_assert(sizeof(gt_step_telemetry) % sizeof(float) == 0, "telemetry travels as floats");

gt_status gpt_rebalance_create(const gt_plan *plan, gt_dist *dist, gt_backend *be, const int *shares, int cap,
                               gpt_rebalance **out) {
  *out = NULL;
  gpt_rebalance *r = calloc(1, sizeof *r);
  if (!r) return gt_errorf(GT_ENOMEM, "out of memory for --rebalance");
  size_t dp = (size_t)plan->layout.dp, world = (size_t)plan->world;
  r->plan = *plan, r->world = gt_grid_world(gt_dist_grid(dist)), r->be = be, r->cap = cap;
  r->shares = malloc(dp * sizeof *r->shares);
  r->next = malloc(dp * sizeof *r->next);
  r->speed = malloc(dp * sizeof *r->speed);
  r->proposed = malloc(dp * sizeof *r->proposed);
  r->ring = calloc(WINDOW * world, sizeof *r->ring);
  gt_status s = r->shares && r->next && r->speed && r->proposed && r->ring ? GT_OK : gt_errorf(GT_ENOMEM, "out of memory for --rebalance");
  if (s == GT_OK) s = gt_backend_alloc(be, world * sizeof *r->ring, &r->dev);
  if (s != GT_OK) {
    gpt_rebalance_destroy(r);
    return s;
  }
  memcpy(r->shares, shares, dp * sizeof *shares);
  *out = r;
  return GT_OK;
}

void gpt_rebalance_destroy(gpt_rebalance *r) {
  if (!r) return;
  if (r->dev) gt_backend_free(r->be, r->dev);
  free(r->shares), free(r->next), free(r->speed), free(r->proposed), free(r->ring);
  free(r);
}

/* This step's telemetry of every world rank into `all`, the same bytes on
 * every rank: a tiny all-gather over the world (not only the data-parallel
 * group, so that the tensor- and pipeline-parallel ranks of a replica,
 * whose speed is its slowest rank's, decide alike). A job-wide monitor
 * that already gathers telemetry every step can stand in for it. */
static gt_status gather(gpt_rebalance *r, const gt_step_telemetry *mine, gt_step_telemetry *all) {
  size_t one = sizeof *mine, world = (size_t)r->plan.world;
  char *slot = (char *)r->dev + (size_t)r->plan.rank * one;
  GT_TRY(gt_backend_upload(r->be, slot, mine, one));
  GT_TRY(gt_comm_allgather(r->world, slot, r->dev, one / sizeof(float), GT_F32));
  return gt_backend_download(r->be, all, r->dev, world * one);
}

static int offset_of(const int *shares, int replica) {
  int off = 0;
  for (int i = 0; i < replica; i++) off += shares[i];
  return off;
}

static void print_shares(const char *label, const int *v, int n) {
  printf("%s", label);
  for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", v[i]);
}

/* Whether the monitor flagged a rank's compute, or cleared one, this step. */
static bool verdict_now(const gt_failslow_report *rep) {
  for (int i = 0; rep && i < rep->nverdicts; i++)
    if (rep->verdicts[i].kind == GT_FAILSLOW_COMPUTE) return true;
  return false;
}

gt_status gpt_rebalance_after_step(gpt_rebalance *r, gt_trainer *tr, const gt_step_stats *st,
                                   const gt_failslow_report *fs_report, bool lead) {
  size_t world = (size_t)r->plan.world;
  int dp = r->plan.layout.dp;
  if (st->step < WARMUP) return GT_OK; /* every rank skips the same steps: the gathers stay matched */
  if (fs_report && !fs_report->gathered) return GT_OK; /* ditto: the monitor gathers on the same steps everywhere */
  if (r->filled == WINDOW) {
    memmove(r->ring, r->ring + world, (WINDOW - 1) * world * sizeof *r->ring);
    r->filled--;
  }
  gt_step_telemetry *slot = r->ring + (size_t)r->filled * world;
  if (fs_report) memcpy(slot, fs_report->telemetry, world * sizeof *slot);
  else GT_TRY(gather(r, &st->telemetry, slot));
  if (fs_report && verdict_now(fs_report)) r->urgent = true;
  if (++r->filled < WINDOW) return GT_OK;
  /* A switch costs about a step's compute (the first step at new shares
   * runs on cold caches); take the slowest rank's latest, which every rank
   * sees alike. */
  double transition = 0;
  for (size_t k = 0; k < world; k++) {
    double c = r->ring[(WINDOW - 1) * world + k].compute_s;
    if (c > transition) transition = c;
  }
  gt_rebalance_config cfg = {.cap = r->cap, .transition_s = transition, .horizon = HORIZON,
                             .min_gain = MIN_GAIN};
  gt_rebalance_decision d;
  GT_TRY(gt_rebalance_decide(&cfg, &r->plan, r->ring, WINDOW, r->shares, r->next, r->speed, &d));
  size_t bytes = (size_t)dp * sizeof *r->next;
  if (!d.change) r->agreed = 0;
  else if (r->agreed && !memcmp(r->next, r->proposed, bytes)) r->agreed++;
  else memcpy(r->proposed, r->next, bytes), r->agreed = 1;
  if (r->agreed < PERSIST && !(r->urgent && d.change)) return GT_OK;
  r->agreed = 0, r->urgent = false;
  int me = r->plan.me.dp, total = offset_of(r->next, dp);
  GT_TRY(gt_trainer_set_rows(tr, r->next[me], offset_of(r->next, me), total));
  if (lead) {
    printf("rebalance after step %d: rows ", st->step);
    print_shares("", r->shares, dp);
    print_shares(" -> ", r->next, dp);
    printf(" of %d (replica speeds", total);
    for (int i = 0; i < dp; i++) printf(" %.1f", r->speed[i]);
    printf(" rows/s; predicted compute %.4f s -> %.4f s a step)\n", d.step_now_s, d.step_new_s);
    fflush(stdout);
  }
  memcpy(r->shares, r->next, (size_t)dp * sizeof *r->shares);
  r->filled = 0; /* judge the new shares on steps taken at them */
  return GT_OK;
}
