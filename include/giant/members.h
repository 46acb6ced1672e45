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

#include "giant/status.h"
#include "giant/store.h"

GT_API_BEGIN

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
/* The same with `rank` put back (a restarted worker joining). */
gt_status gt_members_add(gt_store *s, int world, int rank, int *epoch);
/* A restarted worker asks to join the running job:
 *   reshape/join/<rank>   its request, removed once taken
 *   reshape/joins         a counter of requests, cheap to poll */
gt_status gt_members_request_join(gt_store *s, int rank);
/* The requests of ranks not in members[0..n) made since *seen (which it
 * advances): into ranks[], *count of them. One read when there are none. */
gt_status gt_members_joins(gt_store *s, int world, const int *members, int n, int64_t *seen, int *ranks, int *count);
/* The position of rank in ranks[0..n), or -1. */
int gt_members_index(const int *ranks, int n, int rank);

GT_API_END
#endif
