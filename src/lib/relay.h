/* relay.h - copy bytes both ways between two connected sockets.
 *
 * For raw tunnels and upgraded HTTP connections (WebSocket, airlock-tcp)
 * and the gateway's TCP proxy: each direction ends on its own (EOF ->
 * shutdown(SHUT_WR) on the other side, as TCP half-close); the relay
 * returns when both have ended or either side failed. A side that closes
 * while the other still sends to it ends only that direction: what it sent
 * back is still delivered, and the rest of the other side's input is read
 * and dropped until its EOF (no reset that could discard an answer not read
 * yet). Bytes move socket -> pipe -> socket with splice(2), so they never
 * enter user space; a pair that splice cannot move (EINVAL), and a
 * direction read only to be dropped, go through a buffer instead. Each
 * direction holds at most one pipe (RELAY_PIPE bytes when the pipe may grow
 * that far) or RELAY_BUF bytes: a slow reader slows the writer down. Both
 * fds are borrowed and left open (set O_NONBLOCK).
 */
#ifndef AIRLOCK_RELAY_H
#define AIRLOCK_RELAY_H

#include <stddef.h>

#define RELAY_BUF (256u * 1024)
#define RELAY_PIPE (1024u * 1024)

/* The two pipes of a relay, kept for the next one by a caller that relays
 * many connections one after another (a gateway worker): creating and
 * growing a pipe per connection costs syscalls and allocations. -1: none
 * yet. A relay that ends with bytes in a pipe closes it (the next relay
 * makes a new one). */
struct relay_pipes {
	int p[2][2];
};
#define RELAY_PIPES_INIT { { { -1, -1 }, { -1, -1 } } }
void relay_pipes_close(struct relay_pipes *rp);

/* a_pending/b_pending: bytes already read from a (to go to b) and from b
 * (to go to a) before the relay started; may be NULL/0. rp: pipes to use
 * and keep, NULL for pipes of this relay only. Returns 0 when both
 * directions ended cleanly, -errno otherwise. */
int relay_fds_pipes(struct relay_pipes *rp, int a, int b, const void *a_pending, size_t a_n,
		    const void *b_pending, size_t b_n);

static inline int relay_fds(int a, int b, const void *a_pending, size_t a_n,
			    const void *b_pending, size_t b_n)
{
	return relay_fds_pipes(NULL, a, b, a_pending, a_n, b_pending, b_n);
}

#endif
