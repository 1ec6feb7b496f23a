/* relay.h - copy bytes both ways between two connected sockets.
 *
 * For raw tunnels and upgraded HTTP connections (WebSocket, airlock-tcp)
 * and the gateway's TCP proxy: each direction ends on its own (EOF ->
 * shutdown(SHUT_WR) on the other side, as TCP half-close); the relay ends
 * when both have ended or either side failed. A side that closes while the
 * other still sends to it ends only that direction: what it sent back is
 * still delivered, and the rest of the other side's input is read and
 * dropped until its EOF (no reset that could discard an answer not read
 * yet). Bytes move socket -> pipe -> socket with splice(2), so they never
 * enter user space; a pair that splice cannot move (EINVAL), and a
 * direction read only to be dropped, go through a buffer instead. Each
 * direction holds at most one pipe (RELAY_PIPE bytes when the pipe may grow
 * that far) or RELAY_BUF bytes: a slow reader slows the writer down.
 *
 * Two ways to run one: relay_fds blocks the calling thread until the pair
 * is over (the fds stay the caller's); a relay_loop carries any number of
 * pairs on a few threads of its own (epoll), so a connection that idles
 * for hours holds two fds and a small struct, not a thread.
 */
#ifndef AIRLOCK_RELAY_H
#define AIRLOCK_RELAY_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define RELAY_BUF (256u * 1024)
#define RELAY_PIPE (1024u * 1024)
#define RELAY_PIPES_KEEP 16

/* Empty pipes kept for the next move, by a caller that relays many
 * connections (a gateway worker, a loop thread): creating and growing a
 * pipe per connection costs syscalls and allocations. A direction takes a
 * pipe only while bytes are in it, and gives it back empty; a pipe left
 * holding bytes (its receiver gone) is closed, never kept, so no byte of
 * one connection reaches another. */
struct relay_pipes {
	int n;
	int p[RELAY_PIPES_KEEP][2];
};
#define RELAY_PIPES_INIT { 0 }
void relay_pipes_close(struct relay_pipes *rp);

/* a_pending/b_pending: bytes already read from a (to go to b) and from b
 * (to go to a) before the relay started; may be NULL/0. rp: pipes to use
 * and keep, NULL for pipes of this relay only. Both fds are borrowed and
 * left open (set O_NONBLOCK). Returns 0 when both directions ended cleanly,
 * -errno otherwise. */
int relay_fds_pipes(struct relay_pipes *rp, int a, int b, const void *a_pending, size_t a_n,
		    const void *b_pending, size_t b_n);

static inline int relay_fds(int a, int b, const void *a_pending, size_t a_n,
			    const void *b_pending, size_t b_n)
{
	return relay_fds_pipes(NULL, a, b, a_pending, a_n, b_pending, b_n);
}

/* ---- many pairs on a few threads ---- */

struct relay_loop;

/* Called once per pair, when it is over (r as relay_fds returns, or
 * -ECANCELED at relay_loop_stop): the callee closes a and b. From a loop
 * thread, or from relay_loop_add's caller when the pair ended at once. */
typedef void (*relay_done_fn)(void *arg, int a, int b, int r);

/* threads: how many (each with its own epoll set); at least 1. */
struct relay_loop *relay_loop_start(unsigned threads, err_t *err);

/* Hand a connected pair over: the caller's thread sends a_pending to b and
 * what a has for b now (with its pipes rp, may be NULL), then a loop thread
 * carries the pair. From here on the loop owns a and b, and done(arg, ...)
 * is called exactly once, whatever happens. */
void relay_loop_add(struct relay_loop *l, struct relay_pipes *rp, int a, int b,
		    const void *a_pending, size_t a_n, relay_done_fn done, void *arg);

/* relay_loop_add, counting: as bytes are delivered, ab's counters (up to
 * two, NULL = none) grow by what went from a to b, ba's by what went from b
 * to a (a_pending included), atomically. The counters must outlive the
 * pair (until done is called). */
struct relay_counts {
	uint64_t *ab[2], *ba[2];
};
void relay_loop_add_counted(struct relay_loop *l, struct relay_pipes *rp, int a, int b,
			    const void *a_pending, size_t a_n, const struct relay_counts *cnt,
			    relay_done_fn done, void *arg);

/* Pairs the loop carries now. */
unsigned relay_loop_pairs(struct relay_loop *l);

/* Stop the threads; every pair still carried is ended with -ECANCELED.
 * No relay_loop_add may run during or after it. */
void relay_loop_stop(struct relay_loop *l);

#endif
