/* See job.h. */
#include "chaos/job.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/run_cmd.h"
#include "giant/data.h"
#include "giant/engine/etcd.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void nap_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

const char *chaos_env_unsupported(void) {
  const char *why = chaos_unsupported();
  if (*why) return why;
  if (system("command -v etcd >/dev/null 2>&1") != 0) return "no etcd on PATH";
  return "";
}

int chaos_env_open(chaos_env *env, int nodes) {
  memset(env, 0, sizeof *env);
  const char *prog = getenv("GT_CHAOS_PROGRAM");
  prog = prog && *prog ? prog : "gpt";
  if (strcmp(prog, "gpt") != 0 && strcmp(prog, "custom_layer") != 0) {
    fprintf(stderr, "chaos: GT_CHAOS_PROGRAM=%s: want gpt or custom_layer\n", prog);
    return -1;
  }
  snprintf(env->prog_name, sizeof env->prog_name, "%s", prog);
  char rel[64];
  snprintf(rel, sizeof rel, "examples/%s", prog);
  build_path(rel, env->prog, sizeof env->prog);
  build_path("launch/giantrun", env->giantrun, sizeof env->giantrun);
  build_path("tools/giant-ckpt", env->giant_ckpt, sizeof env->giant_ckpt);
  const char *why = chaos_env_unsupported();
  if (*why) {
    snprintf(env->skip, sizeof env->skip, "%s", why);
    return 1;
  }
  if (nodes < 1 || nodes + CHAOS_ETCD_MEMBERS > CHAOS_MAX_NODES) {
    fprintf(stderr, "chaos: %d nodes, want 1..%d\n", nodes, CHAOS_MAX_NODES - CHAOS_ETCD_MEMBERS);
    return -1;
  }
  env->nodes = nodes;
  char tag[32];
  snprintf(tag, sizeof tag, "chaos%d", (int)getpid()); /* chaos_sweep finds it by the pid */
  if (scratch_corpus(tag, env->dir, env->text, env->data) != 0) return -1;
  /* The token file as gpt makes it from --corpus: custom_layer reads it too. */
  uint64_t ntok = 0;
  const char *inputs[1] = {env->text};
  if (gt_tokenize_paths(inputs, 1, "%", env->data, &ntok) != GT_OK) {
    fprintf(stderr, "chaos: tokenizing %s: %s\n", env->text, gt_last_error());
    chaos_env_close(env);
    return -1;
  }
  if (chaos_net_create(&env->net, nodes + CHAOS_ETCD_MEMBERS) != 0) {
    chaos_env_close(env);
    return -1;
  }
  env->net_up = true;
  if (chaos_etcd_start(&env->etcd, &env->net, nodes, env->dir) != 0) {
    chaos_env_close(env);
    return -1;
  }
  env->etcd_up = true;
  return 0;
}

void chaos_env_close(chaos_env *env) {
  if (env->etcd_up) chaos_etcd_stop(&env->etcd);
  if (env->net_up) chaos_net_destroy(&env->net);
  if (env->dir[0]) scratch_remove(env->dir);
  env->net_up = env->etcd_up = false;
  env->dir[0] = 0;
}

bool chaos_env_leftovers(const chaos_env *env) {
  return chaos_net_leftovers(&env->net) || (env->dir[0] && access(env->dir, F_OK) == 0);
}

int chaos_global_batch(const chaos_job_cfg *c) { return c->global_batch > 0 ? c->global_batch : CHAOS_GLOBAL_BATCH; }

/* Splits a space-separated list into argv (at most max - 1 words). */
static int split(char *s, char **argv, int at, int max) {
  for (char *tok = s ? strtok(s, " ") : NULL; tok && at < max - 1; tok = strtok(NULL, " ")) argv[at++] = tok;
  return at;
}

#define MAX_ARGS 96

/* The program's arguments after it: the suite's model and data. */
static int gpt_args(const chaos_env *env, const chaos_job_cfg *c, char *steps, char *model_flags, char *gpt_flags,
                    char **argv, int at) {
  static char batch[16];
  snprintf(batch, sizeof batch, "%d", chaos_global_batch(c));
  snprintf(steps, 16, "%d", c->steps);
  const char *fixed[] = {"--data", env->data, "--steps",        steps, "--layers",      "1", "--channels", "32",
                         "--seq",  "16",      "--global-batch", batch, "--print-every", "1"};
  for (size_t k = 0; k < sizeof fixed / sizeof *fixed; k++) argv[at++] = (char *)fixed[k];
  const char *gpt_only[] = {"--corpus", env->text, "--heads", "4", "--sample", "0"};
  for (size_t k = 0; !strcmp(env->prog_name, "gpt") && k < sizeof gpt_only / sizeof *gpt_only; k++)
    argv[at++] = (char *)gpt_only[k];
  snprintf(model_flags, 512, "%s", c->model_flags ? c->model_flags : "");
  at = split(model_flags, argv, at, MAX_ARGS);
  return gpt_flags ? split(gpt_flags, argv, at, MAX_ARGS) : at;
}

int chaos_job_start_node(chaos_job *j, int i) {
  chaos_env *env = j->env;
  const chaos_job_cfg *c = &j->cfg;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid > 0) {
    j->agent[i] = pid;
    j->code[i] = -2; /* running */
    return 0;
  }
  int fd = open(j->log[i], O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {
    dup2(fd, 1);
    dup2(fd, 2);
  }
  char endpoint[256], host[64], node[16], fault[300], nnodes[16], nproc[16], plan[32], steps[16], metrics[200];
  char agent_flags[512], node_flags[256], gpt_flags[512], model_flags[512];
  snprintf(endpoint, sizeof endpoint, "%s", env->etcd.endpoints);
  /* The node's address, or (auto_host) none: giantrun finds it. */
  if (c->auto_host)
    snprintf(host, sizeof host, "--unset=GT_COMM_HOST");
  else
    snprintf(host, sizeof host, "GT_COMM_HOST=%s", env->net.ip[i]);
  snprintf(node, sizeof node, "n%d", i);
  snprintf(fault, sizeof fault, "GT_FAULT=%s", c->fault ? c->fault : "");
  snprintf(nnodes, sizeof nnodes, "%d", c->nodes);
  snprintf(nproc, sizeof nproc, "%d", c->nproc);
  if (c->plan)
    snprintf(plan, sizeof plan, "%s", c->plan);
  else
    snprintf(plan, sizeof plan, "dp=%d", c->nodes * c->nproc);
  snprintf(metrics, sizeof metrics, "%s", j->metrics);
  snprintf(agent_flags, sizeof agent_flags, "%s", c->agent_flags ? c->agent_flags : "");
  snprintf(node_flags, sizeof node_flags, "%s", c->node_flags[i] ? c->node_flags[i] : "");
  snprintf(gpt_flags, sizeof gpt_flags, "--metrics %s %s", metrics, c->gpt_flags ? c->gpt_flags : "");
  char *argv[MAX_ARGS];
  int n = 0;
  /* Between emulated nodes the transport is TCP over their links, not the
   * shared memory of the one real machine.
   * --rdzv-ttl 4: an agent renews its lease every 1.3 s, so a false lapse
   *   would need it starved for 2.7 s, where a renewal takes ~50 ms on
   *   loaded cores (> 50x); short, because the cases that kill an agent or
   *   cut a node off wait for a lapse.
   * --rdzv-settle 1: --nnodes is one number (the least is the most), so
   *   the rendezvous waits for every node whatever the settle window; it
   *   is no bound that can fail.
   * --stop-grace 3: a worker told to stop ends its step and exits in tens
   *   of ms on loaded cores: 3 s is > 30x before it is killed instead. */
  const char *head[] = {"ip",
                        "netns",
                        "exec",
                        env->net.ns[i],
                        "env",
                        host,
                        "GT_COMM_TRANSPORT=tcp",
                        "OMP_NUM_THREADS=1",
                        fault,
                        env->giantrun,
                        "--nnodes",
                        nnodes,
                        "--nproc-per-node",
                        nproc,
                        "--rdzv-endpoint",
                        endpoint,
                        "--job-id",
                        j->id,
                        "--node-id",
                        node,
                        "--rdzv-ttl",
                        "4",
                        "--rdzv-settle",
                        "1",
                        "--stop-grace",
                        "3",
                        "--max-restarts",
                        "3",
                        "--plan",
                        plan};
  for (size_t k = 0; k < sizeof head / sizeof *head; k++) argv[n++] = (char *)head[k];
  if (!c->no_reshape) argv[n++] = "--reshape";
  n = split(agent_flags, argv, n, MAX_ARGS);
  n = split(node_flags, argv, n, MAX_ARGS);
  if (c->wrap) {
    argv[n++] = "/bin/sh";
    argv[n++] = "-c";
    argv[n++] = (char *)c->wrap;
    argv[n++] = "sh";
  }
  argv[n++] = env->prog;
  n = gpt_args(env, c, steps, model_flags, gpt_flags, argv, n);
  argv[n] = NULL;
  execvp(argv[0], argv);
  _exit(127);
}

int chaos_job_start(chaos_job *j, chaos_env *env, const chaos_job_cfg *cfg) {
  static int serial;
  memset(j, 0, sizeof *j);
  j->env = env;
  j->cfg = *cfg;
  snprintf(j->id, sizeof j->id, "chaos-%s-%d-%d", cfg->name, (int)getpid(), ++serial);
  snprintf(j->metrics, sizeof j->metrics, "%s/%s-m%%r.jsonl", env->dir, j->id);
  j->t0 = now_s();
  for (int i = 0; i < cfg->nodes; i++) {
    snprintf(j->log[i], sizeof j->log[i], "%s/%s-node%d.log", env->dir, j->id, i);
    if (chaos_job_start_node(j, i) != 0) return -1;
  }
  return 0;
}

/* The highest step in one metrics file, or -1. */
static int file_last_step(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[2048];
  int best = -1, s;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "{\"step\":%d,", &s) == 1 && s > best) best = s;
  fclose(f);
  return best;
}

static void metrics_path(const chaos_job *j, int rank, char *out, size_t n) {
  snprintf(out, n, "%s/%s-m%d.jsonl", j->env->dir, j->id, rank);
}

int chaos_rank_last_step(const chaos_job *j, int rank) {
  char p[256];
  metrics_path(j, rank, p, sizeof p);
  return file_last_step(p);
}

int chaos_job_wait_step(chaos_job *j, int step, double timeout_s) {
  int world = j->cfg.nodes * j->cfg.nproc;
  for (double end = now_s() + timeout_s; now_s() < end; nap_ms(20)) {
    for (int r = 0; r < world; r++) {
      char p[256];
      metrics_path(j, r, p, sizeof p);
      int s = file_last_step(p);
      if (s >= step) return s;
    }
  }
  return -1;
}

static bool file_has_line(const char *path, const char *text) {
  FILE *f = fopen(path, "r");
  if (!f) return false;
  char line[4096];
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) found = strstr(line, text) != NULL;
  fclose(f);
  return found;
}

bool chaos_job_wait_log(chaos_job *j, int i, const char *text, double timeout_s) {
  for (double end = now_s() + timeout_s; now_s() < end; nap_ms(50))
    if (file_has_line(j->log[i], text)) return true;
  return false;
}

static int reap(pid_t pid, int block) {
  int st;
  pid_t r = waitpid(pid, &st, block ? 0 : WNOHANG);
  if (r != pid) return -2;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int chaos_job_wait_node(chaos_job *j, int i, double timeout_s) {
  if (j->code[i] != -2) return j->code[i];
  for (double end = now_s() + timeout_s; now_s() < end; nap_ms(50)) {
    int c = reap(j->agent[i], 0);
    if (c != -2) return j->code[i] = c;
  }
  kill(j->agent[i], SIGKILL);
  reap(j->agent[i], 1);
  return j->code[i] = -1;
}

void chaos_job_wait(chaos_job *j, double timeout_s) {
  double end = now_s() + timeout_s;
  for (int i = 0; i < j->cfg.nodes; i++) {
    double left = end - now_s();
    chaos_job_wait_node(j, i, left > 0 ? left : 0.01);
  }
  j->t_end = now_s();
  size_t cap = 0;
  free(j->out);
  FILE *all = open_memstream(&j->out, &cap);
  for (int i = 0; all && i < j->cfg.nodes; i++) {
    FILE *f = fopen(j->log[i], "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f)) fputs(line, all);
    if (f) fclose(f);
  }
  if (all) fclose(all);
}

void chaos_job_free(chaos_job *j) {
  for (int i = 0; i < j->cfg.nodes; i++)
    if (j->code[i] == -2) chaos_job_wait_node(j, i, 0.01);
  free(j->out);
  j->out = NULL;
}

float chaos_final_loss(const char *out, int steps) {
  float a, b, last = NAN;
  int from, to;
  for (const char *p = out ? strstr(out, "loss ") : NULL; p; p = strstr(p + 1, "loss "))
    if (sscanf(p, "loss %f -> %f over steps %d..%d", &a, &b, &from, &to) == 4 && to == steps) last = b;
  return last;
}

float chaos_reference_loss(chaos_env *env, const chaos_job_cfg *cfg, char *why, size_t n) {
  char *argv[MAX_ARGS], steps[16], model_flags[512];
  int k = 0;
  argv[k++] = env->prog;
  k = gpt_args(env, cfg, steps, model_flags, NULL, argv, k); /* what is trained, not how it runs */
  argv[k] = NULL;
  run_result *r = malloc(sizeof *r);
  if (!r) {
    snprintf(why, n, "out of memory");
    return NAN;
  }
  /* One process, at most a few thousand tiny steps (partition's 3000, no
   * pace): ~2 s, ~20 s under ASan on loaded cores; 300 s is > 10x. */
  run_cmd(argv, (char *[]){"OMP_NUM_THREADS=1", NULL}, 300, r);
  float loss = r->exit_code == 0 ? chaos_final_loss(r->output, cfg->steps) : NAN;
  if (isnan(loss)) snprintf(why, n, "reference run: exit %d, no final loss:\n%.2000s", r->exit_code, r->output);
  free(r);
  return loss;
}

int chaos_ledger(const chaos_job *j, int *lost, char *why, size_t n) {
  int steps = j->ledger_to > 0 ? j->ledger_to : j->cfg.steps, world = j->cfg.nodes * j->cfg.nproc;
  int G = chaos_global_batch(&j->cfg);
  int *runs = calloc((size_t)steps, sizeof *runs), *most = calloc((size_t)steps, sizeof *most);
  if (!runs || !most) {
    free(runs);
    free(most);
    snprintf(why, n, "out of memory");
    return -1;
  }
  int rc = 0;
  for (int r = 0; r < world && rc == 0; r++) {
    char p[256], line[4096];
    metrics_path(j, r, p, sizeof p);
    FILE *f = fopen(p, "r");
    if (!f) continue; /* a rank that never finished a step */
    for (int s = 0; s < steps; s++) runs[s] = 0;
    while (fgets(line, sizeof line, f) && rc == 0) {
      if (strncmp(line, "{\"step\":", 8) != 0) continue; /* the monitor's records share the file */
      int s;
      unsigned long long first = 0, rows = 0;
      const char *fr = strstr(line, "\"first_row\":"), *rw = strstr(line, "\"rows\":");
      if (sscanf(line, "{\"step\":%d,", &s) != 1 || !fr || !rw || sscanf(fr, "\"first_row\":%llu", &first) != 1 ||
          sscanf(rw, "\"rows\":%llu", &rows) != 1) {
        rc = -1;
        snprintf(why, n, "%s: a line without step, first_row or rows: %.200s", p, line);
      } else if (s < j->ledger_from || s >= j->cfg.steps) {
        rc = -1;
        snprintf(why, n, "%s: step %d outside %d..%d", p, s, j->ledger_from, j->cfg.steps - 1);
      } else if (s >= steps) {
        continue; /* past what is checked (a stopped job's last steps) */
      } else if (first != (unsigned long long)s * G || rows != (unsigned long long)G) {
        rc = -1;
        snprintf(why, n, "%s: step %d trained rows %llu..%llu, the ledger wants %d..%d", p, s, first, first + rows,
                 s * G, (s + 1) * G);
      } else {
        runs[s]++;
      }
    }
    fclose(f);
    for (int s = 0; s < steps; s++)
      if (runs[s] > most[s]) most[s] = runs[s];
  }
  *lost = 0;
  for (int s = j->ledger_from; s < steps && rc == 0; s++) {
    if (most[s] == 0) {
      rc = -1;
      snprintf(why, n, "step %d was never kept: its samples were not trained", s);
    }
    *lost += most[s] > 1 ? most[s] - 1 : 0;
  }
  free(runs);
  free(most);
  return rc;
}

/* Whether environ (len bytes of NUL-terminated strings) holds `var`. */
static bool has_var(const char *env, ssize_t len, const char *var) {
  size_t vl = strlen(var);
  for (ssize_t k = 0; k < len; k += (ssize_t)strlen(env + k) + 1)
    if (!strncmp(env + k, var, vl) && env[k + (ssize_t)vl] == 0) return true;
  return false;
}

/* The processes whose environment has `a` and, when given, `b`: how many,
 * and the first one's pid into *first. */
static int scan(const char *a, const char *b, pid_t *first) {
  DIR *d = opendir("/proc");
  int n = 0;
  struct dirent *e;
  static char buf[1 << 17];
  while (d && (e = readdir(d))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char path[300];
    snprintf(path, sizeof path, "/proc/%s/environ", e->d_name);
    int fd = open(path, O_RDONLY);
    if (fd < 0) continue;
    ssize_t len = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (len <= 0) continue;
    buf[len] = 0;
    if (has_var(buf, len, a) && (!b || has_var(buf, len, b)) && n++ == 0 && first) *first = (pid_t)atoi(e->d_name);
  }
  if (d) closedir(d);
  return n;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* One rank's metrics lines: per step, the time since the line before it
 * in the same run (NAN: the first of a run, after a restart or reshape)
 * and the step's own time (step_time_s), of the step's last run. */
typedef struct step_times {
  double *since, *own;
} step_times;

static void read_step_times(const chaos_job *j, int rank, int steps, step_times *t) {
  for (int s = 0; s < steps; s++) t->since[s] = t->own[s] = NAN;
  char p[256], line[4096];
  metrics_path(j, rank, p, sizeof p);
  FILE *f = fopen(p, "r");
  int prev = -2;
  double prev_t = 0;
  while (f && fgets(line, sizeof line, f)) {
    int s;
    const char *u = strstr(line, "\"unix_s\":"), *o = strstr(line, "\"step_time_s\":");
    if (sscanf(line, "{\"step\":%d,", &s) != 1 || !u || !o) continue;
    double at = atof(u + 9);
    if (s >= 0 && s < steps) {
      t->since[s] = s == prev + 1 && at >= prev_t ? at - prev_t : NAN;
      t->own[s] = atof(o + 14);
    }
    prev = s;
    prev_t = at;
  }
  if (f) fclose(f);
}

static double median_of(double *v, size_t n) {
  if (!n) return NAN;
  qsort(v, n, sizeof *v, cmp_double);
  return v[n / 2];
}

double chaos_kept_seconds(const chaos_job *j) {
  int steps = j->ledger_to > 0 ? j->ledger_to : j->cfg.steps, world = j->cfg.nodes * j->cfg.nproc;
  if (steps <= j->ledger_from) return 0;
  size_t cells = (size_t)world * (size_t)steps;
  double *since = malloc(cells * sizeof *since), *own = malloc(cells * sizeof *own);
  double *v = malloc(cells * sizeof *v);
  if (!since || !own || !v) {
    free(since);
    free(own);
    free(v);
    return 0;
  }
  for (int r = 0; r < world; r++)
    read_step_times(j, r, steps, &(step_times){since + (size_t)r * steps, own + (size_t)r * steps});
  /* The healthy pace, and what the loop adds to a step's own time between
   * steps (checkpoints, the monitor's gathers): their medians over every
   * pair of consecutive steps. */
  size_t n = 0;
  for (size_t c = 0; c < cells; c++)
    if (!isnan(since[c])) v[n++] = since[c];
  double pace = median_of(v, n);
  n = 0;
  for (size_t c = 0; c < cells; c++)
    if (!isnan(since[c]) && !isnan(own[c])) v[n++] = since[c] - own[c];
  double between = n ? fmax(median_of(v, n), 0) : 0;
  /* Each kept step counts its own time: since the step before it in the
   * same run, unless that holds a stall (over five times the pace), or
   * there is none; then its own time and the usual time between steps.
   * Across ranks, the median. Stalls, recoveries and restarts are what
   * is left of the wall time. */
  double kept = 0;
  for (int s = j->ledger_from; s < steps; s++) {
    size_t m = 0;
    for (int r = 0; r < world; r++) {
      double a = since[(size_t)r * steps + s], o = own[(size_t)r * steps + s];
      if (!isnan(a) && !(isnan(pace) || a > 5 * pace))
        v[m++] = a;
      else if (!isnan(o))
        v[m++] = o + between;
    }
    if (m) kept += median_of(v, m);
  }
  free(since);
  free(own);
  free(v);
  return kept;
}

int chaos_job_processes(const chaos_job *j) {
  char want[96];
  snprintf(want, sizeof want, "GT_JOB_ID=%s", j->id);
  return scan(want, NULL, NULL);
}

pid_t chaos_worker_pid(const chaos_job *j, int rank) {
  char job[96], r[32];
  snprintf(job, sizeof job, "GT_JOB_ID=%s", j->id);
  snprintf(r, sizeof r, "GT_RANK=%d", rank);
  pid_t pid = -1;
  return scan(job, r, &pid) > 0 ? pid : -1;
}

int chaos_node_processes(const chaos_env *env, int i) {
  char cmd[160];
  snprintf(cmd, sizeof cmd, "ip netns pids %s 2>/dev/null | wc -l", env->net.ns[i]);
  FILE *p = popen(cmd, "r");
  int n = -1;
  if (p && fscanf(p, "%d", &n) != 1) n = -1;
  if (p) pclose(p);
  return n;
}

/* Keys a finished job may leave: its end, its last progress, and what was
 * found slow and done about it (docs/launching.md). */
static bool documented(const char *rest) {
  return !strcmp(rest, "done") || !strcmp(rest, "progress/job") || !strncmp(rest, "health/", 7) ||
         !strncmp(rest, "mitigation/", 11);
}

int chaos_job_keys(chaos_job *j, char *why, size_t n) {
  /* A read of three members' quorum: a few ms, ~50 on loaded cores: 5 s is 100x. */
  gt_etcd_config cfg = {.endpoints = j->env->etcd.endpoints, .timeout_ms = 5000};
  gt_etcd_client *c;
  if (gt_etcd_connect(&cfg, &c) != GT_OK) {
    snprintf(why, n, "etcd: %s", gt_last_error());
    return -1;
  }
  char prefix[128];
  snprintf(prefix, sizeof prefix, "/giant/%s/", j->id);
  size_t pl = strlen(prefix);
  int rc = -1;
  /* Keys on the lease of an agent that was killed go when it lapses: at
   * most the TTL (4 s) and etcd's expiry check (500 ms) after the kill, and
   * usually long before the job ended. 60 s is > 10x that; a job that
   * passes waits no longer. */
  for (double end = now_s() + 60; rc != 0 && now_s() < end; nap_ms(200)) {
    gt_etcd_kvs kvs;
    gt_etcd_get_opts o = {.prefix = 1};
    if (gt_etcd_get(c, prefix, &o, &kvs) != GT_OK) {
      snprintf(why, n, "etcd: %s", gt_last_error());
      continue;
    }
    rc = 0;
    bool done = false;
    for (size_t i = 0; i < kvs.n; i++) {
      done |= !strcmp(kvs.kvs[i].key + pl, "done");
      if (!documented(kvs.kvs[i].key + pl)) {
        rc = -1;
        snprintf(why, n, "left in etcd: %s", kvs.kvs[i].key);
      }
    }
    if (rc == 0 && !done) {
      rc = -1;
      snprintf(why, n, "no %sdone record", prefix);
    }
    gt_etcd_kvs_free(&kvs);
  }
  if (rc == 0) {
    /* Removing the job removes them all. */
    int64_t deleted = 0;
    gt_etcd_kvs kvs = {0};
    gt_etcd_get_opts o = {.prefix = 1};
    if (gt_etcd_del(c, prefix, 1, &deleted) != GT_OK || gt_etcd_get(c, prefix, &o, &kvs) != GT_OK || kvs.n != 0) {
      rc = -1;
      snprintf(why, n, "the job's records did not go with it: %zu left", kvs.n);
    }
    gt_etcd_kvs_free(&kvs);
  }
  gt_etcd_close(c);
  return rc;
}
