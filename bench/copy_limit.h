/* What two processes achieve copying through one shared segment: the
 * ceiling bench_comm sets the two-rank shared-memory all-reduce against.
 *
 * A producer process copies pieces of its private buffer into the slots of
 * a ring in a MAP_SHARED segment; a consumer process copies each piece out
 * into its own private buffer, as a shared-memory transfer does. Both
 * processes copy at once, the slots stay in cache, and each waits for the
 * other by a short spin, then a futex sleep, as a transport does. */
#ifndef GIANT_BENCH_COPY_LIMIT_H
#define GIANT_BENCH_COPY_LIMIT_H

#include <stdbool.h>
#include <stddef.h>

/* Seconds to move `move` bytes from producer to consumer, each process
 * with a private buffer of `buf` bytes that the pieces walk through (and
 * wrap around): the best of `rounds` rounds at each of a few piece sizes
 * (4 slots each), the consumer copying out with memcpy or with streaming
 * stores (which skip reading the lines they overwrite, as the all-reduce's
 * do), so the limit is this machine's, not one setting's. *piece and
 * *stream (may be NULL) get the best's setting. Negative when the
 * consumer cannot be started or stops answering. */
double bench_copy_limit(size_t move, size_t buf, int rounds, size_t *piece, bool *stream);

#endif
