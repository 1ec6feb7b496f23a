/* pipe.h - a producer and a consumer joined by a pipe, side by side: the
 * producer writes into the write end on the calling thread while the
 * consumer reads the read end on a thread of its own. For a download that
 * goes straight into what rebuilds from it (a restore's disk stream into
 * `btrfs receive`, a memory base into its decompression) instead of into
 * a file first and then into it.
 *
 * Each end is closed as soon as its side returns: the consumer sees the
 * end of the stream when the producer is done (or failed), and a producer
 * still writing when the consumer stopped early gets EPIPE instead of
 * blocking on a full pipe (SIGPIPE must be ignored, as the daemons do).
 */
#ifndef AIRLOCK_PIPE_H
#define AIRLOCK_PIPE_H

#include <stdint.h>

#include "err.h"

/* 0 or -errno with err set. */
typedef int (*pipe_side_fn)(void *arg, int fd, err_t *err);

/* Run both; produce_us gets the producer's time and tail_us what the
 * consumer took after it (either may be NULL). The error is the
 * producer's, unless it is EPIPE: then the consumer stopped reading
 * first, and its result is the one (a consumer that succeeded had all it
 * needed). pipe_size: the pipe's capacity asked
 * for (0: the kernel's default), e.g. the producer's write size. */
int pipe_run(pipe_side_fn produce, void *parg, pipe_side_fn consume, void *carg,
	     int pipe_size, uint64_t *produce_us, uint64_t *tail_us, err_t *err);

#endif
