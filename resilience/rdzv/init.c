/* gt_init: the worker side of the launch contract (see giant/engine/init.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "giant/engine/comm.h"
#include "giant/engine/etcd.h"
#include "giant/engine/init.h"
#include "giant/protocol.h"
#include "giant/engine/store.h"

typedef struct job_impl {
  gt_job pub; /* first, so a gt_job * is a job_impl * */
  gt_etcd_client *cli;
  int progress_fd; /* GT_PROGRESS_FD, or -1 */
} job_impl;

static gt_status env_long(const char *name, int required, long dflt, long lo, long hi, long *out) {
  const char *v = getenv(name);
  if (!v) {
    if (required)
      return gt_errorf(
          GT_EINVAL, "%s is not set: start workers with giantrun, or unset GT_WORLD_SIZE to run as a job of one", name);
    *out = dflt;
    return GT_OK;
  }
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end) return gt_errorf(GT_EINVAL, "%s='%s' is not an integer", name, v);
  if (x < lo || x > hi) return gt_errorf(GT_EINVAL, "%s=%ld is out of range [%ld, %ld]", name, x, lo, hi);
  *out = x;
  return GT_OK;
}

static gt_status env_copy(const char *name, int required, char *dst, size_t cap) {
  const char *v = getenv(name);
  if (!v || !*v) {
    if (required) return gt_errorf(GT_EINVAL, "%s is not set: start workers with giantrun", name);
    dst[0] = 0;
    return GT_OK;
  }
  if (strlen(v) >= cap)
    return gt_errorf(GT_EINVAL, "%s is %zu characters long; at most %zu are allowed", name, strlen(v), cap - 1);
  memcpy(dst, v, strlen(v) + 1);
  return GT_OK;
}

/* etcd://HOST:PORT[,...]/PREFIX, or etcds:// for TLS (https endpoints). */
static gt_status open_etcd_store(job_impl *j, const char *url, int tls) {
#ifndef GIANT_HAVE_ETCD
  (void)j;
  (void)tls;
  return gt_errorf(GT_EUNSUPPORTED,
                   "GT_STORE='%s' is on etcd, but this build of Giant has no etcd client (GIANT_ETCD=OFF): "
                   "rebuild with it, or use a tcp://HOST:PORT store",
                   url);
#else
  const char *rest = strstr(url, "://") + 3;
  const char *slash = strchr(rest, '/');
  if (!slash || slash == rest || slash[1] == 0)
    return gt_errorf(GT_EINVAL, "GT_STORE='%s' is malformed: expected etcd://HOST:PORT[,HOST:PORT]/PREFIX", url);
  char endpoints[2048];
  size_t n = 0;
  for (const char *p = rest; p < slash; p++) {
    if (*p == ' ')
      return gt_errorf(GT_EINVAL, "GT_STORE='%s' is malformed: endpoints are HOST:PORT separated by commas", url);
    if (tls && (p == rest || p[-1] == ',')) {
      if (n + 8 >= sizeof endpoints) break;
      memcpy(endpoints + n, "https://", 8);
      n += 8;
    }
    if (n + 1 >= sizeof endpoints) break;
    endpoints[n++] = *p;
  }
  if (n + 1 >= sizeof endpoints) return gt_errorf(GT_EINVAL, "GT_STORE: the endpoint list is too long");
  endpoints[n] = 0;
  gt_etcd_config cfg = {.endpoints = endpoints,
                        .cacert = getenv(GT_ENV_STORE_CACERT),
                        .cert = getenv(GT_ENV_STORE_CERT),
                        .key = getenv(GT_ENV_STORE_KEY),
                        .user = getenv(GT_ENV_STORE_USER),
                        .timeout_ms = 10000};
  char password[256];
  const char *pw_file = getenv(GT_ENV_STORE_PASSWORD_FILE);
  if (cfg.user && !pw_file) return gt_errorf(GT_EINVAL, "GT_STORE_USER is set but GT_STORE_PASSWORD_FILE is not");
  if (cfg.user) GT_TRY(gt_etcd_read_password(pw_file, password, sizeof password));
  if (cfg.user) cfg.password = password;
  gt_status st = gt_etcd_connect(&cfg, &j->cli);
  if (cfg.user) memset(password, 0, sizeof password);
  if (st != GT_OK) return gt_error_context(st, "GT_STORE=%s", url);
  return gt_etcd_store_create(j->cli, slash, &j->pub.store);
#endif
}

static gt_status open_tcp_store(job_impl *j, const char *url) {
  const char *hp = url + strlen("tcp://");
  const char *colon = strrchr(hp, ':');
  char host[256];
  long port;
  char *end;
  if (!colon || colon == hp || (size_t)(colon - hp) >= sizeof host) goto bad;
  port = strtol(colon + 1, &end, 10);
  if (*end || end == colon + 1 || port < 1 || port > 65535) goto bad;
  memcpy(host, hp, (size_t)(colon - hp));
  host[colon - hp] = 0;
  gt_store_tcp_config cfg = {
      .host = host, .port = (int)port, .is_host = j->pub.rank == 0, .secret = j->pub.secret, .timeout_ms = 60000};
  return gt_store_tcp_open(&cfg, &j->pub.store);
bad:
  return gt_errorf(GT_EINVAL, "GT_STORE='%s' is malformed: expected tcp://HOST:PORT", url);
}

static gt_status init_alone(job_impl *j) {
  gt_job *p = &j->pub;
  p->world_size = p->local_world_size = 1;
  snprintf(p->job_id, sizeof p->job_id, "local");
  GT_TRY(env_copy(GT_ENV_PLAN, 0, p->plan, sizeof p->plan));
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof raw) != 1) return gt_errorf(GT_EBACKEND, "OpenSSL RAND_bytes failed");
  for (size_t i = 0; i < sizeof raw; i++) snprintf(p->secret + 2 * i, 3, "%02x", raw[i]);
  gt_store_tcp_config cfg = {.host = "127.0.0.1", .port = 0, .is_host = true, .secret = p->secret, .timeout_ms = 5000};
  return gt_store_tcp_open(&cfg, &p->store);
}

/* The pipe giantrun reads step counts from. Non-blocking: a worker never
 * waits on its agent; close-on-exec: the worker's own children don't hold it. */
static gt_status open_progress(job_impl *j) {
  long fd;
  GT_TRY(env_long(GT_ENV_PROGRESS_FD, 0, -1, -1, INT_MAX, &fd));
  if (fd < 0) return GT_OK;
  int fl = fcntl((int)fd, F_GETFL);
  if (fl < 0) return gt_errorf(GT_EINVAL, "GT_PROGRESS_FD=%ld is not an open file descriptor", fd);
  fcntl((int)fd, F_SETFL, fl | O_NONBLOCK);
  fcntl((int)fd, F_SETFD, FD_CLOEXEC);
  j->progress_fd = (int)fd;
  return GT_OK;
}

static gt_status init_env(job_impl *j) {
  gt_job *p = &j->pub;
  long world, rank, lworld, lrank, node, gen;
  GT_TRY(env_long(GT_ENV_WORLD_SIZE, 1, 1, 1, 1L << 20, &world));
  GT_TRY(env_long(GT_ENV_RANK, 1, 0, 0, world - 1, &rank));
  GT_TRY(env_long(GT_ENV_LOCAL_WORLD_SIZE, 0, world, 1, world, &lworld));
  GT_TRY(env_long(GT_ENV_LOCAL_RANK, 0, rank, 0, lworld - 1, &lrank));
  GT_TRY(env_long(GT_ENV_NODE_RANK, 0, 0, 0, world - 1, &node));
  GT_TRY(env_long(GT_ENV_GENERATION, 0, 0, 0, LONG_MAX / 2, &gen));
  p->world_size = (int)world;
  p->rank = (int)rank;
  p->local_world_size = (int)lworld;
  p->local_rank = (int)lrank;
  p->node_rank = (int)node;
  p->generation = gen;
  GT_TRY(env_copy(GT_ENV_JOB_ID, 0, p->job_id, sizeof p->job_id));
  if (!p->job_id[0]) snprintf(p->job_id, sizeof p->job_id, "job");
  GT_TRY(env_copy(GT_ENV_PLAN, 0, p->plan, sizeof p->plan));
  GT_TRY(env_copy(GT_ENV_JOB_SECRET, 1, p->secret, sizeof p->secret));
  GT_TRY(open_progress(j));
  /* The agent forwards output line by line; a pipe would otherwise be
   * block-buffered, delaying step lines and losing the last ones before a
   * kill. */
  fflush(stdout);
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *url = getenv(GT_ENV_STORE);
  if (!url || !*url)
    return gt_errorf(GT_EINVAL, "GT_STORE is not set: start workers with giantrun (it sets etcd://...)");
  if (strncmp(url, "etcd://", 7) == 0) return open_etcd_store(j, url, 0);
  if (strncmp(url, "etcds://", 8) == 0) return open_etcd_store(j, url, 1);
  if (strncmp(url, "tcp://", 6) == 0) return open_tcp_store(j, url);
  return gt_errorf(GT_EINVAL,
                   "GT_STORE='%s' has an unknown scheme: expected etcd://HOST:PORT/PREFIX or tcp://HOST:PORT", url);
}

gt_status gt_init(gt_job **out) {
  if (!out) return gt_errorf(GT_EINVAL, "gt_init: NULL output");
  *out = NULL;
  job_impl *j = calloc(1, sizeof *j);
  if (!j) return gt_errorf(GT_ENOMEM, "out of memory");
  j->progress_fd = -1;
  gt_status st = getenv(GT_ENV_WORLD_SIZE) ? init_env(j) : init_alone(j);
  if (st == GT_OK) snprintf(j->pub.generation_name, sizeof j->pub.generation_name, "gen%ld", j->pub.generation);
  if (st != GT_OK) {
    gt_job_destroy(&j->pub);
    return st;
  }
  *out = &j->pub;
  return GT_OK;
}

gt_status gt_job_step(gt_job *job, long long step) {
  if (!job) return gt_errorf(GT_EINVAL, "gt_job_step: NULL job");
  job_impl *j = (job_impl *)job;
  if (j->progress_fd < 0) return GT_OK;
  unsigned char rec[8];
  uint64_t v = (uint64_t)step;
  for (int b = 0; b < 8; b++) rec[b] = (unsigned char)(v >> (8 * b));
  /* Eight bytes are written whole or not at all (a pipe write under
   * PIPE_BUF is atomic); a full pipe only drops this report. */
  ssize_t n = write(j->progress_fd, rec, sizeof rec);
  (void)n;
  return GT_OK;
}

void gt_job_done(gt_job *job) {
  job_impl *j = (job_impl *)job;
  if (!j || j->progress_fd < 0) return;
  close(j->progress_fd); /* the agent reads EOF: done */
  j->progress_fd = -1;
}

gt_etcd_client *gt_job_etcd(gt_job *job) {
#ifdef GIANT_HAVE_ETCD
  return job ? ((job_impl *)job)->cli : NULL;
#else
  (void)job;
  return NULL;
#endif
}

void gt_job_destroy(gt_job *job) {
  if (!job) return;
  job_impl *j = (job_impl *)job;
  if (j->progress_fd >= 0) close(j->progress_fd);
  if (job->store) gt_store_destroy(job->store);
#ifdef GIANT_HAVE_ETCD
  gt_etcd_close(j->cli);
#endif
  free(j);
}
