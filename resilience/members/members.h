/* Membership epochs: which ranks of a generation are still the job.
 *
 * Epoch 0 is every rank of the generation. When a rank is lost and the
 * others reshape in-process (docs/resilience.md), the next epoch lists
 * the ranks left, in their order. Epochs live in the generation's store
 * and are decided by its atomic add (an etcd transaction on etcd): the
 * one that claims epoch E + 1 first writes it, so two groups can never
 * both be the job. A rank trains only in an epoch that lists it.
 *
 *   reshape/claim/<E>     the claim counter of epoch E
 *   reshape/members/<E>   "r0 r1 ...": generation ranks, ascending
 * Ranks leave (gt_members_remove) and come back (gt_members_add). A rank
 * that was never in one of a generation's epochs cannot join it.
 */
#ifndef GIANT_MEMBERS_H
#define GIANT_MEMBERS_H

#include <stdbool.h>
#include <stdint.h>

#include "giant/status.h"
#include "giant/engine/store.h"

#define GT_MEMBERS_MAX 4096

/* The ranks of epoch `epoch` (0: 0 .. world - 1), waiting up to
 * timeout_ms for it to be published (GT_ETIMEDOUT). */
gt_status gt_members_get(gt_store *s, int world, int epoch, int *ranks, int *n, int timeout_ms);
/* The newest published epoch and its ranks (no waiting). */
gt_status gt_members_latest(gt_store *s, int world, int *epoch, int *ranks, int *n);
/* Publishes a new epoch without `rank`, unless the newest already lacks
 * it; *epoch gets the epoch that lacks it. Safe against others removing
 * ranks at the same time: each claim is one atomic add. */
gt_status gt_members_remove(gt_store *s, int world, int rank, int *epoch);
/* The same for n ranks at once (a node's, when it is lost): one epoch
 * without all of them, so that no rank tries an epoch that still lists a
 * lost one. */
gt_status gt_members_remove_set(gt_store *s, int world, const int *ranks, int n, int *epoch);
/* The same with `rank` put back (a restarted worker joining). */
gt_status gt_members_add(gt_store *s, int world, int rank, int *epoch);
/* The same for n ranks at once (several asked to join by the time of one
 * look, a node's workers): one epoch with all of them, so that each joins
 * the epoch the others move to. */
gt_status gt_members_add_set(gt_store *s, int world, const int *ranks, int n, int *epoch);
/* A restarted worker asks to join the running job:
 *   reshape/join/<rank>   its request, removed once taken
 *   reshape/joins         a counter of requests, cheap to poll */
gt_status gt_members_request_join(gt_store *s, int rank);
/* Training ended (rank 0, after the last step): a rank still asking to
 * join has nothing left to join, and ends too.
 *   reshape/finished      set once the job's last step is done */
gt_status gt_members_finish(gt_store *s);
gt_status gt_members_finished(gt_store *s, bool *finished);
/* How many requests were ever made (the counter; one read). */
gt_status gt_members_join_requests(gt_store *s, int64_t *total);
/* The requests of ranks not in members[0..n) made since *seen (which it
 * advances): into ranks[], *count of them. One read when there are none. */
gt_status gt_members_joins(gt_store *s, int world, const int *members, int n, int64_t *seen, int *ranks, int *count);
/* The position of rank in ranks[0..n), or -1. */
int gt_members_index(const int *ranks, int n, int rank);

/* A watcher for epochs the rank has not moved to. A rank blocked in a
 * collective with a peer that was cut off (its node partitioned, rather
 * than dead) hears nothing until the collective's timeout, minutes later;
 * the epoch without that peer, published by the agents when its lease
 * lapses, is the news. The watcher's thread waits for the epochs after
 * the armed one; when one without a rank of the armed one has stood for
 * grace_ms while the rank still trains in the armed one, `fn` runs once
 * (on the watcher's thread; epochs that only add ranks are joins, which
 * the training loop takes in at a step boundary): it
 * typically aborts the rank's communicators (gt_comm_abort), so that the
 * blocked step fails at once and the rank reshapes. A planned reshape
 * moves every rank to its new epoch well within the grace.
 * The store must be safe to share between threads (the etcd store is). */
typedef struct gt_members_watch gt_members_watch;
typedef void (*gt_members_newer_fn)(void *arg, int epoch);
gt_status gt_members_watch_start(gt_store *s, int world, int grace_ms, gt_members_newer_fn fn, void *arg,
                                 gt_members_watch **out);
/* The rank trains in `epoch` from now on; -1: in none (while it reshapes).
 * When it returns, `fn` is not running, and runs only for an epoch after
 * the one armed. Not from within `fn`. */
void gt_members_watch_arm(gt_members_watch *w, int epoch);
/* On the rank that takes joins in: the watcher's thread also reads the
 * count of join requests (gt_members_join_requests) every half second, so
 * that the training loop's look at a step boundary asks the store nothing
 * while no request is new, nor while the store is away (etcd without a
 * quorum would hold the step for its timeout). */
void gt_members_watch_joins(gt_members_watch *w, bool on);
/* The count it last read; -1 when it has read none (or is not on). */
int64_t gt_members_watch_join_requests(gt_members_watch *w);
/* Stops the thread and frees w. NULL is a no-op. */
void gt_members_watch_stop(gt_members_watch *w);

#endif
