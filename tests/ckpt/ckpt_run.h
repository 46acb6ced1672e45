/* A training run for the checkpoint tests: forked ranks train a small GPT
 * on a token file at some layout, loading a checkpoint first and saving one
 * on the way as asked, and write what they hold (parameters, optimizer
 * state, losses) into shared memory in the single-process layout. */
#ifndef GIANT_TESTS_CKPT_RUN_H
#define GIANT_TESTS_CKPT_RUN_H

#include <stdbool.h>

#include "giant/ckpt.h"
#include "parallel/train_result.h"
#include "ckpt/peers_api.h"
#include "giant/engine/checkpoint.h"

enum { CR_V = 64, CR_T = 16, CR_C = 32, CR_NH = 4, CR_L = 2, CR_ROWS = 4, CR_ACCUM = 4, CR_STEPS = 20 };

/* Parameters and AdamW's two moments, in the single-process layout. */
typedef struct cr_state {
  train_result *p, *m, *v;
} cr_state;

typedef struct cr_cfg {
  const char *layout; /* NULL: one process */
  bool zero1;
  int zero;         /* the ZeRO stage (gt_plan_config.zero: 0 leaves it to zero1) */
  const char *data; /* token file */
  const char *dir;  /* checkpoint root */
  int s0, s1;       /* run steps [s0, s1); s0 > 0 loads the newest checkpoint first, which must be at s0 */
  int save_at;      /* save once this many steps are done (0: never); right after the load if it is at that step */
  cr_state saved, loaded, final; /* filled when their p is set */
  int C;                         /* model width (0: CR_C) */
  int save_every;                /* also save whenever the steps done are a multiple of this (0: never) */
  int keep;                      /* checkpoints kept */
  gt_ckpt_busy busy;
  int kill_at;           /* every rank SIGKILLs itself when this many steps are done (0: never) */
  bool load_if_any;      /* s0 < 0: load the newest checkpoint if there is one, and go on from its step */
  const char *load_path; /* load this step directory instead of the newest */
  /* When set (shared memory): the load's status and message go here, and
   * the run stops after the load instead of failing the rank. */
  int *load_status;
  char *load_error;
  int *loaded_step; /* shared: the step of the checkpoint loaded */
  int *save_status; /* shared: how the last save ended, instead of failing the rank */
  int *skipped;     /* shared, one per rank: the saves each rank skipped (NULL: not recorded) */
  int wait_at;      /* each rank waits for its own writer before the save decision at this step (0: never) */
  /* Called in the rank before each step's save decision, and after the
   * last step before waiting for the save in flight (NULL: none). */
  void (*before_save)(const char *dir, int steps_done);
  void (*after_steps)(const char *dir);
  /* Shared memory: every global sample index the replicas took, by step
   * (rows[step][k] for k < nrows[step], appended atomically). */
  unsigned long long (*rows)[CR_ROWS * CR_ACCUM];
  int *nrows;
  /* dp=2: from step share_at on (when share0 > 0), replica 0 takes share0
   * of the CR_ROWS rows of every micro-batch and replica 1 the rest; the
   * model holds CR_ROWS rows so that any share fits. */
  int share_at, share0;
  uint64_t chunk_bytes; /* gt_ckpt_config.chunk_bytes (0: the default) */
  /* Before step recut_at (> 0), the pipeline is cut again for these stage
   * speeds and training goes on in a new model and trainer that the state
   * moved into (gt_trainer_move_state). */
  int recut_at;
  const double *recut_speed;
  int *moved;                     /* shared: the layers that changed stage */
  int offload_window;             /* gt_model_config.offload_window of every model built (0: not offloaded) */
  unsigned long long *bytes_read; /* shared, one per rank: the shard bytes the load read (NULL: not recorded) */
  /* When live_at steps are done (> 0), the layout changes in-process: the
   * rank live_lost - 1 leaves (0: none), the rank live_empty - 1 drops its
   * state and joins with nothing (0: none), and the others build live_layout
   * (with live_zero1) over world - (live_lost > 0) ranks, numbered in the old
   * order, and take the state from each other (gt_ckpt_reshard_peers, with
   * live_fallback). `loaded` is captured after the move. */
  int live_at, live_lost, live_empty;
  const char *live_layout, *live_fallback;
  bool live_zero1;
  int live_zero;                  /* the ZeRO stage there (0: live_zero1's) */
  bool live_mirror;               /* keep copies of single-owner state on a peer, updated every step (gt_ckpt_mirror) */
  int *live_status;               /* shared: rank 0's status of the move; the run stops after it when not GT_OK */
  char *live_error;               /* shared, 1024 bytes: its message */
  gt_ckpt_peer_stats *live_stats; /* shared, one per old rank (NULL: not recorded) */
  /* A safetensors file or directory every rank imports (hf-gpt2 names)
   * right after the build, captured in `loaded` (NULL: none). */
  const char *init_from;
} cr_cfg;

/* A cr_state in shared memory, with the single-process layout of `layout`
 * (NULL: the layout is set by the first one-process run writing it). */
cr_state cr_state_new(const train_result *layout);
/* Asserts that a holds something (not all zeros) and that b holds
 * exactly the same parameters and moments, saying which differ. */
void cr_assert_same_state(const train_result *layout, const char *what, const cr_state *a, const cr_state *b);
/* One rank of a run (harness_fn). */
int cr_rank(int rank, int world, void *arg);
/* Runs cfg on `world` ranks; fails the test with the ranks' codes if one fails. */
void cr_run(int world, cr_cfg *cfg);
/* A token file of learnable sequences in a fresh temporary directory, and
 * the directory's removal. */
char *cr_make_data(void);
/* The token file's directory removed, and data freed. */
void cr_free_data(char *data);
/* The single-process layout results are written in (a run of no steps). */
train_result *cr_layout(const char *data);
void cr_rmtree(const char *dir);

/* The fixture of the tests that train on one token file and compare
 * states: cr_fixture_setup and cr_fixture_teardown, a CMocka group's setup
 * and teardown, make the file and the single-process layout (cr_fx) and
 * remove them; cr_fixture_dir names a new directory beside the file
 * (`tag` and a count; the caller frees the name); cr_fixture_same_state is
 * cr_assert_same_state on the fixture's layout. */
typedef struct cr_fixture {
  char *data;
  train_result *layout;
} cr_fixture;
extern cr_fixture cr_fx;
int cr_fixture_setup(void **state);
int cr_fixture_teardown(void **state);
char *cr_fixture_dir(const char *tag);
void cr_fixture_same_state(const char *what, const cr_state *a, const cr_state *b);
/* Flips the bits `mask` of byte `offset` of a file, in place. */
void cr_flip_bit(const char *path, long offset, unsigned char mask);

#endif
