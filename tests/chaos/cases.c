/* The chaos cases (cases.h). Each starts a job on CHAOS_NODES emulated
 * nodes of CHAOS_NPROC workers (dp over all of them, or a layout with tp
 * or pp where the case allows), plays its fault, and
 * checks the outcome; then check_job checks what every case must show. */
#include "chaos/cases.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "giant/data.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void failf(chaos_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failf(chaos_result *r, const char *fmt, ...) {
  if (!r->passed && r->why[0]) return; /* the first failure is the one to read */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->why, sizeof r->why, fmt, ap);
  va_end(ap);
  r->passed = false;
}

/* The tail of the job's output, for a failure message. */
static const char *tail(const chaos_job *j) {
  if (!j->out) return "";
  FILE *dump = getenv("CHAOS_DUMP") ? fopen(getenv("CHAOS_DUMP"), "w") : NULL;
  if (dump) {
    fputs(j->out, dump);
    fclose(dump);
  }
  size_t n = strlen(j->out);
  return n > 2500 ? j->out + n - 2500 : j->out;
}

#define REQUIRE(j, cond, ...)                                                                   \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      failf(r, __VA_ARGS__);                                                                    \
      size_t used_ = strlen(r->why);                                                            \
      snprintf(r->why + used_, sizeof r->why - used_, "\n--- job output (tail):\n%s", tail(j)); \
      return;                                                                                   \
    }                                                                                           \
  } while (0)

/* Every "PROGRAM: reshaped in X ms ... rank R of W in membership epoch E"
 * line: how many name `of world`, and the slowest. */
static int reshaped(const char *out, int world, double *slowest_ms) {
  int n = 0;
  char want[48];
  snprintf(want, sizeof want, " of %d in membership epoch", world);
  *slowest_ms = 0;
  for (const char *p = out ? strstr(out, ": reshaped in ") : NULL; p; p = strstr(p + 1, ": reshaped in ")) {
    const char *eol = strchr(p, '\n'), *w = strstr(p, want);
    if (!w || (eol && w > eol)) continue;
    n++;
    double ms = atof(p + strlen(": reshaped in "));
    if (ms > *slowest_ms) *slowest_ms = ms;
  }
  return n;
}

/* Counts the lines of out that hold `what`. */
static int count_of(const char *out, const char *what) {
  int n = 0;
  for (const char *p = out ? strstr(out, what) : NULL; p; p = strstr(p + 1, what)) n++;
  return n;
}

/* The cases' bounds; each wait ends on its event, so a case that passes
 * waits no longer for them. Measured on two cores: the quick cases take
 * 5 to 60 s each, twice that beside a busy loop on each core.
 * A job's start to its first 20 steps (three agents meet, six workers
 * start and connect): ~2 s, ~5 s loaded. */
#define START_S 120
/* A fault to the steps after it: an in-process reshape (< 0.5 s), after a
 * lease's lapse (4 s) where an agent or a node is lost: ~5 s measured,
 * under 10 s loaded. */
#define RECOVER_S 120
/* What is left of a job that ended, or of a SIGKILLed agent (its workers
 * die with it, PR_SET_PDEATHSIG), goes in ms: 10 s is > 100x. */
#define GONE_S 10
/* A job of 20 to 40 steps, whole: 5 to 10 s, ~20 s loaded: 240 s is > 10x. */
#define SHORT_JOB_S 240

/* What every case checks once its job ended: exit codes (want[i], or -3
 * for "any"), the final loss against one process without faults (relative
 * tolerance tol), the ledger and its steps lost, no process of the job
 * left, and only the documented records left in etcd. */
static void check_job(chaos_job *j, chaos_result *r, const int *want, double tol, int max_lost) {
  for (int i = 0; i < j->cfg.nodes; i++)
    REQUIRE(j, want[i] == -3 || j->code[i] == want[i], "node %d's agent exited %d, expected %d", i, j->code[i],
            want[i]);
  char why[1024];
  float loss = chaos_final_loss(j->out, j->cfg.steps);
  REQUIRE(j, !isnan(loss), "no final loss line for step %d", j->cfg.steps);
  float ref = chaos_reference_loss(j->env, &j->cfg, why, sizeof why);
  REQUIRE(j, !isnan(ref), "%s", why);
  double rel = fabs((double)loss - ref) / fabs((double)ref);
  REQUIRE(j, rel <= tol, "final loss %.7f, one process without faults %.7f: relative difference %.2e > %.0e", loss, ref,
          rel, tol);
  int lost = 0;
  REQUIRE(j, chaos_ledger(j, &lost, why, sizeof why) == 0, "sample ledger: %s", why);
  REQUIRE(j, lost <= max_lost, "%d step runs lost, at most %d expected", lost, max_lost);
  r->steps_lost = lost;
  int procs = 0;
  for (double end = now_s() + GONE_S; (procs = chaos_job_processes(j)) > 0 && now_s() < end;) usleep(50000);
  REQUIRE(j, procs == 0, "%d process(es) of the job still running", procs);
  REQUIRE(j, chaos_job_keys(j, why, sizeof why) == 0, "etcd: %s", why);
  r->kept_s = chaos_kept_seconds(j);
  r->job_s = j->t_end - j->t0;
  size_t used = strlen(r->summary);
  snprintf(r->summary + used, sizeof r->summary - used,
           "%sfinal loss %.6f vs %.6f without faults (rel %.1e); ledger whole, %d step run(s) lost", used ? "; " : "",
           loss, ref, rel, lost);
  r->passed = true;
}

static chaos_job_cfg base(const char *name, int steps) {
  return (chaos_job_cfg){.name = name, .nodes = CHAOS_NODES, .nproc = CHAOS_NPROC, .steps = steps};
}

static const int ALL_OK[CHAOS_MAX_NODES] = {0};
#define WORLD (CHAOS_NODES * CHAOS_NPROC)
/* Across layouts (a reshape changes the replicas and the accumulation),
 * sums are ordered differently: the tolerance of test_reshape. */
#define CROSS_LAYOUT_TOL 1e-5
/* Jobs of thousands of steps (those that must outlast a fault of 10-30 s):
 * the reordered sums of six replicas against one process drift further
 * (4.6e-4 seen after 1500 steps without any fault). */
#define LONG_RUN_TOL 2e-3

/* ---- SIGKILL a worker: in-process reshape, at most the step in flight lost. */
static void case_kill_worker(chaos_env *env, chaos_result *r) {
  enum { STEPS = 24, AT = 10 };
  chaos_job_cfg c = base("kill-worker", STEPS);
  /* Tensor parallel within each node; 5 ranks go on at dp=5. custom_layer's
   * layer has no tensor-parallel split: it runs at dp=6. */
  c.plan = strcmp(env->prog_name, "gpt") ? NULL : "dp=3,tp=2";
  c.fault = "crash:rank=3,at=10";
  chaos_job j;
  REQUIRE(&j, chaos_job_start(&j, env, &c) == 0, "cannot start the job");
  chaos_job_wait_step(&j, AT - 1, START_S);
  double t_fault = now_s();
  int after = chaos_job_wait_step(&j, AT + 1, RECOVER_S);
  r->recover_ms = after >= 0 ? (now_s() - t_fault) * 1e3 : -1;
  chaos_job_wait(&j, SHORT_JOB_S);
  double ms;
  int n = reshaped(j.out, WORLD - 1, &ms);
  snprintf(r->summary, sizeof r->summary, "rank 3 killed at step %d; %d ranks reshaped in-process (slowest %.0f ms)",
           AT, n, ms);
  if (n != WORLD - 1) {
    failf(r, "%d ranks reshaped to %d, expected %d\n%s", n, WORLD - 1, WORLD - 1, tail(&j));
  } else {
    check_job(&j, r, ALL_OK, CROSS_LAYOUT_TOL, 1);
  }
  chaos_job_free(&j);
}

/* ---- SIGKILL a node's only worker (one worker a node, as on nodes of one
 * GPU): the other nodes' ranks reshape in-process (dp=2), as for one of
 * several; its agent restarts it alone and it joins the running job (dp=3
 * again). The job never restarts a generation. Every step takes at least
 * 100 ms (GT_FAULT pace): the 110 steps after the fault (11 s) outlast the
 * restart and the join (~0.3 s measured, a few s loaded) on any machine;
 * few steps, so that the loss stays within CROSS_LAYOUT_TOL of one
 * process (600 steps of dp=3 drift 3e-3 from it without any fault). */
static void case_kill_lone_worker(chaos_env *env, chaos_result *r) {
  enum { STEPS = 120, AT = 10, RANK = 1 };
  chaos_job_cfg c = base("kill-lone-worker", STEPS);
  c.nproc = 1;
  c.fault = "crash:rank=1,at=10;pace:rank=all,ms=100";
  chaos_job j;
  REQUIRE(&j, chaos_job_start(&j, env, &c) == 0, "cannot start the job");
  chaos_job_wait_step(&j, AT - 1, START_S);
  double t_fault = now_s();
  int after = chaos_job_wait_step(&j, AT + 1, RECOVER_S);
  r->recover_ms = after >= 0 ? (now_s() - t_fault) * 1e3 : -1;
  chaos_job_wait(&j, SHORT_JOB_S);
  double ms, back_ms;
  int n = reshaped(j.out, c.nodes - 1, &ms), back = reshaped(j.out, c.nodes, &back_ms);
  /* A generation left, or a node's workers stopped for one: a restart. */
  int restarts = count_of(j.out, "giantrun: leaving gen") + count_of(j.out, "stopping this node's workers");
  bool alone = j.out && strstr(j.out, "giantrun: worker rank 1 restarted alone");
  snprintf(r->summary, sizeof r->summary,
           "node %d's only worker (rank %d) killed at step %d; %d ranks reshaped in-process without it (slowest "
           "%.0f ms); it %s; %d ranks reshaped with it back; %d generation restart(s)",
           RANK, RANK, AT, n, ms, alone ? "restarted alone" : "was NOT restarted alone", back, restarts);
  if (after < 0 || n != c.nodes - 1 || !alone || back != c.nodes || restarts != 0) {
    failf(r, "%s\n%s", r->summary, tail(&j));
  } else {
    check_job(&j, r, ALL_OK, CROSS_LAYOUT_TOL, 1);
  }
  chaos_job_free(&j);
}

/* ---- SIGKILL an agent: its workers go with it; the others reshape. */
static void case_kill_agent(chaos_env *env, chaos_result *r) {
  enum { STEPS = 40, AT = 8, NODE = 2 };
  chaos_job_cfg c = base("kill-agent", STEPS);
  c.plan = "dp=3,pp=2"; /* two pipeline stages; the 4 ranks left go on at dp=2,pp=2 */
  chaos_job j;
  REQUIRE(&j, chaos_job_start(&j, env, &c) == 0, "cannot start the job");
  int at = chaos_job_wait_step(&j, AT, START_S);
  double t_fault = now_s();
  kill(j.agent[NODE], SIGKILL);
  int code = chaos_job_wait_node(&j, NODE, GONE_S);
  /* Its workers die with it (PR_SET_PDEATHSIG): nothing of it is left. */
  int left = -1;
  for (double end = now_s() + GONE_S; (left = chaos_node_processes(env, NODE)) != 0 && now_s() < end;) usleep(50000);
  int after = at >= 0 ? chaos_job_wait_step(&j, at + 2, RECOVER_S) : -1;
  r->recover_ms = after >= 0 ? (now_s() - t_fault) * 1e3 : -1;
  chaos_job_wait(&j, SHORT_JOB_S);
  double ms;
  int n = reshaped(j.out, WORLD - CHAOS_NPROC, &ms);
  snprintf(r->summary, sizeof r->summary,
           "node %d's agent killed at step %d: its %d workers gone with it; %d ranks reshaped in-process "
           "(slowest %.0f ms) once its lease lapsed",
           NODE, at, CHAOS_NPROC, n, ms);
  int want[CHAOS_MAX_NODES] = {0, 0, 128 + SIGKILL};
  if (code != 128 + SIGKILL || left != 0) {
    failf(r, "agent exit %d, %d process(es) left in its namespace\n%s", code, left, tail(&j));
  } else if (n != WORLD - CHAOS_NPROC) {
    failf(r, "%d ranks reshaped to %d, expected %d\n%s", n, WORLD - CHAOS_NPROC, WORLD - CHAOS_NPROC, tail(&j));
  } else {
    check_job(&j, r, want, CROSS_LAYOUT_TOL, 1);
  }
  chaos_job_free(&j);
}

/* ---- a rank slowed x3: detected within 10 steps, and left out (S3). */
static void case_slow_rank(chaos_env *env, chaos_result *r) {
  enum { STEPS = 80, ONSET = 15, SLOW = 4 };
  chaos_job_cfg c = base("slow-rank", STEPS);
  c.fault = "slow:rank=4,factor=3,from=15";
  c.model_flags = "--layers 4 --channels 64 --seq 64"; /* compute enough to time against the links */
  c.gpt_flags = "--failslow --failslow-clock cpu";     /* the emulated nodes share this machine's cores */
  chaos_job j;
  REQUIRE(&j, chaos_job_start(&j, env, &c) == 0, "cannot start the job");
  chaos_job_wait(&j, 400); /* 80 steps of a larger model, one rank x3 for a few: ~10 s, ~25 s loaded */
  char line[96];
  snprintf(line, sizeof line, "[rank %d] %s: excluded after step ", SLOW, env->prog_name);
  const char *gone = j.out ? strstr(j.out, line) : NULL;
  int left_at = gone ? atoi(gone + strlen(line)) : -1;
  double ms;
  int n = reshaped(j.out, WORLD - 1, &ms);
  snprintf(r->summary, sizeof r->summary,
           "rank %d slowed x3 from step %d: left out after step %d (%d steps); %d ranks reshaped without it", SLOW,
           ONSET, left_at, left_at - ONSET, n);
  r->recover_ms = ms;
  if (left_at < 0 || left_at > ONSET + 10) {
    failf(r, "rank %d not left out within 10 steps of the onset (step %d): after step %d\n%s", SLOW, ONSET, left_at,
          tail(&j));
  } else if (n != WORLD - 1) {
    failf(r, "%d ranks reshaped to %d, expected %d\n%s", n, WORLD - 1, WORLD - 1, tail(&j));
  } else {
    /* No step is lost: the rank leaves at a step boundary. */
    check_job(&j, r, ALL_OK, CROSS_LAYOUT_TOL, 0);
  }
  chaos_job_free(&j);
}

/* ---- a slow link: node 2's own link limited to 20 Mbit/s each way (a tc
 * token bucket on both ends): the fail-slow monitor flags both its ranks
 * as behind a slow link (not a pair, not compute); the ladder leaves them
 * out (S3), and the four others go on without the link. */
static void case_slow_link(chaos_env *env, chaos_result *r) {
  enum { STEPS = 150, AT = 20, NODE = 2, RATE_KBIT = 20000 };
  chaos_job_cfg c = base("slow-link", STEPS);
  c.gpt_flags = "--failslow --failslow-clock cpu"; /* the emulated nodes share this machine's cores */
  chaos_job j;
  REQUIRE(&j, chaos_job_start(&j, env, &c) == 0, "cannot start the job");
  int at = chaos_job_wait_step(&j, AT, START_S);
  int limited = chaos_net_limit(&env->net, NODE, RATE_KBIT);
  REQUIRE(&j, limited == 0, "tc could not limit node %d's link (status %d)", NODE, limited);
  /* 150 steps, each a few tens of ms through the limited link until the
   * node is left out: ~10 s, ~30 s loaded; 400 s is > 10x. */
  chaos_job_wait(&j, 400);
  /* Both of its ranks flagged, at the same step; the step it was left out. */
  int flagged = 0, step = -1, left_at = -1;
  for (int k = 0; k < CHAOS_NPROC; k++) {
    char line[96];
    snprintf(line, sizeof line, "fail-slow: link of rank %d (to every other node) x", NODE * CHAOS_NPROC + k);
    const char *p = j.out ? strstr(j.out, line) : NULL;
    const char *f = p ? strstr(p, "(flagged at step ") : NULL;
    if (f) {
      flagged++;
      step = atoi(f + strlen("(flagged at step "));
    }
    snprintf(line, sizeof line, "[rank %d] %s: excluded after step ", NODE * CHAOS_NPROC + k, env->prog_name);
    const char *e = j.out ? strstr(j.out, line) : NULL;
    if (e) left_at = atoi(e + strlen(line));
  }
  double ms;
  int n = reshaped(j.out, WORLD - CHAOS_NPROC, &ms),
      pairs = count_of(j.out, "fail-slow: link ") - count_of(j.out, "fail-slow: link of rank ");
  /* Compute verdicts: on the ranks behind the link (the fault taken for
   * the wrong kind), and any the ladder acted on. A rank of the four left,
   * on steps of 3 ms (it holds one row of six), was seen
   * x1.35 in CPU time for 25 steps, 75 steps after the exclusion, in 1 of
   * 8 runs: a true reading of a small burst, which the ladder rightly left
   * as is (leaving it out would have saved 0.1 ms of 3.3); that is no
   * failure of this case. */
  int compute = count_of(j.out, " compute x"), compute_node = 0, acted = 0;
  for (int k = 0; k < CHAOS_NPROC; k++) {
    char line[64];
    snprintf(line, sizeof line, "fail-slow: rank %d compute x", NODE * CHAOS_NPROC + k);
    compute_node += count_of(j.out, line);
  }
  for (const char *p = j.out ? strstr(j.out, "ladder: rank ") : NULL; p; p = strstr(p + 1, "ladder: rank ")) {
    size_t len = strcspn(p, "\n");
    acted += !(len >= 7 && !strncmp(p + len - 7, ": as is", 7));
  }
  r->recover_ms = ms; /* the reshape without them, as for a slow rank */
  /* The ladder's numbers, as the lead logged them. */
  char ladder[200] = "no ladder line";
  const char *lp = j.out ? strstr(j.out, "predicted ms per step over ") : NULL;
  if (lp) snprintf(ladder, sizeof ladder, "%.*s", (int)strcspn(lp, "\n"), lp);
  snprintf(r->summary, sizeof r->summary,
           "node %d's link limited to %d Mbit/s at step %d: %d of its %d ranks flagged behind a slow link at step "
           "%d (%d pair and %d compute verdicts, %d on its ranks, %d acted on); left out after step %d (%s); %d "
           "ranks reshaped without them",
           NODE, RATE_KBIT / 1000, at, flagged, CHAOS_NPROC, step, pairs, compute, compute_node, acted, left_at, ladder,
           n);
  /* The first compute verdict's line, which the tail of the output may
   * not hold. */
  char verdict[400] = "";
  const char *cv = compute && j.out ? strstr(j.out, " compute x") : NULL;
  while (cv && cv > j.out && cv[-1] != '\n') cv--;
  if (cv) snprintf(verdict, sizeof verdict, "first compute verdict: %.*s\n", (int)strcspn(cv, "\n"), cv);
  if (at < 0 || flagged != CHAOS_NPROC || pairs != 0 || compute_node != 0 || acted != 0 || left_at < 0 ||
      n != WORLD - CHAOS_NPROC)
    failf(r, "%s\n%s%s", r->summary, verdict, tail(&j));
  else
    check_job(&j, r, ALL_OK, CROSS_LAYOUT_TOL, 0);
  chaos_job_free(&j);
}

/* ---- a node partitioned, then healed: the others go on; it does not
 * train alone; healed, it rejoins the running generation in-process (its
 * workers join; nobody restarts). The link stays down until the others
 * have gone on without it and it has stopped its workers (a lease TTL,
 * 4 s, each), and at least MIN_CUT_S. Every step takes at least 8 ms
 * (GT_FAULT pace), so the job outlasts the cut and the rejoin on however
 * fast a machine. */
static void case_partition(chaos_env *env, chaos_result *r) {
  /* MAX_CUT_S bounds the wait for the others to go on and for the node to
   * stop its workers: each a lease's lapse (4 s) and a reshape, ~6 s
   * measured, under 10 s loaded: 120 s is > 10x. */
  enum { NODE = 2, MIN_CUT_S = 8, MAX_CUT_S = 120, STEPS = 3000 };
  static const char PACE[] = "pace:rank=all,ms=8";
  char flags[320];
  snprintf(flags, sizeof flags, "--ckpt-dir %s/partition-ckpt --ckpt-every 10", env->dir);
  chaos_job_cfg c = base("partition", 0);
  c.steps = STEPS; /* 24 s at the least */
  c.fault = PACE;
  c.gpt_flags = flags;
  chaos_job j;
  REQUIRE(&j, chaos_job_start(&j, env, &c) == 0, "cannot start the job");
  int at = chaos_job_wait_step(&j, 20, START_S);
  double t_fault = now_s();
  chaos_sh("ip link set %s down", env->net.veth[NODE]);
  int after = at >= 0 ? chaos_job_wait_step(&j, at + 3, MAX_CUT_S) : -1;
  r->recover_ms = after >= 0 ? (now_s() - t_fault) * 1e3 : -1;
  double left = MAX_CUT_S - (now_s() - t_fault);
  chaos_job_wait_log(&j, NODE, "its workers stop, and it rejoins when etcd answers", left > 0 ? left : 0);
  while (now_s() - t_fault < MIN_CUT_S) usleep(100000);
  double cut_s = now_s() - t_fault;
  /* While cut off, its workers trained nothing on their own: its ranks
   * got no further than the step in flight when the link went. */
  int alone = -1;
  for (int k = 0; k < CHAOS_NPROC; k++) {
    int s = chaos_rank_last_step(&j, NODE * CHAOS_NPROC + k);
    if (s > alone) alone = s;
  }
  chaos_sh("ip link set %s up", env->net.veth[NODE]);
  /* The rest of 3000 paced steps and the rejoin: ~45 s, ~70 s beside busy
   * loops on both cores: 900 s is > 10x. */
  chaos_job_wait(&j, 900);
  double ms, back_ms;
  int n = reshaped(j.out, WORLD - CHAOS_NPROC, &ms), back = reshaped(j.out, WORLD, &back_ms);
  bool stopped = j.out && strstr(j.out, "its workers stop, and it rejoins when etcd answers");
  bool rejoined = j.out && strstr(j.out, "is node 2 of 3 in gen0; ranks 4..5 of 6 running, joining the running job");
  int restarts = count_of(j.out, "is node 0 of 3 in gen");
  snprintf(r->summary, sizeof r->summary,
           "node %d cut off at step %d for %.1f s: %d ranks went on without it (slowest reshape %.0f ms); it %s its "
           "workers and %s; %d ranks reshaped when it was back; %d generation(s)",
           NODE, at, cut_s, n, ms, stopped ? "stopped" : "did NOT stop",
           rejoined ? "rejoined the running gen0" : "did NOT rejoin gen0", back, restarts);
  if (alone > at + 2) {
    failf(r, "node %d's ranks reached step %d while cut off at step %d: they trained on their own\n%s", NODE, alone, at,
          tail(&j));
  } else if (n != WORLD - CHAOS_NPROC || !stopped || !rejoined || back != WORLD || restarts != 1) {
    failf(r, "%s\n%s", r->summary, tail(&j));
  } else {
    check_job(&j, r, ALL_OK, LONG_RUN_TOL, 1);
  }
  chaos_job_free(&j);
}

/* ---- SIGSTOP a worker for 30 s, then SIGCONT: its agent finds it stopped
 * with no step for 3 of its usual steps (at least 2 s) and kills it; the
 * others reshape without it, and it comes back alone and joins. */
static void case_sigstop(chaos_env *env, chaos_result *r) {
  enum { RANK = 3, STOP_S = 30, AT = 20 };
  chaos_job_cfg c = base("sigstop", 5000);
  /* The hang detector must not fire on a live worker: under --reshape it
   * waits twice this, 20 s, against steps of ms and a reshape or rejoin
   * of ~1 s (a few loaded): > 10x. */
  c.agent_flags = "--hang-timeout 10";
  chaos_job j;
  REQUIRE(&j, chaos_job_start(&j, env, &c) == 0, "cannot start the job");
  int at = chaos_job_wait_step(&j, AT, START_S);
  pid_t pid = chaos_worker_pid(&j, RANK);
  double t_fault = now_s();
  if (pid > 0) kill(pid, SIGSTOP);
  /* Found stopped after 3 usual steps (at least 2 s), then a reshape: a
   * few seconds; 60 s is > 10x. */
  int after = at >= 0 ? chaos_job_wait_step(&j, at + 3, 60) : -1;
  r->recover_ms = after >= 0 ? (now_s() - t_fault) * 1e3 : -1;
  while (now_s() - t_fault < STOP_S) usleep(100000);
  if (pid > 0) kill(pid, SIGCONT); /* it is long gone: a no-op, as it would be on a real node */
  /* The rest of 5000 steps and the rejoin: ~30 s, ~60 to 90 s loaded: 1200 s is > 10x. */
  chaos_job_wait(&j, 1200);
  double ms;
  int n = reshaped(j.out, WORLD - 1, &ms), back = reshaped(j.out, WORLD, &ms);
  bool killed = j.out && strstr(j.out, "it is stopped: killing it");
  snprintf(r->summary, sizeof r->summary,
           "rank %d (pid %d) stopped at step %d for %d s: %s; %d ranks went on without it; %d ranks reshaped when "
           "it came back",
           RANK, (int)pid, at, STOP_S, killed ? "killed by its agent" : "NOT killed", n, back);
  if (pid <= 0 || !killed || n != WORLD - 1 || back != WORLD) {
    failf(r, "%s\n%s", r->summary, tail(&j));
  } else {
    check_job(&j, r, ALL_OK, LONG_RUN_TOL, 2);
  }
  chaos_job_free(&j);
}

/* ---- a NaN in one rank's gradients: every rank sees the non-finite norm,
 * runs the step again on the same samples, and goes on. */
static void case_nan(chaos_env *env, chaos_result *r) {
  enum { STEPS = 24, AT = 10 };
  chaos_job_cfg c = base("nan", STEPS);
  c.fault = "nangrad:rank=2,at=10";
  chaos_job j;
  REQUIRE(&j, chaos_job_start(&j, env, &c) == 0, "cannot start the job");
  chaos_job_wait(&j, SHORT_JOB_S);
  int again = 0;
  for (const char *p = j.out ? strstr(j.out, "runs again on the same samples") : NULL; p;
       p = strstr(p + 1, "runs again on the same samples"))
    again++;
  double ms;
  int n = reshaped(j.out, WORLD - 1, &ms);
  snprintf(r->summary, sizeof r->summary,
           "a NaN in rank 2's gradients at step %d: %d of %d ranks ran the step again "
           "on the same samples; %d reshaped",
           AT, again, WORLD, n);
  r->recover_ms = -1;
  if (again != WORLD || n != 0) {
    failf(r, "%s\n%s", r->summary, tail(&j));
  } else {
    check_job(&j, r, ALL_OK, CROSS_LAYOUT_TOL, 0);
  }
  chaos_job_free(&j);
}

/* A job meant to fail: it failed as expected (ok, r->summary says how),
 * left no process behind and its keys in etcd as an ended job's. Frees j. */
static void judge_failed_job(chaos_job *j, chaos_result *r, bool ok) {
  char why[1024];
  int procs = chaos_job_processes(j);
  if (!ok) {
    failf(r, "%s\n%s", r->summary, tail(j));
  } else if (procs != 0) {
    failf(r, "%d process(es) of the job left", procs);
  } else if (chaos_job_keys(j, why, sizeof why) != 0) {
    failf(r, "etcd: %s", why);
  } else {
    r->passed = true;
  }
  chaos_job_free(j);
}

/* ---- a worker that always exits 1: the job's restarts are bounded, the
 * job fails with the worker's failure named, and nothing hangs. */
static void case_crash_loop(chaos_env *env, chaos_result *r) {
  chaos_job_cfg c = base("crash-loop", 24);
  c.no_reshape = true; /* the restart budget is what is tried */
  c.wrap = "if [ \"$GT_RANK\" = 1 ]; then echo \"worker rank 1: cannot start\" >&2; exit 1; fi; exec \"$@\"";
  chaos_job j;
  REQUIRE(&j, chaos_job_start(&j, env, &c) == 0, "cannot start the job");
  chaos_job_wait(&j, 300); /* four generations that fail at start: ~10 s, ~30 s loaded */
  int restarts = 0;
  for (const char *p = j.out ? strstr(j.out, "giantrun: restart ") : NULL; p; p = strstr(p + 1, "giantrun: restart "))
    restarts = atoi(p + strlen("giantrun: restart ")) > restarts ? atoi(p + strlen("giantrun: restart ")) : restarts;
  bool named = j.out && strstr(j.out, "the job failed") && strstr(j.out, "worker rank 1") &&
               strstr(j.out, "exited with status 1") && strstr(j.out, "more than --max-restarts 3 allows");
  snprintf(r->summary, sizeof r->summary,
           "rank 1 exits 1 at every start: %d restart(s) (--max-restarts 3), agents "
           "exited %d %d %d in %.1f s%s",
           restarts, j.code[0], j.code[1], j.code[2], j.t_end - j.t0, named ? ", the failure named" : "");
  r->job_s = j.t_end - j.t0;
  bool all_failed = true;
  for (int i = 0; i < c.nodes; i++) all_failed &= j.code[i] == 1;
  judge_failed_job(&j, r, all_failed && restarts == 3 && named);
}

/* ---- the data file truncated while the job trains, under --reshape: the
 * workers that read it exit 65 (bad input data), which giantrun never
 * retries: the job ends with the error, no worker restarted alone. */
static void case_bad_data(chaos_env *env, chaos_result *r) {
  enum { STEPS = 100000, AT = 5 };
  char copy[200], flags[320];
  snprintf(copy, sizeof copy, "%s/bad-data.tok", env->dir);
  if (chaos_sh("cp '%s' '%s'", env->data, copy) != 0) {
    failf(r, "cannot copy %s", env->data);
    return;
  }
  snprintf(flags, sizeof flags, "--data %s", copy);
  chaos_job_cfg c = base("bad-data", STEPS);
  c.gpt_flags = flags;
  chaos_job j;
  REQUIRE(&j, chaos_job_start(&j, env, &c) == 0, "cannot start the job");
  int at = chaos_job_wait_step(&j, AT, START_S);
  double t_fault = now_s();
  bool cut = at >= 0 && truncate(copy, GT_TOKFILE_HEADER_BYTES + 100) == 0;
  chaos_job_wait(&j, SHORT_JOB_S);
  r->job_s = j.t_end - j.t0;
  bool all_failed = cut;
  for (int i = 0; i < c.nodes; i++) all_failed &= j.code[i] == 1;
  bool named = j.out && strstr(j.out, "bad input data") && strstr(j.out, "truncated or replaced while in use");
  int alone = count_of(j.out, "restarted alone");
  snprintf(r->summary, sizeof r->summary,
           "data truncated after step %d: agents exited %d %d %d %.1f s later%s; "
           "%d worker(s) restarted alone",
           at, j.code[0], j.code[1], j.code[2], j.t_end - t_fault, named ? ", the error named" : "", alone);
  judge_failed_job(&j, r, all_failed && named && !alone);
}

/* ---- the newest checkpoint corrupted before a full restart: the restart
 * passes over it to the previous one, and resumes there exactly. */
static void case_corrupt_ckpt(chaos_env *env, chaos_result *r) {
  enum { FIRST = 20, STEPS = 30, EVERY = 5 };
  char flags[320], ckdir[200];
  snprintf(ckdir, sizeof ckdir, "%s/corrupt-ckpt", env->dir);
  snprintf(flags, sizeof flags, "--ckpt-dir %s --ckpt-every %d", ckdir, EVERY);
  chaos_job_cfg c = base("corrupt-ckpt", FIRST);
  c.gpt_flags = flags;
  /* The first job stops at step 20 with its schedule's end at 20: a warmup
   * of 20 makes its learning rates those of the 30-step job it resumes as
   * (the programs' own warmups differ). */
  c.model_flags = "--warmup 20";
  chaos_job j;
  REQUIRE(&j, chaos_job_start(&j, env, &c) == 0, "cannot start the first job");
  chaos_job_wait(&j, SHORT_JOB_S);
  REQUIRE(&j, j.code[0] == 0 && j.code[1] == 0 && j.code[2] == 0, "the first job failed");
  chaos_job_free(&j);
  /* Flip bytes in the middle of every shard of the newest (step 20). */
  int flipped = chaos_sh(
      "set -e; n=0; for f in %s/step-%08d/*; do case \"$f\" in *manifest*) continue;; esac; "
      "s=$(stat -c %%s \"$f\"); [ \"$s\" -gt 64 ] || continue; "
      "printf '\\377\\377\\377\\377' | dd of=\"$f\" bs=1 seek=$((s / 2)) conv=notrunc "
      "status=none; n=$((n+1)); done; [ $n -gt 0 ]",
      ckdir, FIRST);
  REQUIRE(&j, flipped == 0, "found no shard to corrupt under %s/step-%08d", ckdir, FIRST);
  c.steps = STEPS;
  REQUIRE(&j, chaos_job_start(&j, env, &c) == 0, "cannot start the second job");
  j.ledger_from = FIRST - EVERY;
  chaos_job_wait(&j, SHORT_JOB_S);
  const char *res = j.out ? strstr(j.out, "checkpoints: resumed from ") : NULL;
  bool passed_over = j.out && strstr(j.out, "falling back from checkpoint") && strstr(j.out, "step-00000020") && res &&
                     strstr(res, "after passing over newer ones that failed to load");
  bool resumed = res && strstr(res, "step-00000015 (step 15,");
  snprintf(r->summary, sizeof r->summary, "checkpoint step %d corrupted, then a full restart: %s; %s", FIRST,
           passed_over ? "passed over it" : "did NOT pass over it",
           resumed ? "resumed at step 15" : "did NOT resume at step 15");
  if (!passed_over || !resumed) {
    failf(r, "%s\n%s", r->summary, tail(&j));
  } else {
    check_job(&j, r, ALL_OK, CROSS_LAYOUT_TOL, 0);
  }
  chaos_job_free(&j);
}

/* ---- a full disk during a save: the save fails with a clear log, the
 * previous checkpoint stays whole, training goes on. */
static void case_full_disk(chaos_env *env, chaos_result *r) {
  enum { STEPS = 24, EVERY = 4 };
  char flags[320], mnt[200];
  snprintf(mnt, sizeof mnt, "%s/full-disk", env->dir);
  /* Room for one checkpoint of this model (about 0.3 MB) but not two. */
  chaos_result none = {0};
  *r = none;
  r->recover_ms = -1;
  if (chaos_sh("mkdir -p %s && mount -t tmpfs -o size=512k tmpfs %s", mnt, mnt) != 0) {
    failf(r, "cannot mount a small tmpfs at %s", mnt);
    return;
  }
  snprintf(flags, sizeof flags, "--ckpt-dir %s/ck --ckpt-every %d --ckpt-keep 0", mnt, EVERY);
  chaos_job_cfg c = base("full-disk", STEPS);
  c.gpt_flags = flags;
  chaos_job j;
  if (chaos_job_start(&j, env, &c) == 0) {
    chaos_job_wait(&j, SHORT_JOB_S);
    bool logged = j.out && strstr(j.out, "not saved") && strstr(j.out, "training goes on");
    bool whole = chaos_sh("%s verify %s/ck >/dev/null 2>&1", env->giant_ckpt, mnt) == 0;
    snprintf(r->summary, sizeof r->summary,
             "checkpoints every %d steps onto a 512 KiB filesystem: %s; the newest "
             "committed one %s",
             EVERY, logged ? "the saves that did not fit failed with a clear log" : "NO clear log of a failed save",
             whole ? "verifies" : "does NOT verify");
    if (!logged || !whole)
      failf(r, "%s\n%s", r->summary, tail(&j));
    else
      check_job(&j, r, ALL_OK, CROSS_LAYOUT_TOL, 0);
    chaos_job_free(&j);
  } else {
    failf(r, "cannot start the job");
  }
  chaos_sh("umount -l %s", mnt);
}

/* ---- one etcd member killed (the first endpoint every client tried):
 * no effect on training. */
static void case_etcd_member(chaos_env *env, chaos_result *r) {
  enum { STEPS = 1500, AT = 20 };
  chaos_job_cfg c = base("etcd-member", STEPS);
  chaos_job j;
  REQUIRE(&j, chaos_job_start(&j, env, &c) == 0, "cannot start the job");
  int at = chaos_job_wait_step(&j, AT, START_S);
  double t_fault = now_s();
  chaos_etcd_signal(&env->etcd, 0, SIGKILL);
  /* Training needs no etcd: the next steps come in ms (60 s is a bound
   * on a job held by it); the job, 1500 steps: ~10 s, ~20 s loaded. */
  int after = at >= 0 ? chaos_job_wait_step(&j, at + 2, 60) : -1;
  r->recover_ms = after >= 0 ? (now_s() - t_fault) * 1e3 : -1;
  chaos_job_wait(&j, 300);
  double ms;
  int n = reshaped(j.out, WORLD - 1, &ms) + reshaped(j.out, WORLD - CHAOS_NPROC, &ms);
  int restarts = count_of(j.out, "giantrun: leaving gen");
  snprintf(r->summary, sizeof r->summary,
           "etcd member 0 (every client's first endpoint) killed at step %d: %d "
           "reshape(s), %d restart(s)",
           at, n, restarts);
  if (at < 0 || n != 0 || restarts != 0)
    failf(r, "%s\n%s", r->summary, tail(&j));
  else
    check_job(&j, r, ALL_OK, LONG_RUN_TOL, 0);
  chaos_job_free(&j);
}

/* ---- etcd's quorum lost for 10 s (two of three members killed, then
 * started again on their data): the workers train on; no node leaves, no
 * second job forms. (Stopping a leader with SIGSTOP instead is etcd's own
 * known hazard: resumed, it revokes the leases whose time ran out while
 * it was frozen, before it learns it was away.) */
static void case_etcd_quorum(chaos_env *env, chaos_result *r) {
  enum { STEPS = 3000, AT = 20, OUT_S = 10 };
  chaos_job_cfg c = base("etcd-quorum", STEPS);
  chaos_job j;
  REQUIRE(&j, chaos_job_start(&j, env, &c) == 0, "cannot start the job");
  int at = chaos_job_wait_step(&j, AT, START_S);
  double t_fault = now_s();
  chaos_etcd_signal(&env->etcd, 1, SIGKILL);
  chaos_etcd_signal(&env->etcd, 2, SIGKILL);
  /* Training goes on without etcd: steps past the stop while it is away.
   * Ten steps of six ranks take ~50 ms, ~0.2 s on loaded cores: the 8 s
   * left of the outage are > 30x, and a job held by etcd's absence makes
   * none at all. */
  int during = at >= 0 ? chaos_job_wait_step(&j, at + 10, OUT_S - 2) : -1;
  while (now_s() - t_fault < OUT_S) usleep(100000);
  bool serving = chaos_etcd_restart(&env->etcd, &env->net, 1) == 0 &&
                 chaos_etcd_restart(&env->etcd, &env->net, 2) == 0 && chaos_etcd_serving(&env->etcd, CHAOS_ETCD_UP_S);
  chaos_job_wait(&j, 600); /* 3000 steps and the outage: ~30 s, ~60 s loaded: 10x */
  double ms;
  int n = reshaped(j.out, WORLD - 1, &ms) + reshaped(j.out, WORLD - CHAOS_NPROC, &ms);
  int restarts = count_of(j.out, "giantrun: leaving gen"), left = count_of(j.out, "the job goes on without this node");
  snprintf(r->summary, sizeof r->summary,
           "etcd quorum lost for %d s from step %d: training reached step %d while it "
           "was away; %d reshape(s), %d restart(s), %d node(s) left; etcd %s afterwards",
           OUT_S, at, during, n, restarts, left, serving ? "served" : "did NOT serve");
  r->recover_ms = -1;
  if (at < 0 || during < 0 || n != 0 || restarts != 0 || left != 0 || !serving)
    failf(r, "%s\n%s", r->summary, tail(&j));
  else
    check_job(&j, r, ALL_OK, LONG_RUN_TOL, 0);
  chaos_job_free(&j);
}

/* ---- No address set on any node (no GT_COMM_HOST, no --comm-host): each
 * agent takes the address of its route to etcd, which is its own on the
 * bridge, and the job trains across the nodes as with the addresses set. */
static void case_auto_address(chaos_env *env, chaos_result *r) {
  enum { STEPS = 20 };
  chaos_job_cfg c = base("auto-address", STEPS);
  c.auto_host = true;
  chaos_job j;
  REQUIRE(&j, chaos_job_start(&j, env, &c) == 0, "cannot start the job");
  chaos_job_wait(&j, SHORT_JOB_S);
  int found = 0;
  char want[200] = "";
  for (int i = 0; i < c.nodes; i++) {
    snprintf(want, sizeof want,
             "giantrun: node n%d: workers advertise %s to their peers (from this node's route to etcd)", i,
             env->net.ip[i]);
    if (!j.out || !strstr(j.out, want)) break;
    found++;
  }
  snprintf(r->summary, sizeof r->summary,
           "no address given: %d of %d nodes advertised their own, found from the route to etcd", found, c.nodes);
  if (found != c.nodes)
    failf(r, "%s; missing: '%s'\n%s", r->summary, want, tail(&j));
  else
    check_job(&j, r, ALL_OK, CROSS_LAYOUT_TOL, 0);
  chaos_job_free(&j);
}

/* ---- Node 0 advertises an address of its own that no other node has a
 * route to (--comm-host on an address of its loopback): the ranks of the
 * other nodes cannot connect to its ranks, and the job fails within the
 * connect bound (10 s), not the group's timeout (60 s), with a message
 * naming the rank, the address, its port and the node that advertised it. */
#define UNREACHABLE "10.255.255.1"
/* From the workers' start to every agent's exit: the 10 s bound, a worker
 * start (~1 s, 3 loaded) and the stop of the others, blocked in forming
 * their group (--stop-grace 3): ~15 s, 30 s is the bound the case asserts. */
#define UNREACHABLE_FAIL_S 30.0
static void case_unreachable_address(chaos_env *env, chaos_result *r) {
  enum { STEPS = 20 };
  r->recover_ms = -1;
  if (chaos_sh("ip netns exec %s ip addr add " UNREACHABLE "/32 dev lo", env->net.ns[0]) != 0) {
    failf(r, "cannot add " UNREACHABLE " to node 0's loopback");
    return;
  }
  chaos_job_cfg c = base("unreachable-address", STEPS);
  c.auto_host = true;
  c.no_reshape = true;
  c.agent_flags = "--max-restarts 0"; /* after the suite's 3: the failure ends the job */
  c.node_flags[0] = "--comm-host " UNREACHABLE;
  chaos_job j;
  REQUIRE(&j, chaos_job_start(&j, env, &c) == 0, "cannot start the job");
  char running[64];
  snprintf(running, sizeof running, "ranks 0..%d of %d running", CHAOS_NPROC - 1, WORLD);
  bool started = chaos_job_wait_log(&j, 0, running, START_S);
  double t_start = now_s();
  chaos_job_wait(&j, SHORT_JOB_S);
  double took = j.t_end - t_start;
  /* The first worker's message: "cannot reach rank R at HOST:PORT (the
   * address node N advertised; ...): no connection in S s (...)". */
  int rank = -1, port = 0;
  char host[64] = "", node[32] = "";
  double in_s = -1;
  const char *m = j.out ? strstr(j.out, "cannot reach rank ") : NULL;
  const char *in = m ? strstr(m, "no connection in ") : NULL;
  if (m) sscanf(m, "cannot reach rank %d at %63[^:]:%d (the address node %31s advertised;", &rank, host, &port, node);
  if (in) sscanf(in, "no connection in %lf s", &in_s);
  int failed = count_of(j.out, "giantrun: the job failed");
  snprintf(r->summary, sizeof r->summary,
           "node 0 advertised " UNREACHABLE
           ": rank %d at %s:%d of node %s unreachable after %.1f s; every agent "
           "exited %.1f s after the workers started",
           rank, host, port, node, in_s, took);
  bool named = rank >= 0 && rank < CHAOS_NPROC && !strcmp(host, UNREACHABLE) && port > 0 && !strcmp(node, "n0") &&
               strstr(m, "set giantrun's --comm-host or --comm-iface there if it is wrong");
  bool codes = true;
  for (int i = 0; i < c.nodes; i++) codes &= j.code[i] == 1;
  int procs = 0;
  for (double end = now_s() + GONE_S; (procs = chaos_job_processes(&j)) > 0 && now_s() < end;) usleep(50000);
  char why[1024];
  if (!started)
    failf(r, "node 0's workers never started\n%s", tail(&j));
  else if (!named)
    failf(r, "no message naming the rank, " UNREACHABLE ", its port and node n0: %s\n%s", r->summary, tail(&j));
  else if (in_s < 0 || in_s >= 12)
    failf(r, "the connect bound took %.1f s, want under 12: %s\n%s", in_s, r->summary, tail(&j));
  else if (took >= UNREACHABLE_FAIL_S || !codes || failed != c.nodes)
    failf(r, "the job did not fail within %.0f s (took %.1f s; exit codes %d %d %d; %d agents said it failed)\n%s",
          UNREACHABLE_FAIL_S, took, j.code[0], j.code[1], j.code[2], failed, tail(&j));
  else if (procs != 0)
    failf(r, "%d process(es) of the job still running", procs);
  else if (chaos_job_keys(&j, why, sizeof why) != 0)
    failf(r, "etcd: %s", why);
  else
    r->passed = true;
  chaos_job_free(&j);
}

const chaos_case chaos_cases[] = {
    {"kill-worker", "SIGKILL a worker (GT_FAULT crash)", "in-process reshape; at most 1 step lost", CHAOS_NODES, true,
     case_kill_worker},
    {"kill-lone-worker", "SIGKILL a node's only worker (one worker a node)",
     "the other nodes reshape in-process; it restarts alone and joins; no restart", CHAOS_NODES, true,
     case_kill_lone_worker},
    {"kill-agent", "SIGKILL an agent", "its workers gone with it; the others reshape", CHAOS_NODES, true,
     case_kill_agent},
    {"slow-rank", "a rank slowed x3 (GT_FAULT slow)", "detected within 10 steps; left out (S3)", CHAOS_NODES, true,
     case_slow_rank},
    {"slow-link", "a node's link limited to 20 Mbit/s (tc tbf)", "detected as a link fault of its ranks; left out (S3)",
     CHAOS_NODES, false, case_slow_link},
    {"partition", "a node's link down until the others go on without it (8 s at least), then up",
     "the others go on; it rejoins when healed", CHAOS_NODES, true, case_partition},
    {"sigstop", "SIGSTOP a worker for 30 s, then SIGCONT", "found stopped and killed; the others reshape; it rejoins",
     CHAOS_NODES, false, case_sigstop},
    {"nan", "a NaN in one rank's gradients (GT_FAULT nangrad)", "the step runs again everywhere; training goes on",
     CHAOS_NODES, false, case_nan},
    {"crash-loop", "a worker that always exits 1", "bounded restarts; a clear error; non-zero exits; no hang",
     CHAOS_NODES, false, case_crash_loop},
    {"bad-data", "the data file truncated while training, under --reshape",
     "every worker exits 65 (bad input data); the job ends with the error; no restart", CHAOS_NODES, false,
     case_bad_data},
    {"corrupt-ckpt", "the newest checkpoint corrupted before a full restart", "falls back to the previous one",
     CHAOS_NODES, false, case_corrupt_ckpt},
    {"full-disk", "a full disk during saves", "the save fails with a clear log; training goes on", CHAOS_NODES, false,
     case_full_disk},
    {"etcd-member", "one etcd member of three killed", "no effect on training", CHAOS_NODES, false, case_etcd_member},
    {"etcd-quorum", "etcd's quorum lost for 10 s (two members killed, then restarted)",
     "training goes on; no node leaves; one job", CHAOS_NODES, false, case_etcd_quorum},
    {"auto-address", "no address set on any node (no GT_COMM_HOST, --comm-host or --comm-iface)",
     "each node advertises its address on the route to etcd; the job trains as with them set", CHAOS_NODES, true,
     case_auto_address},
    {"unreachable-address", "node 0 advertises an address no other node can reach (--comm-host)",
     "the job fails within the 10 s connect bound, naming the rank, address, port and node", CHAOS_NODES, true,
     case_unreachable_address},
};
const int chaos_ncases = (int)(sizeof chaos_cases / sizeof *chaos_cases);

const chaos_case *chaos_case_find(const char *name) {
  for (int i = 0; i < chaos_ncases; i++)
    if (!strcmp(chaos_cases[i].name, name)) return &chaos_cases[i];
  return NULL;
}
