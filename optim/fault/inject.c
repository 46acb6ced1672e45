/* GT_FAULT: playing the faults on this rank, at the hooks its users call
 * (fault.h). Kept apart from the parser so that the only code on a
 * training step's path is these few checks; like it, compiled only into a
 * build with fault points (GIANT_FAULTS). */
#include <math.h>
#include <signal.h>
#include <time.h>

#include "optim/fault/fault.h"
#include "giant/log.h"
#include "comm/delays.h"
#include "giant/engine/grid.h"

static bool mine(const gt_fault_plan *p, const gt_fault *f) { return f->rank < 0 || f->rank == p->rank; }

static void sleep_seconds(double s) {
  if (!(s > 0)) return;
  struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - floor(s)) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {}
}

bool gt_fault_active(const gt_fault_plan *p) {
  for (int i = 0; p && i < p->n; i++)
    if (mine(p, &p->f[i])) return true;
  return false;
}

double gt_fault_save_delay(const gt_fault_plan *p) {
  double s = 0;
  for (int i = 0; p && i < p->n; i++)
    if (p->f[i].kind == GT_FAULT_SLOWSAVE && mine(p, &p->f[i])) s += p->f[i].seconds;
  return s;
}

double gt_fault_join_hold(gt_fault_plan *p) {
  double s = 0;
  for (int i = 0; p && i < p->n; i++) {
    if (p->f[i].kind != GT_FAULT_HOLDJOIN || !mine(p, &p->f[i]) || p->stalled[i]) continue;
    p->stalled[i] = true;
    s += p->f[i].seconds;
  }
  return s;
}

bool gt_fault_nangrad(gt_fault_plan *p, int step) {
  bool due = false;
  for (int i = 0; p && i < p->n; i++) {
    const gt_fault *f = &p->f[i];
    if (f->kind != GT_FAULT_NANGRAD || !mine(p, f) || step != f->at || p->stalled[i]) continue;
    p->stalled[i] = true;
    gt_warn("GT_FAULT: rank %d puts a NaN into its gradients at step %d", p->rank, step);
    due = true;
  }
  return due;
}

double gt_fault_step(gt_fault_plan *p, int step, double compute_seconds, float *loss) {
  double slept = 0, floor_s = 0;
  for (int i = 0; p && i < p->n; i++) {
    const gt_fault *f = &p->f[i];
    if (!mine(p, f)) continue;
    switch (f->kind) {
      case GT_FAULT_SLOW:
        /* In proportion to this step's own compute: the factor holds at any
       * model size and on any device. */
        if (step >= f->from && (f->until < 0 || step < f->until)) slept += (f->factor - 1) * compute_seconds;
        break;
      case GT_FAULT_STALL:
        if (step == f->at && !p->stalled[i]) {
          p->stalled[i] = true;
          gt_warn("GT_FAULT: rank %d stalls for %.1f s at step %d", p->rank, f->seconds, step);
          slept += f->seconds;
        }
        break;
      case GT_FAULT_CRASH:
        if (step == f->at) {
          gt_warn("GT_FAULT: rank %d crashes at step %d", p->rank, step);
          raise(SIGKILL);
        }
        break;
      case GT_FAULT_NAN:
        if (step == f->at) *loss = NAN;
        break;
      case GT_FAULT_SLOWLINK: {
        /* The communicators play it; this only switches it on and off. */
        bool on = step >= f->from && (f->until < 0 || step < f->until);
        if (p->grid && f->rank == p->rank && on != p->link_on[i] &&
            gt_grid_set_send_delay(p->grid, f->peer, on ? f->delay_ms : 0) == GT_OK) {
          p->link_on[i] = on;
          gt_warn("GT_FAULT: sends from rank %d to rank %d %s at step %d", f->rank, f->peer,
                  on ? "delayed" : "no longer delayed", step);
        }
        break;
      }
      case GT_FAULT_SLOWSAVE: break; /* played by the checkpoint writer */
      case GT_FAULT_NANGRAD: break;  /* played by the trainer (gt_fault_nangrad) */
      case GT_FAULT_CRASH_RESHAPE:
      case GT_FAULT_STALL_RESHAPE: break; /* played at gt_fault_reshape_point */
      case GT_FAULT_HOLDJOIN: break;      /* played where joins are looked for (gt_fault_join_hold) */
      case GT_FAULT_PACE:
        /* A floor, not a factor: a job of N steps lasts at least N * step_ms
       * on any machine, so that a test can act on it before it ends. */
        if (step >= f->from && (f->until < 0 || step < f->until) && f->step_ms / 1e3 > floor_s)
          floor_s = f->step_ms / 1e3;
        break;
    }
  }
  if (compute_seconds + slept < floor_s) slept = floor_s - compute_seconds;
  sleep_seconds(slept);
  return slept;
}

gt_status gt_fault_apply_links(gt_fault_plan *p, gt_grid *grid) {
  p->grid = grid;
  for (int i = 0; i < p->n; i++) {
    const gt_fault *f = &p->f[i];
    if (f->kind != GT_FAULT_SLOWLINK || f->rank != p->rank) continue;
    if (!grid) {
      gt_warn("GT_FAULT: slowlink from rank %d to %d needs a job of several ranks; this one runs alone", f->rank,
              f->peer);
      continue;
    }
    /* Checked now (a peer outside the world, NCCL), played from `from`. */
    gt_status s = gt_grid_set_send_delay(grid, f->peer, 0);
    if (s != GT_OK) return gt_error_context(s, "GT_FAULT slowlink:rank=%d,peer=%d", f->rank, f->peer);
    gt_info("GT_FAULT: sends from rank %d to rank %d will be delayed by %.1f ms from step %d", f->rank, f->peer,
            f->delay_ms, f->from);
  }
  return GT_OK;
}

void gt_fault_reshape_point(const gt_fault_plan *p) {
  for (int i = 0; i < p->n; i++) {
    if (!mine(p, &p->f[i])) continue;
    if (p->f[i].kind == GT_FAULT_CRASH_RESHAPE) {
      gt_warn("GT_FAULT: rank %d crashes in the middle of a reshape", p->rank);
      raise(SIGKILL);
    }
    if (p->f[i].kind == GT_FAULT_STALL_RESHAPE) {
      gt_warn("GT_FAULT: rank %d stalls for %.1f s in the middle of a reshape", p->rank, p->f[i].seconds);
      struct timespec ts = {(time_t)p->f[i].seconds, (long)((p->f[i].seconds - (double)(time_t)p->f[i].seconds) * 1e9)};
      nanosleep(&ts, NULL);
    }
  }
}
