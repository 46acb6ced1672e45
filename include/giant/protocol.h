/* The protocol between giantrun's agent and the workers it starts: the
 * environment a worker finds, and the exit statuses the agent reads
 * (docs/launching.md describes each). Both sides include this header, so
 * that each name and each status is written once. A worker started by
 * hand (tests/localkit, a test) sets the same variables. */
#ifndef GIANT_PROTOCOL_H
#define GIANT_PROTOCOL_H

/* Where the worker is in the job. */
#define GT_ENV_RANK "GT_RANK"             /* its rank as launched: a reshape does not renumber it */
#define GT_ENV_LOCAL_RANK "GT_LOCAL_RANK" /* on its node */
#define GT_ENV_WORLD_SIZE "GT_WORLD_SIZE" /* ranks at launch; its presence means "under a launcher" */
#define GT_ENV_LOCAL_WORLD_SIZE "GT_LOCAL_WORLD_SIZE"
#define GT_ENV_NODE_RANK "GT_NODE_RANK"
#define GT_ENV_NNODES "GT_NNODES"
#define GT_ENV_GENERATION "GT_GENERATION" /* the rendezvous round it was started in */
#define GT_ENV_RESTART_COUNT "GT_RESTART_COUNT"
#define GT_ENV_JOB_ID "GT_JOB_ID"
#define GT_ENV_NODE_ID "GT_NODE_ID" /* its node's --node-id: named in errors about the node's address */
/* How it reaches the others: the store (etcd://HOST:PORT[,...]/PREFIX or
 * tcp://HOST:PORT), its TLS and login, the job's secret, the links'
 * integrity checks, the address its peers reach it at, and the plan. */
#define GT_ENV_STORE "GT_STORE"
#define GT_ENV_STORE_CACERT "GT_STORE_CACERT"
#define GT_ENV_STORE_CERT "GT_STORE_CERT"
#define GT_ENV_STORE_KEY "GT_STORE_KEY"
#define GT_ENV_STORE_USER "GT_STORE_USER"
#define GT_ENV_STORE_PASSWORD_FILE "GT_STORE_PASSWORD_FILE"
#define GT_ENV_JOB_SECRET "GT_JOB_SECRET"
#define GT_ENV_COMM_INTEGRITY "GT_COMM_INTEGRITY" /* headers or mac */
#define GT_ENV_COMM_PORTS "GT_COMM_PORTS"         /* A-B: every listening port inside it */
#define GT_ENV_COMM_ENCRYPT "GT_COMM_ENCRYPT"     /* 1: TCP payloads encrypted (--comm-encrypt) */
#define GT_ENV_COMM_HOST "GT_COMM_HOST"           /* the address its peers reach it at (--comm-host) */
#define GT_ENV_PLAN "GT_PLAN"                     /* --plan */
/* What the agent watches and asks: the pipe the worker reports its steps
 * on (gt_job_step), checkpoints (--ckpt-dir, --ckpt-every, --ckpt-keep),
 * whether agents lead mitigation (the value GT_COORD_LEADER), whether a
 * dead rank's siblings reshape in-process (1), and whether this worker
 * joins a running job (1: restarted alone). */
#define GT_ENV_PROGRESS_FD "GT_PROGRESS_FD"
#define GT_ENV_CKPT_DIR "GT_CKPT_DIR"
#define GT_ENV_CKPT_EVERY "GT_CKPT_EVERY"
#define GT_ENV_CKPT_KEEP "GT_CKPT_KEEP"
#define GT_ENV_COORD "GT_COORD"
#define GT_COORD_LEADER "leader"
#define GT_ENV_RESHAPE "GT_RESHAPE"
#define GT_ENV_JOIN "GT_JOIN"

/* Exit statuses of a worker, as giantrun reads them. */
#define GT_RUN_EXIT_OK 0
#define GT_RUN_EXIT_FAILED 1 /* a failure a restart may mend */
#define GT_RUN_EXIT_USAGE 2  /* bad flags or configuration: never restarted */
#define GT_RUN_EXIT_INPUT 65 /* bad input data (EX_DATAERR): never restarted, with or without --reshape */
#define GT_RUN_EXIT_DIVERGED \
  70                           /* training diverged (non-finite past --skip-nonfinite): every rank sees the same
                                   reduced loss and norm, so no restart or reshape mends it; never restarted */
#define GT_RUN_EXIT_RESTART 75 /* the in-process reshape failed: restart every worker from the newest checkpoint */

#endif
