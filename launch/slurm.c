/* giantrun inside a Slurm allocation (docs/launching.md, "Slurm").
 *
 * giantrun runs once per node (srun --ntasks-per-node=1). It takes from
 * Slurm's variables what the flags left unset: the node count, this node's
 * id, the job id and the workers per node. With no --rdzv-endpoint the
 * first node of the step runs the job's private etcd (standalone.c's, TLS
 * with certificates made at start) on the address its hostname resolves
 * to, and hands the endpoint and the client credentials to the other nodes
 * through a directory of mode 0700 on the submit directory's filesystem,
 * which Slurm clusters share between nodes. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "giant/log.h"
#include "launch/agent.h"
#include "resilience/etcd/local.h"

#define SCONTROL_TIMEOUT_S 30
#define HOSTNAMES_MAX (1 << 20) /* scontrol's output, at most */

static int slurm_error(const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "giantrun: Slurm: ");
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, "\n");
  return 2;
}

/* A Slurm variable that must be a whole number in [lo, hi]; *out untouched
 * when it is unset. Returns -1 to go on, else 2 (message printed). */
static int env_int(const char *name, long lo, long hi, long *out) {
  const char *s = getenv(name);
  if (!s) return -1;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end || errno || v < lo || v > hi) {
    char range[64];
    snprintf(range, sizeof range, "a whole number in %ld..%ld", lo, hi);
    fprintf(stderr, "giantrun: Slurm: %s is '%s', not %s\n", name, s, range);
    return 2;
  }
  *out = v;
  return -1;
}

/* The leading count of a Slurm task list ("2(x3)", "2,1"): tasks on the
 * first node; -1 when it does not start with one. */
static long leading_count(const char *s) {
  char *end;
  long v = strtol(s, &end, 10);
  return end == s || v < 0 ? -1 : v;
}

static bool valid_hostname(const char *h) {
  size_t n = strlen(h);
  if (n == 0 || n > 255) return false;
  for (const char *c = h; *c; c++)
    if (!(*c == '-' || *c == '.' || *c == '_' || (*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') ||
          (*c >= 'A' && *c <= 'Z')))
      return false;
  return true;
}

/* Runs `scontrol show hostnames LIST` and returns its output (malloc'd),
 * or NULL after printing why. Bounded by SCONTROL_TIMEOUT_S. */
static char *run_scontrol(const char *list) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) {
    slurm_error("cannot run scontrol: %s%s", strerror(errno), "");
    return NULL;
  }
  pid_t pid = fork();
  if (pid < 0) {
    close(p[0]);
    close(p[1]);
    slurm_error("cannot run scontrol: %s%s", strerror(errno), "");
    return NULL;
  }
  if (pid == 0) {
    dup2(p[1], 1);
    execlp("scontrol", "scontrol", "show", "hostnames", list, (char *)NULL);
    _exit(127);
  }
  close(p[1]);
  size_t len = 0, cap = 4096;
  char *out = malloc(cap);
  bool timed_out = false, too_long = false;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (; out;) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long left_ms =
        SCONTROL_TIMEOUT_S * 1000L - ((now.tv_sec - t0.tv_sec) * 1000L + (now.tv_nsec - t0.tv_nsec) / 1000000);
    struct pollfd pf = {.fd = p[0], .events = POLLIN};
    if (left_ms <= 0 || poll(&pf, 1, (int)left_ms) == 0) {
      timed_out = true;
      break;
    }
    if (len + 1 >= cap) {
      if (cap >= HOSTNAMES_MAX) {
        too_long = true;
        break;
      }
      char *bigger = realloc(out, cap * 2);
      if (!bigger) break;
      out = bigger;
      cap *= 2;
    }
    ssize_t n = read(p[0], out + len, cap - len - 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += (size_t)n;
  }
  close(p[0]);
  if (timed_out || too_long) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  const char *why = timed_out                                         ? "it did not finish within 30 s"
                    : too_long                                        ? "its output is too long"
                    : !out                                            ? "out of memory"
                    : WIFEXITED(status) && WEXITSTATUS(status) == 127 ? "scontrol is not on PATH"
                    : !WIFEXITED(status) || WEXITSTATUS(status) != 0  ? "scontrol failed (its message is above)"
                                                                      : NULL;
  if (why) {
    slurm_error("cannot expand the node list '%s' with `scontrol show hostnames`: %s", list, why);
    free(out);
    return NULL;
  }
  out[len] = 0;
  return out;
}

/* Expands the step's node list into s->hosts (one name per line in
 * scontrol's output; blank lines and surrounding spaces are passed over). */
static int expand_nodelist(slurm_info *s, const char *list) {
  char *out = run_scontrol(list);
  if (!out) return 2;
  int n = 0, r = -1;
  for (char *save = NULL, *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    while (*line == ' ' || *line == '\t' || *line == '\r') line++;
    char *e = line + strlen(line);
    while (e > line && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) *--e = 0;
    if (!*line) continue;
    if (!valid_hostname(line)) {
      r = slurm_error("`scontrol show hostnames %s` gave '%s', which is not a hostname", list, line);
      break;
    }
    if (n == s->nnodes) {
      char count[16];
      snprintf(count, sizeof count, "%d", s->nnodes);
      r = slurm_error("the node list '%s' names more nodes than the %s Slurm says the step has", list, count);
      break;
    }
    if (n == s->node_id) snprintf(s->node_name, sizeof s->node_name, "%s", line);
    if (n == 0) snprintf(s->first_host, sizeof s->first_host, "%s", line);
    n++;
  }
  free(out);
  if (r < 0 && n != s->nnodes) {
    char count[32];
    snprintf(count, sizeof count, "%d, not %d", n, s->nnodes);
    r = slurm_error("the node list '%s' names %s nodes", list, count);
  }
  return r;
}

/* The step's values, falling back to the allocation's in a batch script. */
static const char *step_env(const char *step_name, const char *job_name) {
  const char *v = getenv(step_name);
  return v && *v ? v : getenv(job_name);
}

int slurm_defaults(agent_opts *o) {
  slurm_info *s = &o->slurm;
  const char *job = getenv("SLURM_JOB_ID");
  if (!job || !*job || o->standalone) return -1; /* --standalone is one node whatever the allocation */
  s->active = true;
  if (!gt_rdzv_valid_id(job)) return slurm_error("SLURM_JOB_ID is '%s'%s, not a job id", job, "");
  long nnodes = 1, node = 0, gpus = 0, env_nproc = 0;
  int r;
  if ((r = env_int(getenv("SLURM_STEP_NUM_NODES") ? "SLURM_STEP_NUM_NODES" : "SLURM_NNODES", 1, GT_RDZV_MAX_NODES,
                   &nnodes)) >= 0 ||
      (r = env_int("SLURM_NODEID", 0, nnodes - 1, &node)) >= 0 ||
      (r = env_int("SLURM_GPUS_ON_NODE", 0, 4096, &gpus)) >= 0 ||
      (r = env_int("GT_NPROC_PER_NODE", 1, 4096, &env_nproc)) >= 0)
    return r;
  s->nnodes = (int)nnodes;
  s->node_id = (int)node;
  const char *step = getenv("SLURM_STEP_ID");
  const char *tasks = getenv("SLURM_STEP_TASKS_PER_NODE");
  if (tasks && leading_count(tasks) > 1)
    return slurm_error(
        "the step runs %s tasks per node, so as many giantruns: run one per node (srun --ntasks-per-node=1 "
        "giantrun ...)%s",
        tasks, "");
  /* In the batch script itself giantrun is one process on the first node:
   * the other nodes would never join. */
  if ((!step || !*step) && nnodes > 1 && !o->nnodes)
    return slurm_error(
        "giantrun runs in the batch script of a %s-node allocation, on one node only: start one per node with "
        "srun --ntasks-per-node=1 giantrun ...%s",
        getenv("SLURM_NNODES"), "");
  bool need_hosts = !o->node_id || (!o->endpoint && !o->standalone);
  if (need_hosts) {
    const char *list = step_env("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST");
    if (!list || !*list) return slurm_error("SLURM_JOB_NODELIST is not set%s%s", "", "");
    if ((r = expand_nodelist(s, list)) >= 0) return r;
  }
  char taken[600] = "";
  size_t t = 0;
#define TAKE(...) t += (size_t)snprintf(taken + t, t < sizeof taken ? sizeof taken - t : 0, __VA_ARGS__)
  if (!o->nnodes) {
    snprintf(s->nnodes_buf, sizeof s->nnodes_buf, "%d", s->nnodes);
    o->nnodes = s->nnodes_buf;
    TAKE(" --nnodes %s", o->nnodes);
  }
  if (!o->node_id) {
    if (!gt_rdzv_valid_id(s->node_name))
      return slurm_error("node name '%s' is not a valid --node-id%s: give --node-id", s->node_name, "");
    o->node_id = s->node_name;
    TAKE(" --node-id %s", o->node_id);
  }
  if (!o->job_id) {
    /* A job's steps each meet apart: a second srun is a job of its own. */
    snprintf(s->job_buf, sizeof s->job_buf, "slurm-%s.%s", job, step && *step ? step : "batch");
    if (!gt_rdzv_valid_id(s->job_buf))
      return slurm_error("SLURM_STEP_ID '%s' makes no valid --job-id%s: give --job-id", step, "");
    o->job_id = s->job_buf;
    TAKE(" --job-id %s", o->job_id);
  }
  if (!o->nproc) {
    const char *from = env_nproc ? "GT_NPROC_PER_NODE" : gpus ? "SLURM_GPUS_ON_NODE" : "no GPUs";
    o->nproc = env_nproc ? (int)env_nproc : gpus ? (int)gpus : 1;
    TAKE(" --nproc-per-node %d (%s)", o->nproc, from);
  }
  if (!o->endpoint && !o->standalone) {
    s->etcd = true;
    TAKE(", etcd %s %s", s->node_id == 0 ? "started here on" : "of the first node,", s->first_host);
  }
#undef TAKE
  if (t) gt_info("giantrun: Slurm job %s, node %d of %d:%s", job, s->node_id, s->nnodes, taken);
  return -1;
}

/* ---- the allocation's private etcd ---------------------------------------- */

#define ENDPOINT_FILE "endpoint"

/* The first IPv4 (else IPv6) address host resolves to. */
static gt_status resolve(const char *host, char *ip, size_t n) {
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
  int e = getaddrinfo(host, NULL, &hints, &res);
  if (e) return gt_errorf(GT_EIO, "cannot resolve the first node '%s', where etcd runs: %s", host, gai_strerror(e));
  const struct addrinfo *pick = NULL;
  for (const struct addrinfo *a = res; a; a = a->ai_next)
    if (!pick || (a->ai_family == AF_INET && pick->ai_family != AF_INET)) pick = a;
  gt_status st = GT_OK;
  if (!pick || getnameinfo(pick->ai_addr, pick->ai_addrlen, ip, (socklen_t)n, NULL, 0, NI_NUMERICHOST))
    st = gt_errorf(GT_EIO, "the first node '%s' resolves to no usable address", host);
  freeaddrinfo(res);
  return st;
}

/* Copies src to dir/name, created 0600 (never readable by others). */
static gt_status copy_file(const char *src, const char *dir, const char *name, char *path, size_t n) {
  snprintf(path, n, "%s/%s", dir, name);
  int in = open(src, O_RDONLY | O_CLOEXEC);
  int out = in < 0 ? -1 : open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  gt_status st = out >= 0 ? GT_OK : gt_errorf(GT_EIO, "cannot copy %s to %s: %s", src, path, strerror(errno));
  char buf[8192];
  for (ssize_t got; st == GT_OK && (got = read(in, buf, sizeof buf)) != 0;) {
    if (got < 0 || write(out, buf, (size_t)got) != got)
      st = gt_errorf(GT_EIO, "cannot copy %s to %s: %s", src, path, strerror(errno));
  }
  if (in >= 0) close(in);
  if (out >= 0 && close(out) != 0 && st == GT_OK) st = gt_errorf(GT_EIO, "cannot write %s: %s", path, strerror(errno));
  return st;
}

/* The directory the nodes share: $SLURM_SUBMIT_DIR/.giantrun-JOB.STEP[.rRESTART]. */
static gt_status shared_dir(char *dir, size_t n) {
  const char *base = getenv("SLURM_SUBMIT_DIR"), *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
  const char *restart = getenv("SLURM_RESTART_COUNT");
  if (!base || !*base)
    return gt_errorf(GT_EINVAL,
                     "SLURM_SUBMIT_DIR is not set: give --rdzv-endpoint, as the nodes cannot meet on "
                     "the submit directory");
  int w = snprintf(dir, n, "%s/.giantrun-%s.%s%s%s", base, job, step && *step ? step : "batch",
                   restart && *restart ? ".r" : "", restart && *restart ? restart : "");
  if (w < 0 || (size_t)w >= n) return gt_errorf(GT_EINVAL, "SLURM_SUBMIT_DIR '%s' is too long", base);
  return GT_OK;
}

/* Node 0: etcd on the first node's address, its endpoint and the client's
 * credentials published in the shared directory (the endpoint last, so a
 * reader that sees it sees the rest). */
static gt_status start_first(slurm_etcd *se, const agent_opts *o, const char *ip) {
  gt_status st = standalone_start(&se->etcd, ip, &o->ports);
  if (st != GT_OK) return gt_error_context(st, "the allocation's etcd");
  snprintf(se->endpoint, sizeof se->endpoint, "%s", se->etcd.endpoint);
  snprintf(se->ca, sizeof se->ca, "%s", se->etcd.ca);
  snprintf(se->cert, sizeof se->cert, "%s", se->etcd.client_cert);
  snprintf(se->key, sizeof se->key, "%s", se->etcd.client_key);
  if ((st = shared_dir(se->shared, sizeof se->shared)) != GT_OK) return st;
  gt_etcd_local_remove(se->shared); /* left by a run of this very step that was killed */
  if (mkdir(se->shared, 0700) != 0) {
    st = gt_errorf(GT_EIO, "cannot make %s for the other nodes: %s", se->shared, strerror(errno));
    se->shared[0] = 0;
    return st;
  }
  char path[PATH_MAX + 32], tmp[PATH_MAX + 32];
  if ((st = copy_file(se->ca, se->shared, "ca.pem", path, sizeof path)) != GT_OK ||
      (st = copy_file(se->cert, se->shared, "client.pem", path, sizeof path)) != GT_OK ||
      (st = copy_file(se->key, se->shared, "client.key", path, sizeof path)) != GT_OK)
    return st;
  snprintf(tmp, sizeof tmp, "%s/" ENDPOINT_FILE ".tmp", se->shared);
  snprintf(path, sizeof path, "%s/" ENDPOINT_FILE, se->shared);
  FILE *f = fopen(tmp, "w");
  if (!f || fprintf(f, "%s\n", se->endpoint) < 0 || fclose(f) != 0 || rename(tmp, path) != 0)
    return gt_errorf(GT_EIO, "cannot write %s: %s", path, strerror(errno));
  return GT_OK;
}

/* Other nodes: wait (bounded) for node 0's files, then copy the
 * credentials to a private local directory, as the shared one goes when
 * node 0's giantrun exits. */
static gt_status join_first(slurm_etcd *se, const agent_opts *o) {
  char dir[PATH_MAX], path[PATH_MAX + 32];
  gt_status st = shared_dir(dir, sizeof dir);
  if (st != GT_OK) return st;
  snprintf(path, sizeof path, "%s/" ENDPOINT_FILE, dir);
  double end = gt_now() + o->rdzv_timeout_s;
  FILE *f;
  while (!(f = fopen(path, "r"))) {
    if (agent_stop_signal) return gt_errorf(GT_ECANCELED, "stopped while waiting for the first node's etcd");
    if (gt_now() > end)
      return gt_errorf(GT_ETIMEDOUT,
                       "the first node (%s) did not publish its etcd in %s within %d s (--rdzv-timeout): is "
                       "SLURM_SUBMIT_DIR on a filesystem every node shares, and does giantrun run there "
                       "(srun --ntasks-per-node=1)?",
                       o->slurm.first_host, dir, o->rdzv_timeout_s);
    struct timespec ts = {0, 200 * 1000000L}; /* a shared filesystem tells no one of a new file: look */
    nanosleep(&ts, NULL);
  }
  snprintf(se->joined, sizeof se->joined, "%s", dir);
  char line[sizeof se->endpoint] = "";
  bool ok = fgets(line, sizeof line, f) != NULL;
  fclose(f);
  line[strcspn(line, "\r\n")] = 0;
  if (!ok || strncmp(line, "https://", 8) != 0)
    return gt_errorf(GT_EINVAL, "%s holds no etcd endpoint ('%s')", path, line);
  snprintf(se->endpoint, sizeof se->endpoint, "%s", line);
  const char *tmp = getenv("TMPDIR");
  snprintf(se->local, sizeof se->local, "%s/giantrun-slurm-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(se->local)) {
    st = gt_errorf(GT_EIO, "cannot make a directory for etcd's credentials (%s): %s", se->local, strerror(errno));
    se->local[0] = 0;
    return st;
  }
  const char *names[3] = {"ca.pem", "client.pem", "client.key"};
  char *out[3] = {se->ca, se->cert, se->key};
  for (int i = 0; i < 3 && st == GT_OK; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    st = copy_file(path, se->local, names[i], out[i], sizeof se->ca);
  }
  return st;
}

gt_status slurm_etcd_start(slurm_etcd *se, agent_opts *o) {
  memset(se, 0, sizeof *se);
  char ip[INET6_ADDRSTRLEN];
  gt_status st = resolve(o->slurm.first_host, ip, sizeof ip);
  if (st == GT_OK) st = o->slurm.node_id == 0 ? start_first(se, o, ip) : join_first(se, o);
  if (st != GT_OK) {
    slurm_etcd_stop(se, o);
    return st;
  }
  o->endpoint = se->endpoint;
  o->cacert = se->ca;
  o->cert = se->cert;
  o->key = se->key;
  return GT_OK;
}

/* How many nodes have said they left (files left.<node> in dir). */
static int count_left(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += strncmp(e->d_name, "left.", 5) == 0;
  closedir(d);
  return n;
}

void slurm_etcd_stop(slurm_etcd *se, const agent_opts *o) {
  char path[PATH_MAX + 128];
  if (se->joined[0]) {
    /* Tell node 0 this agent is done with its etcd. */
    snprintf(path, sizeof path, "%s/left.%s", se->joined, o->node_id);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) close(fd);
  }
  if (se->etcd.srv.pid > 0 && se->shared[0]) {
    /* Node 0 finishes first as often as not: its etcd stays until the
     * other agents have left it (their last calls, resigning and closing,
     * go to it), or for a lease TTL and 10 s more, or a signal. */
    double end = gt_now() + o->ttl_s + 10;
    while (!agent_stop_signal && gt_now() < end && count_left(se->shared) >= 0 &&
           count_left(se->shared) < o->slurm.nnodes - 1) {
      struct timespec ts = {0, 200 * 1000000L};
      nanosleep(&ts, NULL);
    }
  }
  standalone_stop(&se->etcd);
  if (se->shared[0]) gt_etcd_local_remove(se->shared);
  if (se->local[0]) gt_etcd_local_remove(se->local);
  se->shared[0] = se->local[0] = se->joined[0] = 0;
}
