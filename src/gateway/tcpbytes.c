/* tcpbytes.c - a TCP socket's byte counts from the kernel (TCP_INFO), for
 * connections the gateway serves itself instead of relaying them (TLS it
 * intercepts for credential injection): their bytes are the sandbox side's
 * TLS records, counted when the connection ends. Its own file: <linux/tcp.h>
 * (whose struct tcp_info has the byte counts) and <netinet/tcp.h> do not mix. */
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>

#include "gateway-internal.h"

int gw_sock_bytes(int fd, uint64_t *received, uint64_t *sent)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	memset(&ti, 0, sizeof(ti));
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0 ||
	    len < offsetof(struct tcp_info, tcpi_bytes_retrans) + sizeof(ti.tcpi_bytes_retrans))
		return -1;   /* a kernel before 4.19 does not say */
	*received = ti.tcpi_bytes_received;
	/* what went out once: retransmissions are counted again in bytes_sent */
	*sent = ti.tcpi_bytes_sent - ti.tcpi_bytes_retrans;
	return 0;
}
