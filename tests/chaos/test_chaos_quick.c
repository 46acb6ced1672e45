/* The chaos suite's quick cases, on emulated nodes (tests/chaos/netns.h):
 * each node a network namespace with its own address, one giantrun agent
 * per node, etcd in the root namespace on the bridge.
 *
 *   kill a worker: examples/gpt on 2 nodes x 2 workers (dp=4, --reshape),
 *   worker 1 SIGKILLed at step 8 (GT_FAULT). The three left reshape in
 *   their processes across the nodes and finish; at most the step in
 *   flight is lost; the last loss is within the cross-layout tolerance of
 *   one process that trained the same steps uninterrupted (same global
 *   batch, same samples); no process of the job and nothing of the
 *   emulated network is left afterwards.
 *
 * Without root the suite says so and skips. */
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "chaos/netns.h"
#include "common/run_cmd.h"
#include "localkit/etcd_server.h"

enum { STEPS = 24, KILL_AT = 8 };

static char gpt[512], giantrun[512], dir[64], text[128], data[128];
static chaos_net net;
static etcd_fixture fx;
static bool ready;

static int setup(void **state) {
  (void)state;
  build_path("examples/gpt", gpt, sizeof gpt);
  build_path("launch/giantrun", giantrun, sizeof giantrun);
  if (scratch_corpus("chaos", dir, text, data) != 0) return -1;
  if (*chaos_unsupported() || !etcd_fixture_available()) return 0;
  if (chaos_net_create(&net, 2) != 0) return -1;
  etcd_fixture_opts o = {.also_listen = net.host_ip};
  if (etcd_fixture_start(&fx, &o) != 0) {
    chaos_net_destroy(&net);
    return -1;
  }
  ready = true;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  if (ready) etcd_fixture_destroy(&fx), chaos_net_destroy(&net);
  return scratch_remove(dir);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define GPT_ARGS                                                                                           \
  gpt, "--corpus", text, "--data", data, "--steps", "24", "--layers", "1", "--channels", "32", "--heads", \
      "4", "--seq", "16", "--global-batch", "8", "--sample", "0", "--print-every", "1"

/* giantrun for node i, in its namespace, output to log. */
static pid_t start_agent(int i, const char *job, const char *fault, const char *log) {
  char endpoint[96], host[64], node[16], faults[160];
  snprintf(endpoint, sizeof endpoint, "http://%s:%d", net.host_ip, fx.client_port);
  snprintf(host, sizeof host, "GT_COMM_HOST=%s", net.ip[i]);
  snprintf(node, sizeof node, "n%d", i);
  snprintf(faults, sizeof faults, "GT_FAULT=%s", fault ? fault : "");
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
    /* Between emulated nodes the transport is TCP over their links, not
     * the shared memory of the one real machine. */
    execlp("ip", "ip", "netns", "exec", net.ns[i], "env", host, "GT_COMM_TRANSPORT=tcp", "OMP_NUM_THREADS=1", faults,
           giantrun, "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-endpoint", endpoint, "--job-id", job,
           "--node-id", node, "--rdzv-settle", "8", "--rdzv-ttl", "4", "--reshape", "--plan", "dp=4",
           GPT_ARGS, (char *)NULL);
    _exit(127);
  }
  return pid;
}

/* The agent's exit status (128+N for a signal), or -1 after timeout_s
 * (the agent is then killed). */
static int wait_agent(pid_t pid, double timeout_s) {
  for (double end = now_s() + timeout_s; now_s() < end; usleep(50000)) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return -1;
}

/* Processes still running with this job's id in their environment. */
static int job_processes(const char *job) {
  DIR *d = opendir("/proc");
  int n = 0;
  struct dirent *e;
  char want[96];
  int wl = snprintf(want, sizeof want, "GT_JOB_ID=%s", job);
  while (d && (e = readdir(d))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char path[300], buf[65536];
    snprintf(path, sizeof path, "/proc/%s/environ", e->d_name);
    int fd = open(path, O_RDONLY);
    if (fd < 0) continue;
    ssize_t len = read(fd, buf, sizeof buf - 1);
    close(fd);
    for (ssize_t k = 0; k + wl <= len; k += (ssize_t)strlen(buf + k) + 1)
      if (!strncmp(buf + k, want, (size_t)wl) && (buf[k + wl] == 0)) n++;
  }
  if (d) closedir(d);
  return n;
}

static float reference_loss(void) {
  char *argv[] = {GPT_ARGS, NULL};
  run_result *r = malloc(sizeof *r);
  assert_non_null(r);
  run_cmd(argv, (char *[]){"OMP_NUM_THREADS=1", NULL}, 120, r);
  if (r->exit_code != 0) fail_msg("reference run: exit %d:\n%s", r->exit_code, r->output);
  const char *p = strstr(r->output, "loss ");
  float a, b;
  int from, to;
  while (p && sscanf(p, "loss %f -> %f over steps %d..%d", &a, &b, &from, &to) != 4) p = strstr(p + 1, "loss ");
  if (!p) fail_msg("no final loss in:\n%s", r->output);
  free(r);
  return b;
}

static void test_kill_a_worker(void **state) {
  (void)state;
  if (!ready) {
    print_message("skipped: %s\n", *chaos_unsupported() ? chaos_unsupported() : "etcd not found");
    skip();
  }
  float ref = reference_loss();
  char log[2][128], fault[64];
  snprintf(fault, sizeof fault, "crash:rank=1,at=%d", KILL_AT);
  pid_t agent[2];
  for (int i = 0; i < 2; i++) {
    snprintf(log[i], sizeof log[i], "%s/node%d.log", dir, i);
    agent[i] = start_agent(i, "chaos-kill-worker", fault, log[i]);
  }
  int code[2] = {wait_agent(agent[0], 240), wait_agent(agent[1], 60)};
  char *out = NULL;
  size_t cap = 0;
  FILE *all = open_memstream(&out, &cap);
  for (int i = 0; i < 2; i++) {
    FILE *f = fopen(log[i], "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f)) fputs(line, all);
    if (f) fclose(f);
  }
  fclose(all);
  if (code[0] != 0 || code[1] != 0) fail_msg("agents exited %d and %d:\n%s", code[0], code[1], out);
  /* The three left reshaped in their processes, across the nodes. */
  int reshaped = 0, step = -1;
  for (const char *p = strstr(out, "gpt: reshaped in "); p; p = strstr(p + 1, "gpt: reshaped in ")) {
    reshaped++;
    const char *q = strstr(p, " of 3 in membership epoch 1");
    assert_non_null(q);
    assert_int_equal(sscanf(strstr(p, ", step "), ", step %d", &step), 1);
  }
  assert_int_equal(reshaped, 3);
  assert_true(step == KILL_AT || step == KILL_AT + 1);
  /* The last loss, as one process trained it. */
  const char *l = NULL;
  for (const char *p = strstr(out, "] loss "); p; p = strstr(p + 1, "] loss ")) l = p;
  float a, b;
  int from, to;
  if (!l || sscanf(l, "] loss %f -> %f over steps %d..%d", &a, &b, &from, &to) != 4 || to != STEPS)
    fail_msg("no final loss line:\n%s", out);
  print_message("worker 1 killed at step %d: the three left reshaped at step %d across 2 emulated nodes; final "
                "loss %.6f, one process uninterrupted %.6f (relative difference %.2e)\n",
                KILL_AT, step, b, ref, fabs((double)b - ref) / ref);
  if (fabsf(b - ref) > 1e-5f * fabsf(ref)) fail_msg("final loss %.7f, uninterrupted %.7f", b, ref);
  /* Nothing of the job is left running. */
  assert_int_equal(job_processes("chaos-kill-worker"), 0);
  free(out);
}

static void test_nothing_left_behind(void **state) {
  (void)state;
  if (!ready) {
    print_message("skipped: %s\n", *chaos_unsupported() ? chaos_unsupported() : "etcd not found");
    skip();
  }
  /* The emulated network goes with the suite, leaving nothing. */
  chaos_net copy = net;
  chaos_net_destroy(&net);
  assert_false(chaos_net_leftovers(&copy));
  assert_int_equal(chaos_net_create(&net, 2), 0); /* for the teardown to remove again */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kill_a_worker),
      cmocka_unit_test(test_nothing_left_behind),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
