/* --rebalance in a run: every rank gathers every rank's step
 * telemetry. Alone (no leader, or --rebalance-local) all of them feed
 * identical data to the pure decision and change shares at the same step.
 * Under a leader (giantrun's agents lead the job: GT_COORD=leader) rank 0
 * publishes the replicas' speeds and shares every few steps instead, the
 * leading agent decides, and every step rank 0 broadcasts whether a new
 * decision applies, so that all ranks apply it at the same step. */
#include "rebalance.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "giant/engine/grid.h"
#include "giant/log.h"
#include "coord_link.h"
#include "recut.h"
#include "giant/engine/comm.h"
#include "giant/engine/coord.h"
#include "giant/engine/dist.h"
#include "giant/engine/init.h"
#include "giant/engine/plan.h"
#include "giant/engine/trainer.h"
#include "optim/trainer/trainer_engine.h"
#include "resilience/detect/failslow.h"
#include "resilience/mitigate/rebalance.h"

/* Steps of telemetry at the current shares before a decision: enough for
 * the median to ignore a hiccup, few enough to react within seconds. The
 * first steps (allocation, cold caches) are not the job's speed. A switch
 * must shrink the predicted step by 7% (more than one row of 16), and the
 * decision must propose the same shares at PERSIST steps in a row: ranks
 * that share busy cores differ by a third for a few steps now and then, and
 * following that would move rows back and forth, while a slow device stays
 * slow. */
enum { WINDOW = 8, WARMUP = 3, HORIZON = 50, PERSIST = 5 };
/* Under a leader: a report every PUBLISH steps once a window is in (and at
 * once when the monitor flags or clears a rank); the leader's two reports
 * in a row that agree stand for PERSIST decisions. */
enum { PUBLISH = 4 };
/* Switches are damped (gt_rebalance_damping): each one within HORIZON
 * steps of the one before makes the next need more agreeing decisions and
 * a larger gain. */
#define MIN_GAIN 0.07

struct run_rebalance {
  gt_plan plan;
  gt_comm *world;
  gt_backend *be;
  int *shares, *next, cap;
  double *speed;
  int *proposed;                     /* the shares the last decisions proposed */
  gt_step_telemetry *ring;           /* WINDOW steps x world ranks, oldest first */
  void *dev;                         /* the gather's buffer, on the device the communicators use */
  int filled, agreed;                /* steps in the ring; decisions in a row that proposed `proposed` */
  gt_rebalance_damping rows_damping; /* of the rows' switches decided here */
  bool urgent;                       /* the monitor flagged or cleared a rank: act on the next change proposed */
  /* Under a leader (led): rank 0's link to it, the epoch of the decision
   * the shares come from, the step of the last report, and the broadcast's
   * buffer on the device: apply?, epoch, the shares. */
  bool led;
  run_coord_link *link;
  int64_t epoch;
  int published;
  void *note;
  float *note_host;
  /* Pipeline layouts: the stage cut by measured speed (recut.h), for
   * micro-batches of cut_B rows of cut_T tokens (0: not judged); the cut
   * the last decisions proposed and how many in a row did; a cut decided
   * and not taken yet (run_rebalance_take_recut). */
  int cut_B, cut_T;
  int cut_proposed[GT_REBALANCE_MAX_STAGES + 1], cut_agreed;
  bool cut_pending;
  int cut_first[GT_REBALANCE_MAX_STAGES + 1];
  gt_rebalance_damping cut_damping;
};

_Static_assert(sizeof(gt_step_telemetry) % sizeof(float) == 0, "telemetry travels as floats");

/* The broadcast of a leader's decision: apply?, epoch, the dp shares, a
 * cut?, the cut's stage starts (pp + 1 of them). */
#define NOTE(dp) ((size_t)(dp) + 4 + GT_REBALANCE_MAX_STAGES)

gt_status run_rebalance_create(const gt_plan *plan, gt_dist *dist, gt_backend *be, const int *shares, int cap,
                               gt_job *job, bool local, run_rebalance **out) {
  *out = NULL;
  run_rebalance *r = calloc(1, sizeof *r);
  if (!r) return gt_errorf(GT_ENOMEM, "out of memory for --rebalance");
  size_t dp = (size_t)plan->layout.dp, world = (size_t)plan->world;
  r->plan = *plan;
  r->world = gt_grid_world(gt_dist_grid(dist));
  r->be = be;
  r->cap = cap;
  r->shares = malloc(dp * sizeof *r->shares);
  r->next = malloc(dp * sizeof *r->next);
  r->speed = malloc(dp * sizeof *r->speed);
  r->proposed = malloc(dp * sizeof *r->proposed);
  r->ring = calloc(WINDOW * world, sizeof *r->ring);
  r->note_host = malloc(NOTE(dp) * sizeof *r->note_host);
  gt_status s = r->shares && r->next && r->speed && r->proposed && r->ring && r->note_host
                    ? GT_OK
                    : gt_errorf(GT_ENOMEM, "out of memory for --rebalance");
  if (s == GT_OK) s = gt_backend_alloc(be, world * sizeof *r->ring, &r->dev);
  r->led = !local && run_coord_led(job);
  if (s == GT_OK && r->led && dp > GT_MITIGATION_MAX_DP)
    s = gt_errorf(GT_EINVAL, "--rebalance under a leader takes at most dp=%d; use --rebalance-local",
                  GT_MITIGATION_MAX_DP);
  if (s == GT_OK && r->led) s = gt_backend_alloc(be, NOTE(dp) * sizeof *r->note_host, &r->note);
  if (s == GT_OK && r->led && plan->rank == 0) s = run_coord_link_start(job, &r->link, &r->epoch);
  if (s != GT_OK) {
    run_rebalance_destroy(r);
    return s;
  }
  memcpy(r->shares, shares, dp * sizeof *shares);
  gt_rebalance_damping_init(&r->rows_damping, HORIZON);
  gt_rebalance_damping_init(&r->cut_damping, HORIZON);
  *out = r;
  return GT_OK;
}

void run_rebalance_destroy(run_rebalance *r) {
  if (!r) return;
  run_coord_link_stop(r->link);
  if (r->dev) gt_backend_free(r->be, r->dev);
  if (r->note) gt_backend_free(r->be, r->note);
  free(r->shares);
  free(r->next);
  free(r->speed);
  free(r->proposed);
  free(r->ring);
  free(r->note_host);
  free(r);
}

/* This step's telemetry of every world rank into `all`, the same bytes on
 * every rank: a tiny all-gather over the world (not only the data-parallel
 * group, so that the tensor- and pipeline-parallel ranks of a replica,
 * whose speed is its slowest rank's, decide alike). A job-wide monitor
 * that already gathers telemetry every step can stand in for it. */
static gt_status gather(run_rebalance *r, const gt_step_telemetry *mine, gt_step_telemetry *all) {
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

/* Whether the monitor cleared a rank's compute this step. */
static bool cleared_now(const gt_failslow_report *rep) {
  for (int i = 0; rep && i < rep->nverdicts; i++)
    if (rep->verdicts[i].kind == GT_FAILSLOW_COMPUTE && !rep->verdicts[i].flagged) return true;
  return false;
}

/* The slowest rank's compute in the window's latest step, which every rank
 * sees alike: what a switch costs, about a step's compute (the first step
 * at new shares runs on cold caches). */
static double transition_cost(const run_rebalance *r) {
  size_t world = (size_t)r->plan.world;
  double transition = 0;
  for (size_t k = 0; k < world; k++) {
    double c = r->ring[(WINDOW - 1) * world + k].compute_s;
    if (c > transition) transition = c;
  }
  return transition;
}

/* Takes the shares in r->next from the next step on; the lead prints the
 * line, `why` its reason in parentheses. */
static gt_status switch_to(run_rebalance *r, gt_trainer *tr, int step, bool lead, const char *why) {
  int dp = r->plan.layout.dp, me = r->plan.me.dp, total = offset_of(r->next, dp);
  GT_TRY(gt_trainer_set_rows(tr, r->next[me], offset_of(r->next, me), total));
  if (lead) {
    printf("rebalance after step %d: rows ", step);
    print_shares("", r->shares, dp);
    print_shares(" -> ", r->next, dp);
    printf(" of %d (%s)\n", total, why);
    fflush(stdout);
  }
  memcpy(r->shares, r->next, (size_t)dp * sizeof *r->shares);
  r->filled = 0; /* judge the new shares on steps taken at them */
  r->agreed = 0;
  r->urgent = false;
  return GT_OK;
}

/* No leader: every rank decides alike on its window. */
static gt_status decide_here(run_rebalance *r, gt_trainer *tr, int step, bool lead) {
  int dp = r->plan.layout.dp;
  gt_rebalance_config cfg = {.cap = r->cap,
                             .transition_s = transition_cost(r),
                             .horizon = HORIZON,
                             .min_gain = gt_rebalance_damping_gain(&r->rows_damping, step, MIN_GAIN)};
  gt_rebalance_decision d;
  GT_TRY(gt_rebalance_decide(&cfg, &r->plan, r->ring, WINDOW, r->shares, r->next, r->speed, &d));
  int agreed = gt_rebalance_agree(r->proposed, &r->agreed, d.change, r->next, dp);
  int persist = gt_rebalance_damping_persist(&r->rows_damping, step, PERSIST);
  if (agreed < persist && !(r->urgent && d.change)) return GT_OK;
  gt_rebalance_damping_note(&r->rows_damping, step);
  char why[1024] = "replica speeds";
  size_t at = strlen(why);
  for (int i = 0; i < dp && at < sizeof why; i++)
    at += (size_t)snprintf(why + at, sizeof why - at, " %.1f", r->speed[i]);
  if (at < sizeof why)
    snprintf(why + at, sizeof why - at, " rows/s; predicted compute %.4f s -> %.4f s a step", d.step_now_s,
             d.step_new_s);
  return switch_to(r, tr, step, lead, why);
}

/* Takes cut `first` after this step: the lead prints the line. */
static void cut_to(run_rebalance *r, const int *now, const int *first, int step, bool lead, const char *why) {
  int P = r->plan.layout.pp;
  if (lead) {
    printf("re-cut after step %d: first layers of the stages", step);
    for (int s = 0; s < P; s++) printf("%s%d", s ? "," : " ", now[s]);
    printf(" ->");
    for (int s = 0; s < P; s++) printf("%s%d", s ? "," : " ", first[s]);
    printf(" of %d (%s)\n", first[P], why);
    fflush(stdout);
  }
  memcpy(r->cut_first, first, (size_t)(P + 1) * sizeof *first);
  r->cut_pending = true;
  r->cut_agreed = 0;
  r->urgent = false;
}

/* Pipeline layouts without a leader, every rank alike on its window:
 * re-cut the stages when gt_rebalance_choose_cut says the planner's cut for
 * the measured stage speeds pays back a rebuild (about two steps) within
 * HORIZON steps and shrinks the slowest stage by MIN_GAIN, and PERSIST
 * decisions in a row propose it (or one, right after the monitor flagged
 * or cleared a rank); both damped after a recent re-cut. */
static gt_status decide_cut(run_rebalance *r, gt_trainer *tr, int step, bool lead) {
  run_recut_inputs *in = malloc(sizeof *in);
  if (!in) return gt_errorf(GT_ENOMEM, "out of memory judging the pipeline cut");
  gt_rebalance_cut c;
  gt_status s = run_recut_inputs_of(&r->plan, gt_trainer_model(tr), r->cut_B, r->cut_T, r->ring, WINDOW, in);
  double slowest = 0;
  for (int k = 0; s == GT_OK && k < in->pp; k++) slowest = in->stage_s[k] > slowest ? in->stage_s[k] : slowest;
  gt_rebalance_config cfg = {.cap = 1,
                             .transition_s = 2 * slowest,
                             .horizon = HORIZON,
                             .min_gain = gt_rebalance_damping_gain(&r->cut_damping, step, MIN_GAIN)};
  if (s == GT_OK) s = gt_rebalance_choose_cut(&cfg, in->pp, in->now, in->stage_s, in->flops, in->layers, &c);
  free(in);
  GT_TRY(s);
  int P = r->plan.layout.pp;
  int agreed = gt_rebalance_agree(r->cut_proposed, &r->cut_agreed, c.change, c.next, P + 1);
  int persist = gt_rebalance_damping_persist(&r->cut_damping, step, PERSIST);
  if (!c.change || (agreed < persist && !r->urgent)) return GT_OK;
  gt_rebalance_damping_note(&r->cut_damping, step);
  char why[1024] = "stage speeds";
  size_t at = strlen(why);
  for (int k = 0; k < P && at < sizeof why; k++) at += (size_t)snprintf(why + at, sizeof why - at, " %.2f", c.speed[k]);
  if (at < sizeof why)
    snprintf(why + at, sizeof why - at, "; predicted slowest stage %.4f s -> %.4f s a step", c.step_now_s,
             c.step_new_s);
  cut_to(r, c.now, c.next, step, lead, why);
  return GT_OK;
}

void run_rebalance_enable_recut(run_rebalance *r, int B, int T) {
  r->cut_B = B;
  r->cut_T = T;
}

bool run_rebalance_recut_enabled(const run_rebalance *r) { return r && r->cut_B > 0; }

bool run_rebalance_take_recut(run_rebalance *r, int *first) {
  if (!r || !r->cut_pending) return false;
  memcpy(first, r->cut_first, (size_t)(r->plan.layout.pp + 1) * sizeof *first);
  r->cut_pending = false;
  r->filled = 0; /* judge the new cut on steps taken at it */
  return true;
}

/* Under a leader, rank 0: a report of the window every PUBLISH steps. */
static gt_status publish(run_rebalance *r, gt_trainer *tr, int step) {
  if (!r->link || (step - r->published < PUBLISH && !r->urgent)) return GT_OK;
  gt_mitigation_report *rep = calloc(1, sizeof *rep);
  if (!rep) return gt_errorf(GT_ENOMEM, "out of memory for a rebalancing report");
  *rep = (gt_mitigation_report){.step = step,
                                .epoch = r->epoch,
                                .dp = r->plan.layout.dp,
                                .cap = r->cap,
                                .urgent = r->urgent,
                                .transition_s = transition_cost(r)};
  memcpy(rep->shares, r->shares, (size_t)rep->dp * sizeof *r->shares);
  gt_status s = gt_rebalance_speeds(&r->plan, r->ring, WINDOW, rep->speed, rep->micro);
  run_recut_inputs *in = r->cut_B && s == GT_OK ? malloc(sizeof *in) : NULL;
  if (r->cut_B && s == GT_OK && !in) s = gt_errorf(GT_ENOMEM, "out of memory for a rebalancing report");
  if (in) { /* and what the pipeline cut is decided on */
    s = run_recut_inputs_of(&r->plan, gt_trainer_model(tr), r->cut_B, r->cut_T, r->ring, WINDOW, in);
    if (s == GT_OK && in->layers > GT_MITIGATION_MAX_LAYERS)
      s = gt_errorf(GT_EUNSUPPORTED, "too many layers to report");
    if (s == GT_OK) {
      rep->pp = in->pp;
      rep->layers = in->layers;
      memcpy(rep->cut, in->now, (size_t)(in->pp + 1) * sizeof *in->now);
      memcpy(rep->stage_s, in->stage_s, (size_t)in->pp * sizeof *in->stage_s);
      memcpy(rep->layer_flops, in->flops, (size_t)in->layers * sizeof *in->flops);
    }
    free(in);
  }
  if (s == GT_OK) run_coord_link_publish(r->link, rep);
  free(rep);
  r->published = step;
  r->urgent = false;
  return s;
}

/* Whether a decision fits this job: its replicas, their cap, the same
 * rows; and a cut, if it has one, of this model's layers into its stages. */
static bool fits(const run_rebalance *r, const gt_model *model, const gt_mitigation *m) {
  int dp = r->plan.layout.dp, total = 0;
  if (m->dp != dp) return false;
  for (int i = 0; i < dp; i++) {
    if (m->shares[i] < 1 || m->shares[i] > r->cap) return false;
    total += m->shares[i];
  }
  if (total != offset_of(r->shares, dp)) return false;
  return m->pp < 2 || (r->cut_B && m->pp == r->plan.layout.pp && m->cut[m->pp] == gt_model_num_layers(model));
}

/* Under a leader, every rank after every step: rank 0 says whether the
 * leader's latest decision is new, with one small broadcast, so that all
 * apply it after the same step: its rows, and its pipeline cut if it has
 * one. */
static gt_status apply_led(run_rebalance *r, gt_trainer *tr, int step, bool lead) {
  int dp = r->plan.layout.dp, P = r->plan.layout.pp;
  size_t n = NOTE(dp);
  float *note = r->note_host;
  memset(note, 0, n * sizeof *note);
  gt_mitigation *m = r->link ? malloc(sizeof *m) : NULL;
  if (r->link && !m) return gt_errorf(GT_ENOMEM, "out of memory for a rebalancing decision");
  if (m && run_coord_link_latest(r->link, m) && m->epoch > r->epoch) {
    if (fits(r, gt_trainer_model(tr), m)) {
      note[0] = 1;
      note[1] = (float)m->epoch;
      for (int i = 0; i < dp; i++) note[2 + i] = (float)m->shares[i];
      note[2 + dp] = m->pp > 1;
      for (int s = 0; m->pp > 1 && s <= P; s++) note[3 + dp + s] = (float)m->cut[s];
    } else {
      gt_warn(
          "rebalance: the leader's epoch %lld does not fit this job (dp=%d, %d rows, at most %d a replica; "
          "pp=%d): ignored",
          (long long)m->epoch, dp, offset_of(r->shares, dp), r->cap, P);
      r->epoch = m->epoch;
    }
  }
  gt_status s = gt_backend_upload(r->be, r->note, note, n * sizeof *note);
  if (s == GT_OK) s = gt_comm_broadcast(r->world, r->note, n, GT_F32, 0);
  if (s == GT_OK) s = gt_backend_download(r->be, note, r->note, n * sizeof *note);
  if (s == GT_OK && note[0] == 1) {
    char why[256] = "";
    if (m)
      snprintf(why, sizeof why, "the leader's epoch %lld, term %lld, by %s", (long long)m->epoch, (long long)m->term,
               m->by);
    bool rows = false;
    for (int i = 0; i < dp; i++) {
      r->next[i] = (int)note[2 + i];
      rows |= r->next[i] != r->shares[i];
    }
    r->epoch = (int64_t)note[1];
    if (rows) s = switch_to(r, tr, step, lead, why);
    if (s == GT_OK && note[2 + dp] == 1) {
      int now[GT_REBALANCE_MAX_STAGES + 1], first[GT_REBALANCE_MAX_STAGES + 1];
      run_recut_now(gt_trainer_model(tr), P, now);
      for (int k = 0; k <= P; k++) first[k] = (int)note[3 + dp + k];
      if (memcmp(now, first, (size_t)(P + 1) * sizeof *now)) cut_to(r, now, first, step, lead, why);
    }
  }
  free(m);
  return s;
}

gt_status run_rebalance_after_step(run_rebalance *r, gt_trainer *tr, const gt_step_stats *st,
                                   const gt_failslow_report *fs_report, bool urge, bool lead) {
  size_t world = (size_t)r->plan.world;
  if (st->step < WARMUP) return GT_OK;                  /* every rank skips the same steps: the gathers stay matched */
  if (r->led) GT_TRY(apply_led(r, tr, st->step, lead)); /* every step, on every rank */
  if (fs_report && !fs_report->gathered) return GT_OK;  /* the monitor gathers on the same steps everywhere */
  if (r->filled == WINDOW) {
    memmove(r->ring, r->ring + world, (WINDOW - 1) * world * sizeof *r->ring);
    r->filled--;
  }
  gt_step_telemetry *slot = r->ring + (size_t)r->filled * world;
  if (fs_report)
    memcpy(slot, fs_report->telemetry, world * sizeof *slot);
  else
    GT_TRY(gather(r, &st->telemetry, slot));
  if (urge || cleared_now(fs_report)) r->urgent = true;
  if (++r->filled < WINDOW) return GT_OK;
  if (r->cut_B && !r->led) GT_TRY(decide_cut(r, tr, st->step, lead));
  if (r->cut_pending) return GT_OK; /* the cut first; rows are judged on the new one */
  return r->led ? publish(r, tr, st->step) : decide_here(r, tr, st->step, lead);
}
