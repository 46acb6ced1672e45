/* giantrun --comm-ports A-B: every socket a job listens on is in the range.
 *
 * examples/gpt trains at pp=2 on two workers under giantrun --standalone
 * (its etcd, the workers' groups: world, pp and the pipeline's links). From
 * the start until a step is printed, the test samples the TCP sockets of
 * giantrun and every process under it (their /proc/PID/fd links matched
 * against /proc/net/tcp and tcp6) and records each one in LISTEN; then it
 * looks at the job's connections to itself: one end of each is a
 * listener's port (the accepting side keeps it), so a group's listener
 * that closed once its peers were in is still seen there. The range lies
 * below the kernel's ephemeral ports, where the connecting ends' ports never
 * fall. Without --comm-ports the same job listens outside the range (the
 * checks can fail). A range too small for the node is refused at start,
 * and one whose ports other programs hold fails the job naming it. */
#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "comm/ports.h"
#include "common/run_cmd.h"
#include "launch/launch_test.h"
#include "common/gt_skip.h" /* after launch_test.h, which includes <cmocka.h> */

enum { WINDOW = 16, MAX_PIDS = 256, MAX_SOCKS = 4096 };

static char dir[64], text[128], data[128], gpt[512];
static int lo, hi; /* this run's range */

/* ---- the job's sockets -------------------------------------------------- */

typedef struct jsock {
  unsigned long inode;
  int state; /* 0x0A LISTEN, 0x01 ESTABLISHED */
  char laddr[40], raddr[40];
  int lport, rport;
  long pid;
  char comm[32];
} jsock;

static long ppid_of(long pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *p = strrchr(buf, ')'); /* the name may hold anything */
  long ppid = -1;
  if (!p || sscanf(p + 1, " %*c %ld", &ppid) != 1) return -1;
  return ppid;
}

/* root and every process under it. */
static int job_pids(long root, long *out, int cap) {
  static long pid[8192], parent[8192];
  int n = 0;
  DIR *d = opendir("/proc");
  if (!d) return 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < 8192) {
    char *end;
    long p = strtol(e->d_name, &end, 10);
    if (*end || p <= 0) continue;
    pid[n] = p;
    parent[n++] = ppid_of(p);
  }
  closedir(d);
  int k = 0;
  out[k++] = root;
  for (bool grew = true; grew;) {
    grew = false;
    for (int i = 0; i < n && k < cap; i++) {
      bool in = false, under = false;
      for (int j = 0; j < k; j++) {
        in |= out[j] == pid[i];
        under |= out[j] == parent[i];
      }
      if (!in && under) {
        out[k++] = pid[i];
        grew = true;
      }
    }
  }
  return k;
}

/* An address as /proc/net/tcp writes it: IPv4-mapped IPv6 addresses (a
 * dual-stack socket's, as gRPC's clients are) as their IPv4, so that the two
 * ends of one connection compare equal across tcp and tcp6. */
static void ipv4(const char *hex, char out[40]) {
  if (strlen(hex) == 32 && !strncmp(hex, "0000000000000000FFFF0000", 24))
    snprintf(out, 40, "%s", hex + 24);
  else
    snprintf(out, 40, "%s", hex);
}

/* The TCP sockets open in root's processes. */
static int job_sockets(long root, jsock *out, int cap) {
  static long pids[MAX_PIDS];
  static struct {
    unsigned long inode;
    long pid;
  } owned[MAX_SOCKS];
  int np = job_pids(root, pids, MAX_PIDS), no = 0;
  for (int i = 0; i < np; i++) {
    char path[64], link[64];
    snprintf(path, sizeof path, "/proc/%ld/fd", pids[i]);
    DIR *d = opendir(path);
    if (!d) continue;
    struct dirent *e;
    while ((e = readdir(d)) && no < MAX_SOCKS) {
      char fd[400];
      snprintf(fd, sizeof fd, "%s/%.255s", path, e->d_name);
      ssize_t len = readlink(fd, link, sizeof link - 1);
      if (len <= 0) continue;
      link[len] = 0;
      unsigned long ino;
      if (sscanf(link, "socket:[%lu]", &ino) == 1) {
        owned[no].inode = ino;
        owned[no++].pid = pids[i];
      }
    }
    closedir(d);
  }
  int n = 0;
  static const char *const tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
  for (int t = 0; t < 2; t++) {
    FILE *f = fopen(tables[t], "r");
    if (!f) continue;
    char line[512];
    while (fgets(line, sizeof line, f) && n < cap) {
      jsock s = {0};
      char la[40], ra[40];
      if (sscanf(line, " %*d: %39[0-9A-Fa-f]:%x %39[0-9A-Fa-f]:%x %x %*x:%*x %*x:%*x %*x %*u %*u %lu", la,
                 (unsigned *)&s.lport, ra, (unsigned *)&s.rport, (unsigned *)&s.state, &s.inode) != 6)
        continue; /* the header */
      ipv4(la, s.laddr);
      ipv4(ra, s.raddr);
      for (int i = 0; i < no; i++)
        if (owned[i].inode == s.inode && s.inode) {
          s.pid = owned[i].pid;
          char cp[64];
          snprintf(cp, sizeof cp, "/proc/%ld/comm", s.pid);
          FILE *c = fopen(cp, "r");
          if (c) {
            if (fgets(s.comm, sizeof s.comm, c)) s.comm[strcspn(s.comm, "\n")] = 0;
            fclose(c);
          }
          out[n++] = s;
          break;
        }
    }
    fclose(f);
  }
  return n;
}

static bool in_range(int port) { return port >= lo && port <= hi; }

typedef struct seen {
  int listen, listen_out, gpt_listen; /* listeners seen, those outside the range, the workers' */
  long lpid[256];
  int lport[256];
  int pairs, pairs_out, gpt_pairs; /* connections of the job to itself; with no end in range; gpt to gpt */
  char why[2048];                  /* what was outside */
} seen;

static void note(seen *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(seen *v, const char *fmt, ...) {
  size_t used = strlen(v->why);
  if (used + 200 > sizeof v->why) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v->why + used, sizeof v->why - used, fmt, ap);
  va_end(ap);
}

/* Each listener (process and port) once, however many samples saw it. */
static void count_listeners(const jsock *s, int n, seen *v) {
  for (int i = 0; i < n; i++) {
    if (s[i].state != 0x0A) continue;
    bool known = false;
    for (int k = 0; k < v->listen && !known; k++) known = v->lpid[k] == s[i].pid && v->lport[k] == s[i].lport;
    if (known || v->listen >= (int)(sizeof v->lpid / sizeof v->lpid[0])) continue;
    v->lpid[v->listen] = s[i].pid;
    v->lport[v->listen++] = s[i].lport;
    v->gpt_listen += !strcmp(s[i].comm, "gpt");
    if (in_range(s[i].lport)) continue;
    v->listen_out++;
    note(v, "  %s (pid %ld) listens on port %d\n", s[i].comm, s[i].pid, s[i].lport);
  }
}

static void count_pairs(const jsock *s, int n, seen *v) {
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) {
      if (s[i].state != 0x01 || s[j].state != 0x01 || s[i].lport != s[j].rport || s[i].rport != s[j].lport ||
          strcmp(s[i].laddr, s[j].raddr) || strcmp(s[i].raddr, s[j].laddr))
        continue;
      v->pairs++;
      v->gpt_pairs += !strcmp(s[i].comm, "gpt") && !strcmp(s[j].comm, "gpt");
      if (in_range(s[i].lport) || in_range(s[j].lport)) continue;
      v->pairs_out++;
      note(v, "  %s (pid %ld) port %d <-> %s (pid %ld) port %d\n", s[i].comm, s[i].pid, s[i].lport, s[j].comm, s[j].pid,
           s[j].lport);
    }
}

/* ---- the job ------------------------------------------------------------- */

/* WINDOW free ports below the ephemeral range into lo..hi: each is listened
 * on here, then let go, so none is in use when the job starts. */
static void pick_range(void) {
  int eph = 32768;
  FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
  if (f) {
    if (fscanf(f, "%d", &eph) != 1) eph = 32768;
    fclose(f);
  }
  for (int base = eph - 3000 - (getpid() % 64) * WINDOW; base > 1024; base -= WINDOW) {
    int fds[WINDOW], i = 0;
    for (; i < WINDOW; i++)
      if (gt_ports_listen_at("127.0.0.1", base + i, &fds[i], NULL) != GT_OK) break;
    bool all = i == WINDOW;
    while (i-- > 0) close(fds[i]);
    if (all) {
      lo = base;
      hi = base + WINDOW - 1;
      return;
    }
  }
  skip();
}

/* Trains examples/gpt at pp=2 on two workers (with --comm-ports lo-hi when
 * ranged) until a step is printed, sampling the job's listeners on the
 * way, then its connections; stops it with SIGINT. */
static void run_job(bool ranged, seen *v) {
  memset(v, 0, sizeof *v);
  char log[128], range[32], tmp[128];
  snprintf(log, sizeof log, "%s/job%d.log", dir, ranged);
  snprintf(tmp, sizeof tmp, "%s/tmp%d", dir, ranged);
  assert_int_equal(mkdir(tmp, 0700), 0);
  setenv("TMPDIR", tmp, 1); /* the standalone etcd's directory */
  snprintf(range, sizeof range, "%d-%d", lo, hi);
  const char *args[40] = {"--standalone", "--nproc-per-node", "2", "--plan", "pp=2", "--stop-grace", "2"};
  int n = 7;
  if (ranged) {
    args[n++] = "--comm-ports";
    args[n++] = range;
  }
  const char *tail[] = {gpt, "--corpus",   text, "--data",        data, "--steps", "1000000", "--layers",
                        "2", "--channels", "32", "--heads",       "4",  "--seq",   "16",      "--batch",
                        "4", "--sample",   "0",  "--print-every", "10"};
  for (size_t i = 0; i < sizeof tail / sizeof tail[0]; i++) args[n++] = tail[i];
  args[n] = NULL;
  agent a;
  assert_int_equal(agent_start(&a, log, args), 0);
  static jsock socks[MAX_SOCKS];
  /* Etcd, the workers' start and their groups, to the first step: 2-4 s
   * on busy cores; START_S is > 15x. */
  double end = mono_now() + START_S;
  bool stepped = false;
  while (!stepped && mono_now() < end && proc_state(a.pid) && proc_state(a.pid) != 'Z') {
    count_listeners(socks, job_sockets(a.pid, socks, MAX_SOCKS), v);
    char *s = slurp(log);
    stepped = s && strstr(s, "] step ");
    free(s);
    usleep(2000);
  }
  if (!stepped) {
    kill(a.pid, SIGKILL);
    agent_wait(&a, STOP_S);
    dump_log(&a);
    fail_msg("the job printed no step within %d s", START_S);
  }
  int ns = job_sockets(a.pid, socks, MAX_SOCKS);
  count_listeners(socks, ns, v);
  count_pairs(socks, ns, v);
  kill(a.pid, SIGINT);
  if (agent_wait(&a, STOP_S) != 128 + SIGINT) {
    dump_log(&a);
    fail_msg("the job did not stop on SIGINT");
  }
  unsetenv("TMPDIR");
  print_message(
      "%s: %d listeners seen (%d of workers, %d outside %d-%d), %d connections within the job (%d "
      "between workers, %d with no end in the range)\n",
      ranged ? "--comm-ports" : "no range", v->listen, v->gpt_listen, v->listen_out, lo, hi, v->pairs, v->gpt_pairs,
      v->pairs_out);
}

static void test_every_listener_in_range(void **state) {
  (void)state;
  pick_range();
  seen v;
  run_job(true, &v);
  if (v.listen_out || v.pairs_out) fail_msg("sockets outside --comm-ports %d-%d:\n%s", lo, hi, v.why);
  assert_true(v.listen >= 2);    /* etcd's two, at least */
  assert_true(v.gpt_pairs >= 1); /* the workers' groups, whose listeners are gone by now */
}

static void test_without_range_listens_elsewhere(void **state) {
  (void)state;
  pick_range();
  seen v;
  run_job(false, &v);
  assert_true(v.listen_out >= 1);
  assert_true(v.pairs_out >= 1);
  assert_true(v.gpt_pairs >= 1);
}

/* giantrun ARGS: exit `code` with `words` in its output within 5 s (usage
 * errors come 0.02-0.06 s after the start on busy cores, > 80x). */
static void expect(const char *const *args, int code, const char *words) {
  char log[128];
  snprintf(log, sizeof log, "%s/usage.log", dir);
  agent a;
  double t0 = mono_now();
  assert_int_equal(agent_start(&a, log, args), 0);
  int got = agent_wait(&a, 10);
  double took = mono_now() - t0;
  char *out = slurp(log);
  if (got != code || !out || !strstr(out, words) || took > 5)
    fail_msg("expected exit %d with '%s' within 5 s; got %d after %.1f s:\n%s", code, words, got, took, out ? out : "");
  free(out);
}

static void test_too_small_range_refused(void **state) {
  (void)state;
  const char *w = worker_bin();
  expect((const char *[]){"--standalone", "--nproc-per-node", "2", "--comm-ports", "41000-41002", w, NULL}, 2,
         "--comm-ports 41000-41002 holds 3 ports, but this node needs at least 4: one for each of its 2 workers "
         "(--nproc-per-node), which listens while it forms its groups, and 2 for the --standalone etcd; widen the "
         "range");
  /* Checked before etcd is asked: port 1 would take 5 s to give up. */
  expect((const char *[]){"--rdzv-endpoint", "127.0.0.1:1", "--nproc-per-node", "3", "--comm-ports", "41000-41001", w,
                          NULL},
         2, "holds 2 ports, but this node needs at least 3: one for each of its 3 workers");
  expect((const char *[]){"--standalone", "--comm-ports", "41010-41000", w, NULL}, 2,
         "--comm-ports '41010-41000': the first port is greater than the last");
  expect((const char *[]){"--standalone", "--comm-ports", "0-10", w, NULL}, 2,
         "--comm-ports '0-10': want A-B, two ports in 1..65535");
  expect((const char *[]){"--standalone", "--comm-ports", "41000:41010", w, NULL}, 2, "want A-B");
  setenv("GT_COMM_PORTS", "many", 1);
  expect((const char *[]){"--standalone", w, NULL}, 2, "GT_COMM_PORTS 'many': want A-B");
  unsetenv("GT_COMM_PORTS");
}

/* Ports of the range held by another program: the node's count is met, so
 * giantrun starts, its etcd takes the two left, and the workers find none:
 * the job fails, naming the range, rather than listening elsewhere. */
static void test_held_ports_fail_the_job(void **state) {
  (void)state;
  pick_range();
  hi = lo + 3;
  int held[2];
  for (int i = 0; i < 2; i++) assert_int_equal(gt_ports_listen_at("127.0.0.1", lo + i, &held[i], NULL), GT_OK);
  char range[32], out[128], log[128], tmp[128], want[200];
  snprintf(range, sizeof range, "%d-%d", lo, hi);
  snprintf(out, sizeof out, "%s/held", dir);
  snprintf(tmp, sizeof tmp, "%s/tmp-held", dir);
  snprintf(log, sizeof log, "%s/held.log", dir);
  assert_int_equal(mkdir(out, 0700), 0);
  assert_int_equal(mkdir(tmp, 0700), 0);
  setenv("LW_DIR", out, 1);
  setenv("TMPDIR", tmp, 1);
  agent a;
  assert_int_equal(agent_start(&a, log,
                               (const char *[]){"--standalone", "--nproc-per-node", "2", "--comm-ports", range,
                                                worker_bin(), "allreduce=1", NULL}),
                   0);
  expect_exit(&a, 1, RUN_S);
  snprintf(want, sizeof want, "no free port on 127.0.0.1 in --comm-ports %s (GT_COMM_PORTS): all 4 in use", range);
  if (!log_has(&a, want, 0)) {
    dump_log(&a);
    fail_msg("no '%s' in the log", want);
  }
  unsetenv("TMPDIR");
  for (int i = 0; i < 2; i++) close(held[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_too_small_range_refused),
      cmocka_unit_test(test_every_listener_in_range),
      cmocka_unit_test(test_without_range_listens_elsewhere),
      cmocka_unit_test(test_held_ports_fail_the_job),
  };
  if (system("command -v etcd >/dev/null 2>&1") != 0) {
    fprintf(stderr, "etcd not found on PATH: skipping\n");
    return 77;
  }
  build_path("examples/gpt", gpt, sizeof gpt);
  if (scratch_corpus("ports", dir, text, data) != 0) return 1;
  setenv("OMP_NUM_THREADS", "1", 1);
  int r = cmocka_run_group_tests(tests, NULL, NULL);
  scratch_remove(dir);
  return r;
}
