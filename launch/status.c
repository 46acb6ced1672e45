/* giantrun --status: the live state of a job, read from etcd — its
 * generation and layout, each node and rank with its last step and step
 * time, the fail-slow verdicts and the mitigation decided, the newest
 * committed checkpoint and the ETA (docs/observability.md). --watch
 * prints it again every second, in place, until the job ends or a
 * signal stops it. Each etcd call has a 5 s deadline, so that an
 * unreachable etcd is told within it. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "giant/engine/coord.h"
#include "giant/engine/etcd.h"
#include "giant/engine/progress.h"
#include "launch/agent.h"

#define CALL_MS 2500 /* a get answers in far less; with connecting, within the 5 s promised */
#define MAX_RANKS 4096
#define MAX_HEALTH 4096
/* A rank silent this long is marked: its record is the last it wrote. */
#define SILENT_S 10.0

static double unix_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The value of one key as a string ("" when absent); *found says which. */
static gt_status get_text(gt_etcd_client *c, const char *key, char *out, size_t n, int *found) {
  gt_etcd_kvs kvs;
  GT_TRY(gt_etcd_get(c, key, NULL, &kvs));
  *found = kvs.n > 0;
  out[0] = '\0';
  if (kvs.n) {
    size_t len = kvs.kvs[0].value_len < n - 1 ? kvs.kvs[0].value_len : n - 1;
    memcpy(out, kvs.kvs[0].value, len);
    out[len] = '\0';
    for (char *p = out; *p; p++)
      if (*p == '\n') *p = (p[1] ? ';' : '\0'); /* one line */
  }
  gt_etcd_kvs_free(&kvs);
  return GT_OK;
}

static void print_duration(FILE *f, double s) {
  if (s < 0 || !isfinite(s)) {
    fprintf(f, "unknown");
    return;
  }
  long t = (long)(s + 0.5);
  if (t >= 86400)
    fprintf(f, "%ldd %02ldh %02ldm", t / 86400, t % 86400 / 3600, t % 3600 / 60);
  else if (t >= 3600)
    fprintf(f, "%ldh %02ldm %02lds", t / 3600, t % 3600 / 60, t % 60);
  else
    fprintf(f, "%ldm %02lds", t / 60, t % 60);
}

/* The nodes of generation gen, from its closed round ("<node> <nproc>"
 * lines): "a (2 workers), b (2 workers)". */
static gt_status print_nodes(gt_etcd_client *c, const char *job, long gen, FILE *f) {
  char key[256], text[4096];
  int found;
  snprintf(key, sizeof key, "/giant/%s/gen%ld/closed", job, gen);
  GT_TRY(get_text(c, key, text, sizeof text, &found));
  fprintf(f, "nodes:");
  if (!found || !text[0]) {
    fprintf(f, " none yet (the round is still forming)\n");
    return GT_OK;
  }
  int k = 0;
  for (char *save = NULL, *tok = strtok_r(text, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
    char node[128];
    int nproc;
    if (sscanf(tok, "%127s %d", node, &nproc) == 2)
      fprintf(f, "%s %s (%d worker%s)", k++ ? "," : "", node, nproc, nproc == 1 ? "" : "s");
  }
  fprintf(f, "\n");
  return GT_OK;
}

static const char *state_name(gt_health_state s) {
  return s == GT_HEALTH_SLOW       ? "slow"
         : s == GT_HEALTH_STOPPED  ? "stopped"
         : s == GT_HEALTH_EXCLUDED ? "excluded"
                                   : "ok";
}

static const gt_health_record *health_of(const gt_health_record *h, int nh, int rank) {
  for (int i = 0; i < nh; i++)
    if (h[i].rank == rank) return &h[i];
  return NULL;
}

/* The ranks of the job's record's generation and world, one line each. */
static void print_ranks(const gt_progress_job *job, const gt_progress_rank *rk, int nr, const gt_health_record *h,
                        int nh, double now, FILE *f) {
  fprintf(f, "%-6s %-20s %-8s %10s %10s  %s\n", "rank", "node", "pid", "step", "step_ms", "health");
  for (int i = 0; i < nr; i++) {
    const gt_progress_rank *p = &rk[i];
    if (p->gen != job->gen || p->world != job->world || p->rank >= job->world) continue;
    char health[160] = "ok";
    const gt_health_record *hr = health_of(h, nh, p->rank);
    if (hr && hr->state != GT_HEALTH_OK)
      snprintf(health, sizeof health, "%s %s x%.2f at step %" PRId64, state_name(hr->state),
               hr->kind == GT_HEALTH_LINK ? "link" : "compute", hr->ratio, hr->step);
    size_t at = strlen(health);
    if (now - p->time > SILENT_S) snprintf(health + at, sizeof health - at, ", silent for %.0f s", now - p->time);
    fprintf(f, "%-6d %-20s %-8d %10" PRId64 " %10.1f  %s\n", p->rank, p->node[0] ? p->node : "-", p->pid, p->step,
            p->step_ms, health);
  }
}

/* One look at the job into f. *ended: the job is over (its done key).
 * GT_ENOTFOUND when etcd knows nothing of it. */
static gt_status look(gt_etcd_client *c, const agent_opts *o, FILE *f, int *ended) {
  const char *job = o->job_id;
  char key[256], current[128], done[512], leader[256];
  int have_current, have_done, have_leader;
  *ended = 0;
  snprintf(key, sizeof key, "/giant/%s/current", job);
  GT_TRY(get_text(c, key, current, sizeof current, &have_current));
  snprintf(key, sizeof key, "/giant/%s/done", job);
  GT_TRY(get_text(c, key, done, sizeof done, &have_done));
  gt_progress_job pj;
  int have_progress = 0;
  gt_status ps = gt_progress_get_job(c, job, &pj, &have_progress);
  if (!have_current && !have_done && !have_progress)
    return gt_errorf(GT_ENOTFOUND,
                     "etcd at %s knows no job '%s' (no /giant/%s/current): check --job-id, and that the job "
                     "runs against this etcd",
                     o->endpoint, job, job);
  snprintf(key, sizeof key, "/giant/%s/leader", job);
  GT_TRY(get_text(c, key, leader, sizeof leader, &have_leader));
  long gen = 0;
  int restarts = 0;
  if (have_current) sscanf(current, "%ld %d", &gen, &restarts);
  fprintf(f, "job %s on %s: ", job, o->endpoint);
  if (have_done)
    fprintf(f, "ended (%s)\n", done);
  else
    fprintf(f, "running, generation %ld (%d restart%s), leader %s\n", gen, restarts, restarts == 1 ? "" : "s",
            have_leader ? leader : "none");
  *ended = have_done;
  if (!have_done) GT_TRY(print_nodes(c, job, gen, f));
  if (ps != GT_OK) fprintf(f, "progress: unreadable: %s\n", gt_last_error());
  if (!have_progress) {
    if (!have_done) fprintf(f, "progress: no step taken yet\n");
    return GT_OK;
  }
  double now = unix_now();
  fprintf(f, "layout: dp=%d tp=%d pp=%d (world %d, generation %ld)\n", pj.dp, pj.tp, pj.pp, pj.world, pj.gen);
  fprintf(f, "step %" PRId64 " of %" PRId64 " (%.1f%%), %.1f ms a step, %.0f tokens/s, MFU %.1f%%", pj.step, pj.steps,
          pj.steps ? 100.0 * (double)pj.step / (double)pj.steps : 0.0, pj.step_ms, pj.tokens_per_s, pj.mfu * 100);
  if (pj.loss >= 0) fprintf(f, ", loss %.4f", pj.loss);
  fprintf(f, " (%.0f s ago)\n", now - pj.time);
  fprintf(f, "ETA: ");
  print_duration(f, pj.eta_s);
  fprintf(f, "\ncheckpoint: ");
  if (pj.ckpt >= 0)
    fprintf(f, "step-%08" PRId64 " (the newest committed)\n", pj.ckpt);
  else
    fprintf(f, "none committed in this run yet\n");
  gt_progress_rank *rk = malloc(MAX_RANKS * sizeof *rk);
  gt_health_record *h = malloc(MAX_HEALTH * sizeof *h);
  gt_mitigation *m = malloc(sizeof *m);
  gt_status s = rk && h && m ? GT_OK : gt_errorf(GT_ENOMEM, "out of memory");
  int nr = 0, bad = 0, nh = 0, found = 0;
  if (s == GT_OK) s = gt_progress_list_ranks(c, job, rk, MAX_RANKS, &nr, &bad);
  if (s == GT_OK) s = gt_health_list(c, job, h, MAX_HEALTH, &nh);
  if (s == GT_OK) s = gt_mitigation_get(c, job, m, &found);
  if (s == GT_OK) {
    print_ranks(&pj, rk, nr, h, nh, now, f);
    if (bad) fprintf(f, "(%d progress record%s unreadable)\n", bad, bad == 1 ? "" : "s");
    int flagged = 0;
    for (int i = 0; i < nh; i++) flagged += h[i].state != GT_HEALTH_OK;
    fprintf(f, "fail-slow: %d of %d rank record%s flagged\n", flagged, nh, nh == 1 ? "" : "s");
    if (found)
      gt_mitigation_print(m, f);
    else
      fprintf(f, "mitigation: none decided\n");
  }
  free(rk);
  free(h);
  free(m);
  return s;
}

int agent_status(const agent_opts *o) {
  gt_etcd_config cfg = {.endpoints = o->endpoint,
                        .cacert = o->cacert,
                        .cert = o->cert,
                        .key = o->key,
                        .user = o->user,
                        .password = o->user ? o->password : NULL,
                        .timeout_ms = CALL_MS};
  gt_etcd_client *c;
  gt_status s = gt_etcd_connect(&cfg, &c);
  if (s != GT_OK) {
    fprintf(stderr, "giantrun --status: cannot reach etcd at %s: %s\n", o->endpoint, gt_last_error());
    return 1;
  }
  int code = 0, first = 1;
  for (;;) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
      fprintf(stderr, "giantrun --status: out of memory\n");
      code = 1;
      break;
    }
    int ended = 0;
    s = look(c, o, f, &ended);
    fclose(f);
    if (s != GT_OK) {
      if (s == GT_ENOTFOUND)
        fprintf(stderr, "giantrun --status: %s\n", gt_last_error());
      else
        fprintf(stderr, "giantrun --status: reading job '%s' from etcd at %s: %s\n", o->job_id, o->endpoint,
                gt_last_error());
      free(text);
      code = 1;
      break;
    }
    /* In place: home, the text, then clear what an older, longer text
     * left below it. */
    if (o->watch) fputs(first ? "\033[H\033[2J" : "\033[H", stdout);
    first = 0;
    fwrite(text, 1, len, stdout);
    if (o->watch) fputs("\033[J", stdout);
    fflush(stdout);
    free(text);
    if (!o->watch || ended) break;
    for (int i = 0; i < 10 && !agent_stop_signal; i++) usleep(100000);
    if (agent_stop_signal) {
      code = 128 + agent_stop_signal;
      break;
    }
  }
  gt_etcd_close(c);
  return code;
}
