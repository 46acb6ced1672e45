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
/* The position of rank in ranks[0..n), or -1. */
int gt_members_index(const int *ranks, int n, int rank);

GT_API_END
#endif
