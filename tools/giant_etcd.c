/* giant-etcd: a small etcd v3 command-line client on Giant's etcd library,
 * for inspecting and scripting a job's coordination state. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "giant/engine/coord.h"
#include "giant/engine/etcd.h"
#include "giant/log.h"
#include "resilience/rdzv/rdzv.h"

static const char usage[] =
    "usage: giant-etcd [flags] COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  get KEY [--prefix] [--limit N] [--rev N] [--keys-only]\n"
    "                          print key and value lines; exit 1 if a single key is absent\n"
    "  put KEY VALUE [--lease ID]\n"
    "  del KEY [--prefix]      print the number of keys deleted\n"
    "  watch KEY [--prefix] [--rev N] [--count N]\n"
    "                          print 'PUT|DELETE<TAB>revision<TAB>key<TAB>value' lines until\n"
    "                          N events, SIGINT or SIGTERM\n"
    "  lease grant TTL         print the new lease id (hex)\n"
    "  lease revoke ID\n"
    "  lease ttl ID            print remaining and granted seconds\n"
    "  lease keepalive ID [--for SECONDS]\n"
    "                          renew until SIGINT/SIGTERM or SECONDS; exit 1 if the lease is lost\n"
    "  health JOB              print the job's leader and term, its latest mitigation and its\n"
    "                          ranks' health records as a table\n"
    "\n"
    "flags:\n"
    "  --endpoints LIST        comma-separated host:port or http(s)://host:port\n"
    "                          (default $GIANT_ETCD_ENDPOINTS, else 127.0.0.1:2379)\n"
    "  --cacert FILE           CA certificate (PEM); turns TLS on\n"
    "  --cert FILE, --key FILE client certificate and key (PEM)\n"
    "  --user NAME[:PASSWORD]  authenticate as NAME\n"
    "  --password PASSWORD     password for --user\n"
    "  --timeout MS            deadline of each call in milliseconds (default 5000)\n"
    "  --help                  show this help\n"
    "\n"
    "exit status: 0 success, 1 the operation failed, 2 bad usage\n";

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) {
  (void)sig;
  interrupted = 1;
}

static int bad_usage(const char *fmt, const char *arg) {
  fprintf(stderr, "giant-etcd: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nrun 'giant-etcd --help' for usage\n");
  return 2;
}

static int failed(void) {
  fprintf(stderr, "giant-etcd: %s\n", gt_last_error());
  return 1;
}

/* Parses a decimal (base 10) or lease id (base 16) integer. */
static int parse_i64(const char *s, int base, int64_t *out) {
  if (!s || !*s) return -1;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, base);
  if (errno || *end) return -1;
  *out = v;
  return 0;
}

typedef struct opts {
  int prefix, keys_only;
  int64_t limit, rev, lease, count, for_s;
} opts;

static void print_bytes(const void *p, size_t n) { fwrite(p, 1, n, stdout); }

static int cmd_get(gt_etcd_client *c, char **args, int n, const opts *o) {
  if (n != 1) return bad_usage("get takes one KEY%s", "");
  gt_etcd_get_opts g = {.prefix = o->prefix, .limit = o->limit, .revision = o->rev, .keys_only = o->keys_only};
  gt_etcd_kvs r;
  if (gt_etcd_get(c, args[0], &g, &r) != GT_OK) return failed();
  for (size_t i = 0; i < r.n; i++) {
    print_bytes(r.kvs[i].key, r.kvs[i].key_len);
    putchar('\n');
    if (!o->keys_only) {
      print_bytes(r.kvs[i].value, r.kvs[i].value_len);
      putchar('\n');
    }
  }
  int missing = r.n == 0 && !o->prefix;
  gt_etcd_kvs_free(&r);
  if (missing) {
    fprintf(stderr, "giant-etcd: key '%s' not found\n", args[0]);
    return 1;
  }
  return 0;
}

static int cmd_put(gt_etcd_client *c, char **args, int n, const opts *o) {
  if (n != 2) return bad_usage("put takes KEY and VALUE%s", "");
  if (gt_etcd_put(c, args[0], args[1], strlen(args[1]), o->lease, NULL, NULL) != GT_OK) return failed();
  return 0;
}

static int cmd_del(gt_etcd_client *c, char **args, int n, const opts *o) {
  if (n != 1) return bad_usage("del takes one KEY%s", "");
  int64_t deleted = 0;
  if (gt_etcd_del(c, args[0], o->prefix, &deleted) != GT_OK) return failed();
  printf("%" PRId64 "\n", deleted);
  return 0;
}

static int cmd_watch(gt_etcd_client *c, char **args, int n, const opts *o) {
  if (n != 1) return bad_usage("watch takes one KEY%s", "");
  gt_etcd_watch_opts wo = {.prefix = o->prefix, .start_revision = o->rev};
  gt_etcd_watch *w;
  if (gt_etcd_watch_start(c, args[0], &wo, NULL, NULL, &w) != GT_OK) return failed();
  int rc = 0;
  for (int64_t seen = 0; !interrupted && (o->count <= 0 || seen < o->count);) {
    gt_etcd_event ev;
    gt_status st = gt_etcd_watch_next(w, &ev, 200);
    if (st == GT_ETIMEDOUT) continue;
    if (st != GT_OK) {
      rc = failed();
      break;
    }
    if (ev.type == GT_ETCD_EVENT_PUT || ev.type == GT_ETCD_EVENT_DELETE) {
      printf("%s\t%" PRId64 "\t", ev.type == GT_ETCD_EVENT_PUT ? "PUT" : "DELETE", ev.revision);
      print_bytes(ev.kv.key, ev.kv.key_len);
      putchar('\t');
      if (ev.type == GT_ETCD_EVENT_PUT) print_bytes(ev.kv.value, ev.kv.value_len);
      putchar('\n');
      fflush(stdout);
      seen++;
      gt_etcd_event_free(&ev);
      continue;
    }
    gt_etcd_event_free(&ev);
    gt_etcd_watch_status(w);
    rc = failed();
    break;
  }
  gt_etcd_watch_cancel(w);
  return rc;
}

/* The job's leader, its latest mitigation and the health table
 * (giant/engine/coord.h). */
static int cmd_health(gt_etcd_client *c, char **args, int n) {
  if (n != 1) return bad_usage("health takes one JOB id%s", "");
  if (!gt_rdzv_valid_id(args[0])) return bad_usage("'%s' is not a job id ([A-Za-z0-9._-])", args[0]);
  char key[GT_RDZV_ID_MAX + 32];
  snprintf(key, sizeof key, "/giant/%s/leader", args[0]);
  gt_etcd_kvs r;
  if (gt_etcd_get(c, key, NULL, &r) != GT_OK) return failed();
  if (r.n)
    printf("leader: %s (term %lld)\n", (const char *)r.kvs[0].value, (long long)r.kvs[0].create_revision);
  else
    printf("leader: none\n");
  gt_etcd_kvs_free(&r);
  gt_mitigation *m = malloc(sizeof *m);
  int found = 0;
  if (!m) {
    fprintf(stderr, "giant-etcd: out of memory\n");
    return 1;
  }
  gt_status ms = gt_mitigation_get(c, args[0], m, &found);
  if (ms == GT_OK && found)
    gt_mitigation_print(m, stdout);
  else if (ms == GT_OK)
    printf("mitigation: none\n");
  free(m);
  if (ms != GT_OK) return failed();
  enum { MAX_RANKS = 65536 };
  gt_health_record *recs = malloc(MAX_RANKS * sizeof *recs);
  int nrec = 0;
  if (!recs) {
    fprintf(stderr, "giant-etcd: out of memory\n");
    return 1;
  }
  gt_status st = gt_health_list(c, args[0], recs, MAX_RANKS, &nrec);
  if (st == GT_OK) gt_health_print(recs, nrec, stdout);
  free(recs);
  return st == GT_OK ? 0 : failed();
}

static int cmd_lease(gt_etcd_client *c, char **args, int n, const opts *o) {
  if (n < 1) return bad_usage("lease needs grant, revoke, ttl or keepalive%s", "");
  const char *sub = args[0];
  if (n != 2) return bad_usage("lease %s takes one argument", sub);
  int64_t v;
  if (strcmp(sub, "grant") == 0) {
    if (parse_i64(args[1], 10, &v) != 0 || v <= 0)
      return bad_usage("lease grant: TTL must be a positive number of seconds, got '%s'", args[1]);
    int64_t id;
    if (gt_etcd_lease_grant(c, v, &id) != GT_OK) return failed();
    printf("%" PRIx64 "\n", (uint64_t)id);
    return 0;
  }
  if (parse_i64(args[1], 16, &v) != 0) return bad_usage("lease id must be hexadecimal, got '%s'", args[1]);
  if (strcmp(sub, "revoke") == 0) return gt_etcd_lease_revoke(c, v) == GT_OK ? 0 : failed();
  if (strcmp(sub, "ttl") == 0) {
    int64_t ttl, granted;
    if (gt_etcd_lease_ttl(c, v, &ttl, &granted) != GT_OK) return failed();
    printf("%" PRId64 " %" PRId64 "\n", ttl, granted);
    return 0;
  }
  if (strcmp(sub, "keepalive") == 0) {
    gt_etcd_keepalive *ka;
    if (gt_etcd_keepalive_start(c, v, NULL, NULL, &ka) != GT_OK) return failed();
    double t0 = gt_now();
    while (!interrupted && !gt_etcd_keepalive_lost(ka) && (o->for_s <= 0 || gt_now() - t0 < (double)o->for_s)) {
      struct timespec ts = {0, 50000000};
      nanosleep(&ts, NULL);
    }
    int lost = gt_etcd_keepalive_lost(ka);
    gt_etcd_keepalive_stop(ka);
    if (lost) {
      fprintf(stderr, "giant-etcd: lease %s was lost\n", args[1]);
      return 1;
    }
    return 0;
  }
  return bad_usage("unknown lease command '%s' (grant, revoke, ttl, keepalive)", sub);
}

int main(int argc, char **argv) {
  enum {
    O_ENDPOINTS = 256,
    O_CACERT,
    O_CERT,
    O_KEY,
    O_USER,
    O_PASSWORD,
    O_TIMEOUT,
    O_PREFIX,
    O_LIMIT,
    O_REV,
    O_KEYS_ONLY,
    O_LEASE,
    O_COUNT,
    O_FOR,
    O_HELP
  };
  static const struct option longopts[] = {{"endpoints", required_argument, 0, O_ENDPOINTS},
                                           {"cacert", required_argument, 0, O_CACERT},
                                           {"cert", required_argument, 0, O_CERT},
                                           {"key", required_argument, 0, O_KEY},
                                           {"user", required_argument, 0, O_USER},
                                           {"password", required_argument, 0, O_PASSWORD},
                                           {"timeout", required_argument, 0, O_TIMEOUT},
                                           {"prefix", no_argument, 0, O_PREFIX},
                                           {"limit", required_argument, 0, O_LIMIT},
                                           {"rev", required_argument, 0, O_REV},
                                           {"keys-only", no_argument, 0, O_KEYS_ONLY},
                                           {"lease", required_argument, 0, O_LEASE},
                                           {"count", required_argument, 0, O_COUNT},
                                           {"for", required_argument, 0, O_FOR},
                                           {"help", no_argument, 0, O_HELP},
                                           {0, 0, 0, 0}};
  gt_etcd_config cfg = {0};
  cfg.endpoints = getenv("GIANT_ETCD_ENDPOINTS");
  if (!cfg.endpoints || !*cfg.endpoints) cfg.endpoints = "127.0.0.1:2379";
  opts o = {0};
  char *user = NULL;
  int64_t v;
  opterr = 0;
  int ch;
  while ((ch = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
    /* GNU getopt permutes: flags may come before or after the command. */
    switch (ch) {
      case O_ENDPOINTS: cfg.endpoints = optarg; break;
      case O_CACERT: cfg.cacert = optarg; break;
      case O_CERT: cfg.cert = optarg; break;
      case O_KEY: cfg.key = optarg; break;
      case O_USER: user = optarg; break;
      case O_PASSWORD: cfg.password = optarg; break;
      case O_TIMEOUT:
        if (parse_i64(optarg, 10, &v) != 0 || v <= 0 || v > 3600000)
          return bad_usage("--timeout must be milliseconds from 1 to 3600000, got '%s'", optarg);
        cfg.timeout_ms = (int)v;
        break;
      case O_PREFIX: o.prefix = 1; break;
      case O_KEYS_ONLY: o.keys_only = 1; break;
      case O_LIMIT:
        if (parse_i64(optarg, 10, &o.limit) != 0 || o.limit < 0)
          return bad_usage("--limit must be a non-negative integer, got '%s'", optarg);
        break;
      case O_REV:
        if (parse_i64(optarg, 10, &o.rev) != 0 || o.rev < 0)
          return bad_usage("--rev must be a non-negative revision, got '%s'", optarg);
        break;
      case O_LEASE:
        if (parse_i64(optarg, 16, &o.lease) != 0)
          return bad_usage("--lease must be a hexadecimal lease id, got '%s'", optarg);
        break;
      case O_COUNT:
        if (parse_i64(optarg, 10, &o.count) != 0 || o.count <= 0)
          return bad_usage("--count must be a positive integer, got '%s'", optarg);
        break;
      case O_FOR:
        if (parse_i64(optarg, 10, &o.for_s) != 0 || o.for_s <= 0)
          return bad_usage("--for must be a positive number of seconds, got '%s'", optarg);
        break;
      case O_HELP:
      case 'h': fputs(usage, stdout); return 0;
      case ':': return bad_usage("flag '%s' needs a value", argv[optind - 1]);
      default: return bad_usage("unknown flag '%s'", argv[optind - 1]);
    }
  }
  char **words = argv + optind;
  int nw = argc - optind;
  if (nw == 0) return bad_usage("no command given%s", "");

  if (user) {
    char *colon = strchr(user, ':');
    if (colon) {
      *colon = 0;
      if (!cfg.password) cfg.password = colon + 1;
    }
    cfg.user = user;
    if (!cfg.password) return bad_usage("--user %s needs --password (or NAME:PASSWORD)", user);
  }
  const char *cmd = words[0];
  if (strcmp(cmd, "get") && strcmp(cmd, "put") && strcmp(cmd, "del") && strcmp(cmd, "watch") && strcmp(cmd, "lease") &&
      strcmp(cmd, "health"))
    return bad_usage("unknown command '%s' (get, put, del, watch, lease, health)", cmd);

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  gt_etcd_client *c;
  gt_status st = gt_etcd_connect(&cfg, &c);
  if (st != GT_OK) {
    fprintf(stderr, "giant-etcd: %s\n", gt_last_error());
    return st == GT_EINVAL ? 2 : 1; /* bad flags vs. a server that failed */
  }
  int rc;
  if (strcmp(cmd, "get") == 0)
    rc = cmd_get(c, words + 1, nw - 1, &o);
  else if (strcmp(cmd, "put") == 0)
    rc = cmd_put(c, words + 1, nw - 1, &o);
  else if (strcmp(cmd, "del") == 0)
    rc = cmd_del(c, words + 1, nw - 1, &o);
  else if (strcmp(cmd, "watch") == 0)
    rc = cmd_watch(c, words + 1, nw - 1, &o);
  else if (strcmp(cmd, "health") == 0)
    rc = cmd_health(c, words + 1, nw - 1);
  else
    rc = cmd_lease(c, words + 1, nw - 1, &o);
  gt_etcd_close(c);
  return rc;
}
