/* giantrun's flags: torchrun's names where a torchrun user would look. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/ports.h"
#include "giant/engine/etcd.h"
#include "giant/options.h"
#include "giant/protocol.h"
#include "launch/agent.h"
#include "giant/engine/init.h"
#include "resilience/rdzv/rdzv.h"

static const char usage[] =
    "usage: giantrun [options] PROGRAM [ARGS...]\n"
    "\n"
    "Runs PROGRAM as --nproc-per-node workers on this node, as one node of a job\n"
    "whose nodes meet on etcd. Workers read their ranks with gt_init().\n"
    "\n"
    "  --nnodes MIN[:MAX]         nodes in the job (default 1); between MIN and MAX\n"
    "                             the round waits --rdzv-settle for more\n"
    "  --nproc-per-node N         workers on this node (default 1)\n"
    "  --rdzv-endpoint H:P[,H:P]  etcd endpoints (https://H:P for TLS)\n"
    "  --rdzv-backend etcd        the only backend\n"
    "  --job-id ID, --rdzv-id ID  names the job in etcd (default 'default')\n"
    "  --node-id ID               names this node (default <hostname>-<pid>)\n"
    "  --max-restarts K           failures the job survives (default 0)\n"
    "  --restart-window S         count only the failures of the last S seconds\n"
    "                             against --max-restarts (default 0: all of them)\n"
    "  --hang-timeout S           a worker whose step (gt_job_step) does not advance\n"
    "                             for S seconds has failed (default 0: 3x its longest\n"
    "                             step, at least 30)\n"
    "  --standalone               one node, with a private etcd on loopback that speaks TLS\n"
    "                             and takes only certificates giantrun makes at start\n"
    "  --reshape                  when a worker dies, the others go on in-process\n"
    "                             without it (GT_RESHAPE=1; every program on Giant's run\n"
    "                             API): a worker exiting 75 or dying before the first\n"
    "                             step, or a hang, restarts them all; exit 2 or 65 (bad\n"
    "                             flags or input) ends the job\n"
    "  --log-dir DIR              also write DIR/<job>/gen<N>/rank<R>.log\n"
    "  --plan LAYOUT              the parallel layout, given to workers as GT_PLAN\n"
    "  --ckpt-dir DIR             checkpoint directory, given to workers as GT_CKPT_DIR\n"
    "  --ckpt-every N             save every N steps (GT_CKPT_EVERY)\n"
    "  --ckpt-keep K              keep the newest K checkpoints (GT_CKPT_KEEP)\n"
    "  --rdzv-cacert PEM          CA that signed etcd's certificate\n"
    "  --rdzv-cert PEM            client certificate for etcd\n"
    "  --rdzv-key PEM             its key\n"
    "  --rdzv-user NAME           authenticate to etcd as this user (etcd RBAC)\n"
    "  --rdzv-password-file FILE  its password, the file's one line (mode 0600; workers\n"
    "                             are given the path, GT_STORE_PASSWORD_FILE, not the password)\n"
    "  --comm-ports A-B           every port the job listens on is one of A..B, say a\n"
    "                             firewall's range: the workers' groups while they form\n"
    "                             (GT_COMM_PORTS), the --standalone etcd; at least one port\n"
    "                             per worker, two more with --standalone (docs/launching.md)\n"
    "  --comm-integrity MODE      headers (default): every TCP frame's header is authenticated;\n"
    "                             mac: every payload too (GT_COMM_INTEGRITY; docs/security.md)\n"
    "  --comm-encrypt             encrypt every TCP payload between ranks with AES-256-GCM\n"
    "                             (GT_COMM_ENCRYPT=1; shared memory within a host stays plain)\n"
    "  --comm-host ADDR           the address this node's workers listen on and advertise to\n"
    "                             their peers (given to them as GT_COMM_HOST); by default the\n"
    "                             local address of this node's route to etcd (127.0.0.1 for\n"
    "                             an etcd on loopback)\n"
    "  --comm-iface NAME          the IPv4 address of interface NAME (eth0, ib0) instead.\n"
    "                             The first given wins: --comm-host, --comm-iface,\n"
    "                             $GT_COMM_HOST, the route to etcd\n"
    "  --rdzv-ttl S               lease TTL: a node silent S seconds is out (default 10)\n"
    "  --rdzv-settle S            wait for more than MIN nodes (default 5)\n"
    "  --rdzv-timeout S           give up a rendezvous after S seconds (default 600)\n"
    "  --monitor-interval S       how often workers and etcd are checked (default 0.1)\n"
    "  --stop-grace S             SIGTERM to SIGKILL when stopping workers (default 5)\n"
    "  --status                   print the state of job --job-id from etcd (--rdzv-endpoint) and exit:\n"
    "                             generation, layout, each rank's step and step time, fail-slow\n"
    "                             verdicts, the mitigation, the newest checkpoint, the ETA\n"
    "  --watch                    with --status: print it again every second, in place\n"
    "  --help, --version\n"
    "Inside a Slurm allocation (one giantrun per node: srun --ntasks-per-node=1 giantrun ...)\n"
    "--nnodes, --node-id, --job-id and --nproc-per-node default to Slurm's (GT_NPROC_PER_NODE,\n"
    "else the node's GPUs, else 1), and without --rdzv-endpoint the first node runs the\n"
    "job's etcd (docs/launching.md).\n"
    "torchrun's spellings with underscores (--nproc_per_node ...) work too.\n"
    "\n"
    "Workers get GT_RANK, GT_LOCAL_RANK, GT_WORLD_SIZE, GT_LOCAL_WORLD_SIZE,\n"
    "GT_NODE_RANK, GT_NNODES, GT_GENERATION, GT_RESTART_COUNT, GT_JOB_ID, GT_STORE\n"
    "(etcd://ENDPOINTS/giant/<job>/gen<N>/store/, etcds:// for https endpoints),\n"
    "GT_STORE_CACERT/CERT/KEY, GT_COMM_HOST, GT_NODE_ID,\n"
    "GT_JOB_SECRET, GT_PLAN and, with --ckpt-*, GT_CKPT_DIR, GT_CKPT_EVERY, GT_CKPT_KEEP.\n"
    "Restarts wait 1 s, doubling to 30 s, with jitter. A worker exiting 2, 126\n"
    "or 127 (bad usage, cannot execute, not found) ends the job at once.\n"
    "Exit status: 0 the job succeeded, 1 it failed, 2 bad usage, 128+N on signal N.\n";

static int usage_error(const char *fmt, const char *a) {
  fprintf(stderr, "giantrun: ");
  fprintf(stderr, fmt, a);
  fprintf(stderr, "\n(run giantrun --help for the list of flags)\n");
  return 2;
}

static int parse_nnodes(agent_opts *o) {
  const char *s = o->nnodes;
  char *end;
  long lo = strtol(s, &end, 10), hi = lo;
  if (end == s) return usage_error("--nnodes wants MIN or MIN:MAX, got '%s'", s);
  if (*end == ':') {
    const char *h = end + 1;
    hi = strtol(h, &end, 10);
    if (end == h) return usage_error("--nnodes wants MIN or MIN:MAX, got '%s'", s);
  }
  if (*end) return usage_error("--nnodes wants MIN or MIN:MAX, got '%s'", s);
  if (lo < 1 || hi > GT_RDZV_MAX_NODES) return usage_error("--nnodes '%s': node counts must be in 1..1024", s);
  if (lo > hi) return usage_error("--nnodes '%s': MIN is greater than MAX", s);
  o->min_nodes = (int)lo;
  o->max_nodes = (int)hi;
  return -1;
}

/* --comm-ports (or GT_COMM_PORTS as giantrun found it): a range every
 * listener of this node fits in at once. A worker holds one listener at a
 * time: a group's mesh listens while the group forms and closes it once
 * its peers are in (comm/tcp.c), and a worker forms its groups one after
 * another, at start and again at a reshape. The standalone etcd holds two
 * (clients, peers) for the job's life. So the node needs nproc ports, two
 * more with --standalone, however many groups the plan makes; less is
 * refused here. Ports other programs hold can still run a worker out at
 * run time, which fails naming the range. */
static int parse_ports(agent_opts *o) {
  const char *what = "--comm-ports";
  if (!o->comm_ports && getenv(GT_ENV_COMM_PORTS) && *getenv(GT_ENV_COMM_PORTS)) {
    o->comm_ports = getenv(GT_ENV_COMM_PORTS); /* the workers get it as they would have */
    what = GT_ENV_COMM_PORTS;
  }
  if (!o->comm_ports) return -1;
  if (gt_ports_parse(o->comm_ports, what, &o->ports) != GT_OK) return usage_error("%s", gt_last_error());
  int have = gt_ports_count(&o->ports), need = o->nproc + (o->standalone ? 2 : 0);
  if (have >= need) return -1;
  char msg[512];
  snprintf(msg, sizeof msg,
           "%s %s holds %d port%s, but this node needs at least %d: one for each of its %d worker%s "
           "(--nproc-per-node), which listens while it forms its groups%s; widen the range",
           what, o->comm_ports, have, have == 1 ? "" : "s", need, o->nproc, o->nproc == 1 ? "" : "s",
           o->standalone ? ", and 2 for the --standalone etcd" : "");
  return usage_error("%s", msg);
}

/* The program as execve will run it: a path with a slash, or found on PATH. */
static int resolve_program(agent_opts *o) {
  const char *p = o->prog_argv[0];
  if (strchr(p, '/')) {
    if (access(p, X_OK) != 0) return usage_error("cannot run '%s': no such executable file", p);
    snprintf(o->prog_path, sizeof o->prog_path, "%s", p);
    return -1;
  }
  const char *path = getenv("PATH");
  for (const char *d = path ? path : ""; *d;) {
    const char *colon = strchr(d, ':');
    size_t n = colon ? (size_t)(colon - d) : strlen(d);
    snprintf(o->prog_path, sizeof o->prog_path, "%.*s/%s", (int)n, n ? d : ".", p);
    if (access(o->prog_path, X_OK) == 0) return -1;
    d = colon ? colon + 1 : d + n;
  }
  return usage_error("cannot run '%s': not found on PATH", p);
}

/* --status: the job and its etcd, and nothing to run. */
static int status_opts(agent_opts *o, const char *program) {
  if (program) return usage_error("--status runs nothing: drop '%s' and what follows it", program);
  if (!o->endpoint) return usage_error("--status reads the job from etcd: give --rdzv-endpoint HOST:PORT%s", "");
  if (o->standalone) return usage_error("--status cannot reach a --standalone job's private etcd%s", "");
  if (!o->job_id) o->job_id = "default";
  if (!gt_rdzv_valid_id(o->job_id))
    return usage_error("--job-id '%s': use 1 to 100 of the characters A-Z a-z 0-9 . _ -", o->job_id);
  if ((o->cert == NULL) != (o->key == NULL))
    return usage_error("TLS: give both --rdzv-cert and --rdzv-key, or neither%s", "");
  if ((o->user == NULL) != (o->password_file == NULL))
    return usage_error("etcd authentication: give both --rdzv-user and --rdzv-password-file, or neither%s", "");
  if (o->password_file && gt_etcd_read_password(o->password_file, o->password, sizeof o->password) != GT_OK)
    return usage_error("%s", gt_last_error());
  return -1;
}

int agent_parse(int argc, char **argv, agent_opts *o) {
  memset(o, 0, sizeof *o); /* nnodes, job_id NULL and nproc 0 until given: Slurm may fill them */
  o->backend = "etcd";
  o->ttl_s = 10;
  o->rdzv_timeout_s = 600;
  o->settle_s = 5;
  o->stop_grace_s = 5;
  o->monitor_s = 0.1f;
  gt_opt_spec specs[] = {
      {"--nnodes", GT_OPT_STR, &o->nnodes, 0, 0},
      {"--nproc-per-node", GT_OPT_INT, &o->nproc, 1, 4096},
      {"--nproc_per_node", GT_OPT_INT, &o->nproc, 1, 4096},
      {"--rdzv-endpoint", GT_OPT_STR, &o->endpoint, 0, 0},
      {"--rdzv_endpoint", GT_OPT_STR, &o->endpoint, 0, 0},
      {"--rdzv-backend", GT_OPT_STR, &o->backend, 0, 0},
      {"--rdzv_backend", GT_OPT_STR, &o->backend, 0, 0},
      {"--rdzv_id", GT_OPT_STR, &o->job_id, 0, 0},
      {"--monitor_interval", GT_OPT_FLOAT, &o->monitor_s, 0.01, 60},
      {"--job-id", GT_OPT_STR, &o->job_id, 0, 0},
      {"--rdzv-id", GT_OPT_STR, &o->job_id, 0, 0},
      {"--node-id", GT_OPT_STR, &o->node_id, 0, 0},
      {"--max-restarts", GT_OPT_INT, &o->max_restarts, 0, 1000000},
      {"--max_restarts", GT_OPT_INT, &o->max_restarts, 0, 1000000},
      {"--restart-window", GT_OPT_INT, &o->restart_window_s, 0, 100000000},
      {"--hang-timeout", GT_OPT_FLOAT, &o->hang_timeout_s, 0, 1000000},
      {"--standalone", GT_OPT_FLAG, &o->standalone, 0, 0},
      {"--reshape", GT_OPT_FLAG, &o->reshape, 0, 0},
      {"--log-dir", GT_OPT_STR, &o->log_dir, 0, 0},
      {"--log_dir", GT_OPT_STR, &o->log_dir, 0, 0},
      {"--plan", GT_OPT_STR, &o->plan, 0, 0},
      {"--ckpt-dir", GT_OPT_STR, &o->ckpt_dir, 0, 0},
      {"--ckpt-every", GT_OPT_INT, &o->ckpt_every, 1, 1000000000},
      {"--ckpt-keep", GT_OPT_INT, &o->ckpt_keep, 1, 1000000},
      {"--rdzv-cacert", GT_OPT_STR, &o->cacert, 0, 0},
      {"--rdzv-cert", GT_OPT_STR, &o->cert, 0, 0},
      {"--rdzv-key", GT_OPT_STR, &o->key, 0, 0},
      {"--rdzv-user", GT_OPT_STR, &o->user, 0, 0},
      {"--comm-integrity", GT_OPT_STR, &o->comm_integrity, 0, 0},
      {"--comm-encrypt", GT_OPT_FLAG, &o->comm_encrypt, 0, 0},
      {"--comm-host", GT_OPT_STR, &o->comm_host, 0, 0},
      {"--comm-iface", GT_OPT_STR, &o->comm_iface, 0, 0},
      {"--rdzv-password-file", GT_OPT_STR, &o->password_file, 0, 0},
      {"--rdzv-ttl", GT_OPT_INT, &o->ttl_s, 1, 3600},
      {"--rdzv-settle", GT_OPT_FLOAT, &o->settle_s, 0, 3600},
      {"--rdzv-timeout", GT_OPT_INT, &o->rdzv_timeout_s, 1, 86400},
      {"--monitor-interval", GT_OPT_FLOAT, &o->monitor_s, 0.01, 60},
      {"--stop-grace", GT_OPT_FLOAT, &o->stop_grace_s, 0, 600},
      {"--comm-ports", GT_OPT_STR, &o->comm_ports, 0, 0},
      {"--version", GT_OPT_FLAG, &o->version, 0, 0},
      {"--status", GT_OPT_FLAG, &o->status, 0, 0},
      {"--watch", GT_OPT_FLAG, &o->watch, 0, 0},
  };
  int rest = argc;
  int r = gt_opt_parse(argc, argv, specs, (int)(sizeof specs / sizeof specs[0]), usage, &rest);
  if (r >= 0) return r;
  if (o->version) {
    printf("giantrun (Giant) %s\n", GIANT_VERSION);
    return 0;
  }
  if (o->watch && !o->status) return usage_error("--watch goes with --status%s", "");
  if (o->status) return status_opts(o, rest < argc ? argv[rest] : NULL);
  if (rest >= argc) return usage_error("no PROGRAM given%s: giantrun [options] PROGRAM [ARGS...]", "");
  o->prog_argv = argv + rest;
  if ((r = slurm_defaults(o)) >= 0) return r;
  if (!o->nnodes) o->nnodes = "1";
  if (!o->nproc) o->nproc = 1;
  if (!o->job_id) o->job_id = "default";
  if ((r = parse_nnodes(o)) >= 0) return r;
  if (strcmp(o->backend, "etcd") != 0)
    return usage_error("--rdzv-backend '%s' is not supported: the backend is etcd", o->backend);
  if (!gt_rdzv_valid_id(o->job_id))
    return usage_error("--job-id '%s': use 1 to 100 of the characters A-Z a-z 0-9 . _ -", o->job_id);
  if (o->node_id && !gt_rdzv_valid_id(o->node_id))
    return usage_error("--node-id '%s': use 1 to 100 of the characters A-Z a-z 0-9 . _ -", o->node_id);
  if (!o->node_id) {
    char host[64] = "node";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    for (char *c = host; *c; c++)
      if (!gt_rdzv_valid_id((char[]){*c, 0})) *c = '-';
    snprintf(o->node_buf, sizeof o->node_buf, "%s-%ld", host, (long)getpid());
    o->node_id = o->node_buf;
  }
  if (o->standalone) {
    if (o->endpoint) return usage_error("--standalone starts its own etcd: drop --rdzv-endpoint%s", "");
    if (o->max_nodes != 1) return usage_error("--standalone runs one node, but --nnodes is '%s'", o->nnodes);
    if (o->cacert || o->cert || o->key)
      return usage_error(
          "--standalone makes its own certificates for its etcd: drop --rdzv-cacert, --rdzv-cert "
          "and --rdzv-key%s",
          "");
  } else if (!o->endpoint && !o->slurm.etcd) {
    return usage_error("no etcd to meet on%s: give --rdzv-endpoint HOST:PORT, or --standalone for one node", "");
  }
  if ((o->cert == NULL) != (o->key == NULL))
    return usage_error("TLS: give both --rdzv-cert and --rdzv-key, or neither%s", "");
  const char *files[3] = {o->cacert, o->cert, o->key};
  for (int i = 0; i < 3; i++)
    if (files[i] && access(files[i], R_OK) != 0) return usage_error("cannot read TLS file '%s'", files[i]);
  if ((o->user == NULL) != (o->password_file == NULL))
    return usage_error("etcd authentication: give both --rdzv-user and --rdzv-password-file, or neither%s", "");
  if (o->user && o->standalone)
    return usage_error("--standalone starts its own etcd, which has no users: drop --rdzv-user%s", "");
  if (o->password_file && gt_etcd_read_password(o->password_file, o->password, sizeof o->password) != GT_OK)
    return usage_error("%s", gt_last_error());
  if (!o->comm_integrity && getenv(GT_ENV_COMM_INTEGRITY) && *getenv(GT_ENV_COMM_INTEGRITY))
    o->comm_integrity = getenv(GT_ENV_COMM_INTEGRITY); /* the workers get it as they would have */
  if (o->comm_integrity && strcmp(o->comm_integrity, "headers") && strcmp(o->comm_integrity, "mac"))
    return usage_error("--comm-integrity '%s': use headers or mac", o->comm_integrity);
  const char *enc = getenv(GT_ENV_COMM_ENCRYPT); /* the workers get it as they would have */
  if (!o->comm_encrypt && enc && *enc && strcmp(enc, "0") && strcmp(enc, "1"))
    return usage_error("GT_COMM_ENCRYPT=%s: use 1 (or --comm-encrypt) or 0", enc);
  if (!o->comm_encrypt && enc && !strcmp(enc, "1")) o->comm_encrypt = true;
  if (o->comm_host && (!*o->comm_host || strlen(o->comm_host) >= sizeof o->comm_addr))
    return usage_error("--comm-host '%s': give an address or host name of at most 99 characters", o->comm_host);
  if (o->comm_iface && !*o->comm_iface) return usage_error("--comm-iface is empty%s", "");
  if (o->log_dir && !*o->log_dir) return usage_error("--log-dir is empty%s", "");
  if (o->ckpt_dir && !*o->ckpt_dir) return usage_error("--ckpt-dir is empty%s", "");
  if (o->plan && strlen(o->plan) >= 128)
    return usage_error("--plan '%s' is too long (at most 127 characters)", o->plan);
  if ((r = parse_ports(o)) >= 0) return r;
  return resolve_program(o);
}
