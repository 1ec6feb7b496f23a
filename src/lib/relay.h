/* relay.h - copy bytes both ways between two connected sockets.
 *
 * For raw tunnels and upgraded HTTP connections (WebSocket, airlock-tcp):
 * each direction ends on its own (EOF -> shutdown(SHUT_WR) on the other
 * side, as TCP half-close); the relay returns when both have ended or either
 * side failed. A side that closes while the other still sends to it ends only
 * that direction: what it sent back is still delivered, and the rest of the
 * other side's input is read and dropped until its EOF (no reset that could
 * discard an answer not read yet). It holds at most RELAY_BUF bytes per direction: a slow reader
 * slows the writer down. Both fds are borrowed and left open.
 */
#ifndef AIRLOCK_RELAY_H
#define AIRLOCK_RELAY_H

#include <stddef.h>

#define RELAY_BUF (256u * 1024)

/* a_pending/b_pending: bytes already read from a (to go to b) and from b
 * (to go to a) before the relay started; may be NULL/0. Returns 0 when both
 * directions ended cleanly, -errno otherwise. */
int relay_fds(int a, int b, const void *a_pending, size_t a_n, const void *b_pending,
	      size_t b_n);

#endif
