/* The TCP store: values, waits with timeouts, atomic adds across processes,
 * barriers, and refusal of strangers. The flood of strangers needs more
 * open files than some machines allow: it is a ctest test of its own
 * (test_comm_store_flood, argv[1] flood), skipped (77) there, so that the
 * rest still shows as passed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/gt_skip.h"
#include "localkit/ranks.h"
#include "comm/wire.h"
#include "giant/engine/store.h"

/* Time bounds. A store request or a handshake on loopback takes about a
 * millisecond, tens of ms under sanitizers on two busy cores. The waits
 * below that are meant to succeed end only a broken run: */
#define STORE_MS 30000 /* a store request or wait for a key that is set */
#define WIRE_MS 20000  /* a connect or a frame on loopback */
#define RUN_S 60       /* 4 ranks of store traffic: under 1 s loaded */
/* Waits meant to run out do so within a few ms of their deadline: 1.8 s of
 * slack over a 0.2 s wait is > 100x that. */
#define EXPIRY_SLACK_S 1.8

static gt_store *host_store(void) {
  gt_store_tcp_config cfg = {
      .host = "127.0.0.1", .port = 0, .is_host = true, .secret = HARNESS_SECRET, .timeout_ms = STORE_MS};
  gt_store *s = NULL;
  assert_int_equal(gt_store_tcp_open(&cfg, &s), GT_OK);
  return s;
}

static void test_set_get_del(void **state) {
  (void)state;
  gt_store *s = host_store();
  assert_int_equal(gt_store_set(s, "a", "hello", 5), GT_OK);
  void *v;
  size_t len;
  assert_int_equal(gt_store_get(s, "a", &v, &len, STORE_MS), GT_OK);
  assert_int_equal(len, 5);
  assert_string_equal(v, "hello");
  free(v);
  /* Binary values with NULs survive, and a set replaces. */
  uint8_t bin[300];
  for (int i = 0; i < 300; i++) bin[i] = (uint8_t)(i * 7);
  assert_int_equal(gt_store_set(s, "a", bin, sizeof bin), GT_OK);
  assert_int_equal(gt_store_get(s, "a", &v, &len, STORE_MS), GT_OK);
  assert_int_equal(len, sizeof bin);
  assert_memory_equal(v, bin, sizeof bin);
  free(v);
  assert_int_equal(gt_store_set(s, "empty", "", 0), GT_OK);
  assert_int_equal(gt_store_get(s, "empty", &v, &len, STORE_MS), GT_OK);
  assert_int_equal(len, 0);
  free(v);
  assert_int_equal(gt_store_del(s, "a"), GT_OK);
  double t0 = gt_now();
  assert_int_equal(gt_store_get(s, "a", &v, &len, 200), GT_ETIMEDOUT);
  double dt = gt_now() - t0;
  assert_true(dt >= 0.19 && dt < 0.2 + EXPIRY_SLACK_S);
  assert_non_null(strstr(gt_last_error(), "'a'"));
  const char *keys[2] = {"empty", "missing"};
  assert_int_equal(gt_store_wait(s, keys, 2, 100), GT_ETIMEDOUT);
  assert_int_equal(gt_store_wait(s, keys, 1, STORE_MS), GT_OK);
  /* Bad input is an error, not a crash. */
  assert_int_equal(gt_store_set(s, "", "x", 1), GT_EINVAL);
  int64_t sum;
  assert_int_equal(gt_store_set(s, "text", "abc", 3), GT_OK);
  assert_int_equal(gt_store_add(s, "text", 1, &sum), GT_EINVAL);
  assert_int_equal(gt_store_add(s, "n", 5, &sum), GT_OK);
  assert_int_equal(sum, 5);
  assert_int_equal(gt_store_add(s, "n", -7, &sum), GT_OK);
  assert_int_equal(sum, -2);
  gt_store_destroy(s);
}

static int adder(int rank, int n, void *arg) {
  (void)arg;
  gt_store *s = harness_store();
  /* Rank 0 publishes late: the others' gets must wait for it. Not a bound:
   * a get that comes after the set is answered at once all the same. */
  if (rank == 0) {
    usleep(200000);
    CHECK_OK(gt_store_set(s, "late", "v", 1));
  } else {
    void *v;
    size_t len;
    CHECK_OK(gt_store_get(s, "late", &v, &len, STORE_MS));
    CHECK(len == 1 && ((char *)v)[0] == 'v');
    free(v);
  }
  for (int i = 0; i < 100; i++) CHECK_OK(gt_store_add(s, "count", 1, NULL));
  for (int b = 0; b < 3; b++) {
    char name[32];
    snprintf(name, sizeof name, "b%d", b);
    CHECK_OK(gt_store_barrier(s, name, rank, n, STORE_MS));
  }
  int64_t total;
  CHECK_OK(gt_store_add(s, "count", 0, &total));
  CHECK(total == 100 * n);
  gt_store_destroy(s);
  return RANK_OK;
}

static void test_multi_process(void **state) {
  (void)state;
  int codes[4];
  assert_int_equal(harness_run(4, adder, NULL, RUN_S, codes), 0);
}

static void test_strangers_refused(void **state) {
  (void)state;
  gt_store *s = host_store();
  int port = gt_store_tcp_port(s);
  /* Garbage instead of a hello. */
  int fd;
  assert_int_equal(gt_wire_connect("127.0.0.1", port, gt_wire_deadline(WIRE_MS), &fd), GT_OK);
  const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  assert_int_equal(gt_wire_send_all(fd, junk, sizeof junk, gt_wire_deadline(WIRE_MS), NULL), GT_OK);
  /* Refused with a reason, then closed. */
  gt_wire_hdr h;
  char why[512];
  assert_int_equal(gt_wire_recv_frame(fd, GT_MSG_REJECT, &h, why, sizeof why - 1, gt_wire_deadline(WIRE_MS), NULL),
                   GT_OK);
  why[h.len] = 0;
  assert_non_null(strstr(why, "magic"));
  char b[1];
  assert_int_equal(gt_wire_recv_all(fd, b, 1, gt_wire_deadline(WIRE_MS), NULL), GT_ECONN);
  close(fd);
  /* A wrong secret: the client sees the server's proof fail. */
  gt_store_tcp_config bad = {.host = "127.0.0.1", .port = port, .secret = "the-wrong-secret", .timeout_ms = WIRE_MS};
  gt_store *t = NULL;
  assert_int_equal(gt_store_tcp_open(&bad, &t), GT_EAUTH);
  /* And the server refuses a client that cannot prove the secret. */
  assert_int_equal(gt_wire_connect("127.0.0.1", port, gt_wire_deadline(WIRE_MS), &fd), GT_OK);
  assert_int_not_equal(
      gt_wire_auth_client(fd, "the-wrong-secret", "giant-store", GT_WIRE_MAC, 0, gt_wire_deadline(WIRE_MS), NULL),
      GT_OK);
  close(fd);
  /* The store still serves its real clients. */
  assert_int_equal(gt_store_set(s, "k", "ok", 2), GT_OK);
  void *v;
  size_t len;
  assert_int_equal(gt_store_get(s, "k", &v, &len, STORE_MS), GT_OK);
  assert_string_equal(v, "ok");
  free(v);
  /* A short secret is refused before anything is sent (the timeouts below
   * are never reached). */
  gt_store_tcp_config short_secret = {.host = "127.0.0.1", .port = port, .secret = "hunter2", .timeout_ms = 500};
  assert_int_equal(gt_store_tcp_open(&short_secret, &t), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "is 7 bytes: it must be at least 16"));
  setenv("GT_JOB_SECRET", "0123456789abcde", 1);
  gt_store_tcp_config from_env = {.host = "127.0.0.1", .port = port, .timeout_ms = 500};
  assert_int_equal(gt_store_tcp_open(&from_env, &t), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "in GT_JOB_SECRET is 15 bytes"));
  /* No secret anywhere is a clear error. */
  unsetenv("GT_JOB_SECRET");
  gt_store_tcp_config none = {.host = "127.0.0.1", .port = port, .timeout_ms = 500};
  assert_int_equal(gt_store_tcp_open(&none, &t), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "GT_JOB_SECRET"));
  gt_store_destroy(s);
}

static void test_server_gone(void **state) {
  (void)state;
  gt_store *s = host_store();
  gt_store_tcp_config cfg = {
      .host = "127.0.0.1", .port = gt_store_tcp_port(s), .secret = HARNESS_SECRET, .timeout_ms = WIRE_MS};
  gt_store *c = NULL;
  assert_int_equal(gt_store_tcp_open(&cfg, &c), GT_OK);
  gt_store_destroy(s);
  double t0 = gt_now();
  void *v;
  size_t len;
  /* The closed connection is seen at once (milliseconds loaded): 2 s is
   * > 100x, and far below the get's own wait. */
  assert_int_equal(gt_store_get(c, "x", &v, &len, STORE_MS), GT_ECONN);
  assert_true(gt_now() - t0 < 2.0);
  gt_store_destroy(c);
}

/* ---- a flood of strangers ---- */

enum { FLOOD = 2000, CLIENTS = 4 };

static int entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

typedef struct flood {
  int port;
  int fds[FLOOD];
  atomic_int opened, done;
} flood;

/* Connections that never prove the secret: the even ones send garbage
 * (refused at once), the odd ones stay silent (held until evicted or the
 * handshake's 5 s). All stay open until the test closes them. */
static void *flood_main(void *arg) {
  flood *f = arg;
  struct sockaddr_in a = {
      .sin_family = AF_INET, .sin_port = htons((uint16_t)f->port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  for (int i = 0; i < FLOOD; i++) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
      close(fd);
      fd = -1;
    }
    if (fd >= 0 && i % 2 == 0) {
      char junk[64];
      for (int k = 0; k < 64; k++) junk[k] = (char)(i * 31 + k * 7);
      if (send(fd, junk, sizeof junk, MSG_NOSIGNAL) < 0) { /* refused already: fine */
      }
    }
    f->fds[i] = fd;
    atomic_store(&f->opened, i + 1);
  }
  atomic_store(&f->done, 1);
  return NULL;
}

static void test_flood(void **state) {
  (void)state;
  struct rlimit rl;
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_cur < FLOOD + 1024 && rl.rlim_max >= FLOOD + 1024) {
    rl.rlim_cur = FLOOD + 1024;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
  }
  if (rl.rlim_cur < FLOOD + 1024)
    SKIP_CASE("the flood's sockets need %d open files, and the limit is %llu", FLOOD + 1024,
              (unsigned long long)rl.rlim_max);
  gt_store *s = host_store();
  gt_store_tcp_config cfg = {
      .host = "127.0.0.1", .port = gt_store_tcp_port(s), .secret = HARNESS_SECRET, .timeout_ms = STORE_MS};
  gt_store *cl[CLIENTS];
  for (int i = 0; i < CLIENTS; i++) assert_int_equal(gt_store_tcp_open(&cfg, &cl[i]), GT_OK);
  int tasks0 = entries("/proc/self/task"), fds0 = entries("/proc/self/fd");
  flood *f = calloc(1, sizeof *f);
  assert_non_null(f);
  f->port = gt_store_tcp_port(s);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, flood_main, f), 0);
  /* The real clients, meanwhile: every set and get answered, each well
   * within 1 s. That is the requirement; the slowest set+get is a few ms
   * unloaded and 45-60 ms on two loaded cores (optimized build), so with
   * sanitizers' 3x the margin is only about 5x. The flood lasts a few
   * seconds (60 s only bounds a hang). */
  double worst = 0;
  int most_tasks = 0, rounds = 0;
  for (double end = gt_now() + 60; gt_now() < end && (!atomic_load(&f->done) || rounds < 20); rounds++) {
    for (int i = 0; i < CLIENTS; i++) {
      char key[32], val[32];
      snprintf(key, sizeof key, "c%d", i);
      snprintf(val, sizeof val, "%d", rounds);
      double t0 = gt_now();
      assert_int_equal(gt_store_set(cl[i], key, val, strlen(val)), GT_OK);
      void *v;
      size_t len;
      assert_int_equal(gt_store_get(cl[(i + 1) % CLIENTS], key, &v, &len, STORE_MS), GT_OK);
      free(v);
      if (gt_now() - t0 > worst) worst = gt_now() - t0;
    }
    int n = entries("/proc/self/task");
    if (n > most_tasks) most_tasks = n;
  }
  pthread_join(t, NULL);
  print_message(
      "flood of %d strangers: %d opened; real clients' slowest set+get %.1f ms over %d rounds; threads "
      "%d before, at most %d during\n",
      FLOOD, atomic_load(&f->opened), 1e3 * worst, rounds, tasks0, most_tasks);
  assert_int_equal(atomic_load(&f->opened), FLOOD);
  assert_true(worst < 1.0);
  /* Handshakes at most 64 at once, and at most as many evicted ones'
   * threads on their way out (then the server stops accepting until they
   * are gone), plus the flood's own thread: bounded, where a thread per
   * stranger would be 1000 silent ones for 5 s. The 8 more are threads
   * that have left the handshake and not yet exited. */
  assert_true(most_tasks <= tasks0 + 1 + 2 * 64 + 8);
  for (int i = 0; i < FLOOD; i++)
    if (f->fds[i] >= 0) close(f->fds[i]);
  free(f);
  /* Back to what the real clients hold, within a generous bound (the
   * accept thread reaps every 0.2 s; a silent stranger's handshake gives
   * up after 5 s at most, so 5-6 s typically: 30 s is 5x the worst case,
   * polled, so it costs nothing when all goes well). */
  int tasks = 0, fds = 0;
  for (double end = gt_now() + 30; gt_now() < end; usleep(50000)) {
    tasks = entries("/proc/self/task");
    fds = entries("/proc/self/fd");
    if (tasks <= tasks0 && fds <= fds0) break;
  }
  print_message("after: threads %d (before %d), descriptors %d (before %d)\n", tasks, tasks0, fds, fds0);
  assert_true(tasks <= tasks0 && fds <= fds0);
  /* And a new client is served as ever. */
  gt_store *late = NULL;
  assert_int_equal(gt_store_tcp_open(&cfg, &late), GT_OK);
  assert_int_equal(gt_store_set(late, "late", "1", 1), GT_OK);
  gt_store_destroy(late);
  for (int i = 0; i < CLIENTS; i++) gt_store_destroy(cl[i]);
  gt_store_destroy(s);
}

/* No argument: every case but the flood; `flood`: that one. */
int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "flood")) {
    const struct CMUnitTest flood[] = {cmocka_unit_test(test_flood)};
    return gt_test_exit(cmocka_run_group_tests(flood, NULL, NULL));
  }
  if (argc != 1) {
    fprintf(stderr, "usage: %s [flood]\n", argv[0]);
    return 2;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_set_get_del),
      cmocka_unit_test(test_multi_process),
      cmocka_unit_test(test_strangers_refused),
      cmocka_unit_test(test_server_gone),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
