/* bench_etcd: latency of put, get and txn (median, p99) and watch event
 * throughput of Giant's etcd client, against an etcd it starts on
 * loopback (or --endpoints). The baselines measured in the same run: a
 * serializable get, which the server answers without consensus, so it is
 * the client's round trip; and the writers' commit rate, which a watch
 * must keep up with. The last line is key=value pairs for scripts. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_stats.h"
#include "localkit/etcd_server.h"
#include "giant/engine/etcd.h"
#include "giant/log.h"

static double pct(double *v, int n, double p) {
  bench_sort(v, n);
  int i = (int)(p * (n - 1) + 0.5);
  return v[i];
}

static void die(const char *what) {
  fprintf(stderr, "bench_etcd: %s: %s\n", what, gt_last_error());
  exit(1);
}

typedef struct lat {
  double p50_us, p99_us;
} lat;

static lat summarize(const char *name, double *t, int n) {
  lat l = {pct(t, n, 0.5) * 1e6, pct(t, n, 0.99) * 1e6};
  printf("%-18s median %8.1f us   p99 %8.1f us   (%d ops)\n", name, l.p50_us, l.p99_us, n);
  return l;
}

typedef struct watch_count {
  atomic_int n;
  _Atomic double last_at;
} watch_count;

static void on_event(void *arg, const gt_etcd_event *ev) {
  watch_count *w = arg;
  (void)ev;
  atomic_store(&w->last_at, gt_now());
  atomic_fetch_add(&w->n, 1);
}

typedef struct writer {
  gt_etcd_client *c;
  int id, n;
  const char *val;
  size_t len;
  gt_status st;
} writer;

static void *write_main(void *arg) {
  writer *w = arg;
  char key[64];
  for (int i = 0; i < w->n && w->st == GT_OK; i++) {
    snprintf(key, sizeof key, "bench/w/%d/%d", w->id, i);
    w->st = gt_etcd_put(w->c, key, w->val, w->len, 0, NULL, NULL);
  }
  return NULL;
}

int main(int argc, char **argv) {
  const char *endpoints = NULL;
  int n = 1000, nevents = 4000, writers = 4, vsize = 64;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--endpoints") && i + 1 < argc)
      endpoints = argv[++i];
    else if (!strcmp(argv[i], "--ops") && i + 1 < argc)
      n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--events") && i + 1 < argc)
      nevents = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--writers") && i + 1 < argc)
      writers = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--value-size") && i + 1 < argc)
      vsize = atoi(argv[++i]);
    else {
      fprintf(stderr,
              "usage: bench_etcd [--endpoints LIST] [--ops N] [--events N] [--writers N] "
              "[--value-size BYTES]\n");
      return 2;
    }
  }
  if (n < 10 || nevents < writers || writers < 1 || writers > 64 || vsize < 1 || vsize > 1 << 20) {
    fprintf(stderr,
            "bench_etcd: need --ops >= 10, 1 <= --writers <= 64, --events >= --writers, "
            "1 <= --value-size <= 1 MiB\n");
    return 2;
  }
  etcd_fixture fx;
  int own = !endpoints;
  if (own) {
    if (etcd_fixture_start(&fx, NULL) != 0) {
      fprintf(stderr, "bench_etcd: cannot start etcd (is etcd on PATH?); or pass --endpoints\n");
      return 1;
    }
    endpoints = fx.endpoint;
  }
  printf(
      "bench_etcd: endpoints %s (%s), %d ops per latency, value %d bytes, watch %d events "
      "from %d writers\n",
      endpoints, own ? "local etcd started by the bench, data dir in /tmp" : "given", n, vsize, nevents, writers);
  gt_etcd_config cfg = {.endpoints = endpoints, .timeout_ms = 10000};
  gt_etcd_client *c;
  if (gt_etcd_connect(&cfg, &c) != GT_OK) die("connect");
  char *val = malloc((size_t)vsize);
  memset(val, 'x', (size_t)vsize);
  double *t = malloc(sizeof *t * (size_t)n);
  char key[64];

  /* Warm the connection. */
  for (int i = 0; i < 20; i++)
    if (gt_etcd_put(c, "bench/warm", val, (size_t)vsize, 0, NULL, NULL) != GT_OK) die("put");

  for (int i = 0; i < n; i++) {
    snprintf(key, sizeof key, "bench/k/%d", i % 100);
    double t0 = gt_now();
    if (gt_etcd_put(c, key, val, (size_t)vsize, 0, NULL, NULL) != GT_OK) die("put");
    t[i] = gt_now() - t0;
  }
  lat put = summarize("put", t, n);

  for (int i = 0; i < n; i++) {
    snprintf(key, sizeof key, "bench/k/%d", i % 100);
    gt_etcd_kvs r;
    double t0 = gt_now();
    if (gt_etcd_get(c, key, NULL, &r) != GT_OK) die("get");
    t[i] = gt_now() - t0;
    gt_etcd_kvs_free(&r);
  }
  lat get = summarize("get", t, n);

  /* Compare-and-swap on one key: compare its mod revision, then put. */
  int64_t mod = 0;
  void *v;
  size_t len;
  if (gt_etcd_get_value(c, "bench/k/0", &v, &len, &mod) != GT_OK) die("get");
  free(v);
  for (int i = 0; i < n; i++) {
    gt_etcd_cmp cmp = {.key = "bench/k/0", .target = GT_ETCD_CMP_MOD_REVISION, .op = GT_ETCD_EQUAL, .number = mod};
    gt_etcd_op op = {.type = GT_ETCD_OP_PUT, .key = "bench/k/0", .value = val, .value_len = (size_t)vsize};
    gt_etcd_txn_result r;
    double t0 = gt_now();
    if (gt_etcd_txn(c, &cmp, 1, &op, 1, NULL, 0, &r) != GT_OK) die("txn");
    t[i] = gt_now() - t0;
    if (!r.succeeded) {
      fprintf(stderr, "bench_etcd: txn compare failed unexpectedly\n");
      return 1;
    }
    mod = r.revision;
    gt_etcd_txn_result_free(&r);
  }
  lat txn = summarize("txn (cas)", t, n);

  /* Baseline: the round trip alone, as a serializable get of an absent
   * key, which the member answers from memory without consensus. */
  gt_etcd_get_opts lim = {.serializable = 1};
  for (int i = 0; i < n; i++) {
    gt_etcd_kvs r;
    double t0 = gt_now();
    if (gt_etcd_get(c, "bench/none", &lim, &r) != GT_OK) die("get");
    t[i] = gt_now() - t0;
    gt_etcd_kvs_free(&r);
  }
  lat rtt = summarize("rtt (serial. get)", t, n);

  /* Watch throughput: writers put as fast as etcd commits; one watch on
   * the prefix counts events. */
  watch_count wc;
  atomic_init(&wc.n, 0);
  atomic_init(&wc.last_at, 0.0);
  gt_etcd_watch *w;
  if (gt_etcd_watch_start(c, "bench/w/", &(gt_etcd_watch_opts){.prefix = 1}, on_event, &wc, &w) != GT_OK) die("watch");
  gt_etcd_kvs before;
  if (gt_etcd_get(c, "bench/none", NULL, &before) != GT_OK) die("get");
  int64_t first_rev = before.revision + 1;
  gt_etcd_kvs_free(&before);
  writer wr[64];
  pthread_t th[64];
  double t0 = gt_now();
  for (int i = 0; i < writers; i++) {
    wr[i] = (writer){.c = c, .id = i, .n = nevents / writers, .val = val, .len = (size_t)vsize};
    pthread_create(&th[i], NULL, write_main, &wr[i]);
  }
  for (int i = 0; i < writers; i++) pthread_join(th[i], NULL);
  double t_written = gt_now();
  for (int i = 0; i < writers; i++)
    if (wr[i].st != GT_OK) die("writer put");
  int total = (nevents / writers) * writers;
  while (atomic_load(&wc.n) < total && gt_now() - t_written < 30) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  int got = atomic_load(&wc.n);
  double t_last = atomic_load(&wc.last_at);
  gt_etcd_watch_cancel(w);
  /* Replay: the same events read back from history, as fast as the
   * server sends and the client decodes them. */
  watch_count rc;
  atomic_init(&rc.n, 0);
  atomic_init(&rc.last_at, 0.0);
  double r0 = gt_now();
  if (gt_etcd_watch_start(c, "bench/w/", &(gt_etcd_watch_opts){.prefix = 1, .start_revision = first_rev}, on_event, &rc,
                          &w) != GT_OK)
    die("watch");
  while (atomic_load(&rc.n) < total && gt_now() - r0 < 30) {
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
  int replayed = atomic_load(&rc.n);
  double replay_rate = replayed / (atomic_load(&rc.last_at) - r0);
  gt_etcd_watch_cancel(w);
  double commit_rate = total / (t_written - t0);
  double watch_rate = got / (t_last - t0);
  printf(
      "%-18s %8.0f events/s (%d of %d events; writers committed %.0f puts/s; last event "
      "%.1f ms after the last put returned)\n",
      "watch", watch_rate, got, total, commit_rate, (t_last - t_written) * 1e3);
  printf("%-18s %8.0f events/s (%d of %d events read back from history)\n", "watch replay", replay_rate, replayed,
         total);
  printf("ratios: put/rtt %.2f, get/rtt %.2f, txn/rtt %.2f, watch/commit %.3f\n", put.p50_us / rtt.p50_us,
         get.p50_us / rtt.p50_us, txn.p50_us / rtt.p50_us, watch_rate / commit_rate);
  printf(
      "put_p50_us=%.1f put_p99_us=%.1f get_p50_us=%.1f get_p99_us=%.1f txn_p50_us=%.1f "
      "txn_p99_us=%.1f rtt_p50_us=%.1f watch_events_per_s=%.0f commit_per_s=%.0f "
      "watch_vs_commit=%.3f replay_events_per_s=%.0f events=%d/%d\n",
      put.p50_us, put.p99_us, get.p50_us, get.p99_us, txn.p50_us, txn.p99_us, rtt.p50_us, watch_rate, commit_rate,
      watch_rate / commit_rate, replay_rate, got, total);
  free(t);
  free(val);
  gt_etcd_close(c);
  if (own) etcd_fixture_destroy(&fx);
  return got == total && replayed == total ? 0 : 1;
}
