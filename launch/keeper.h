/* The keeper: a small process the agent starts first, which outlives it
 * for one purpose. Workers run in process groups of their own, and a
 * worker's children are in its group; PR_SET_PDEATHSIG kills a worker
 * when the agent dies, but not the worker's children. The agent tells the
 * keeper each group it starts and each it has reaped; when the agent is
 * gone, however it went (SIGKILL included), the keeper sees its pipe close
 * and kills every group still listed, then exits. */
#ifndef GIANT_LAUNCH_KEEPER_H
#define GIANT_LAUNCH_KEEPER_H

#include <sys/types.h>

#include "giant/status.h"

/* Forks the keeper; call it before any other thread starts. */
gt_status keeper_start(void);
/* The worker group `pgid` started, or was reaped (its group killed). Never
 * fail: without a keeper (not started, or gone) they do nothing. */
void keeper_add(pid_t pgid);
void keeper_remove(pid_t pgid);

#endif
