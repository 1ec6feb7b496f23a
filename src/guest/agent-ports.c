/* agent-ports.c - port streams: TCP connections the agent opens to 127.0.0.1:PORT
 * inside the sandbox on the host's behalf (PORT_* frames, see proto.h).
 *
 * Why through the agent and not by the sandbox's address: every sandbox, ns
 * and vm, already has this channel; the host needs no route into the
 * sandbox's network, no port is exposed on any interface, and the gateway's
 * rules stay one-way (out of the sandbox only).
 *
 * Everything here is non-blocking and driven by the agent's poll loop:
 *   connecting  connect() returned EINPROGRESS; POLLOUT completes it and we
 *               answer the PORT_OPEN request with OK or ERROR(errno).
 *   open        socket -> host: read only while the host granted credit (and
 *               the channel's queue is below OUT_HIGH); each read becomes a
 *               PORT_DATA frame and uses credit. host -> socket: PORT_DATA
 *               is queued (never more than PROTO_PORT_WINDOW, the host's
 *               credit) and written as the socket accepts it; written bytes
 *               are acknowledged with PORT_CREDIT.
 *   half-closed EOF from the socket -> PORT_SHUT; PORT_SHUT from the host ->
 *               shutdown(SHUT_WR) once the queue is written.
 *   closed      both directions done, an error, or the host's PORT_CLOSE:
 *               the socket is closed and the id forgotten; we tell the host
 *               with PORT_CLOSE unless it was the host that closed.
 * So a slow reader on either side holds at most one window per direction in
 * the agent, whatever the other side sends.
 */
#include "guest.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

/* Acknowledge written bytes once this many accumulate (or the queue empties),
 * so a bulk transfer costs one CREDIT frame per quarter window. */
#define CREDIT_BATCH (PROTO_PORT_WINDOW / 4)

static struct pstream *find(struct agent *a, uint32_t id)
{
	for (struct pstream *s = a->streams; s; s = s->next)
		if (s->id == id)
			return s;
	return NULL;
}

static void send_port(struct agent *a, uint8_t type, uint32_t id, uint32_t credit, int err)
{
	struct proto_port m = { .type = type, .stream = id, .credit = credit,
				.err = (uint32_t)err };
	(void)proto_enc_port(&a->out, 0, &m);
}

static void stream_free(struct agent *a, struct pstream *s)
{
	for (struct pstream **pp = &a->streams; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	if (s->fd >= 0)
		close(s->fd);
	buf_free(&s->in_q);
	free(s);
	a->n_streams--;
}

/* End the stream now; tell the host (unless it asked for it) with err. */
static void stream_reset(struct agent *a, struct pstream *s, int err, bool tell)
{
	if (tell)
		send_port(a, PT_PORT_CLOSE, s->id, 0, err);
	stream_free(a, s);
}

void port_open(struct agent *a, const struct proto_frame *f)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct proto_port m;
	struct pstream *s;
	int fd;

	if (proto_dec_port(f, &m) < 0) {
		agent_send_error(a, f->req_id, EINVAL, "malformed PORT_OPEN");
		return;
	}
	if (find(a, m.stream)) {
		agent_send_error(a, f->req_id, EEXIST, "stream %u is in use", m.stream);
		return;
	}
	if (a->n_streams >= PROTO_PORT_MAX_STREAMS) {
		agent_send_error(a, f->req_id, EMFILE, "too many port streams (max %u)",
				 PROTO_PORT_MAX_STREAMS);
		return;
	}
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		agent_send_error(a, f->req_id, errno, "socket: %s", strerror(errno));
		return;
	}
	sin.sin_port = htons(m.port);
	if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 && errno != EINPROGRESS) {
		int e = errno;
		agent_send_error(a, f->req_id, e, "connect 127.0.0.1:%u: %s", m.port, strerror(e));
		close(fd);
		return;
	}
	s = xcalloc(1, sizeof(*s));
	s->id = m.stream;
	s->fd = fd;
	s->port = m.port;
	s->open_req = f->req_id;    /* answered when connect completes (POLLOUT) */
	s->send_credit = PROTO_PORT_WINDOW;
	buf_init(&s->in_q);
	s->next = a->streams;
	a->streams = s;
	a->n_streams++;
	agent_touch(a);
}

void port_frame(struct agent *a, const struct proto_frame *f)
{
	struct proto_port m;
	struct pstream *s;

	/* Unsolicited: a malformed one gets no answer the host could match. */
	if (proto_dec_port(f, &m) < 0)
		return;
	if (!(s = find(a, m.stream)))
		return;   /* crossed our CLOSE: drop */
	switch (m.type) {
	case PT_PORT_DATA:
		/* The host must stay within the window we granted; a host that
		 * does not would make us buffer without bound. */
		if (s->host_shut || m.len > PROTO_PORT_WINDOW - s->unacked_in) {
			stream_reset(a, s, EPROTO, true);
			return;
		}
		buf_add(&s->in_q, m.data, m.len);
		s->unacked_in += (uint32_t)m.len;
		agent_touch(a);
		break;
	case PT_PORT_CREDIT:
		if (m.credit > PROTO_PORT_WINDOW - s->send_credit) {
			stream_reset(a, s, EPROTO, true);
			return;
		}
		s->send_credit += m.credit;
		break;
	case PT_PORT_SHUT:
		s->host_shut = true;
		break;
	case PT_PORT_CLOSE:
		stream_reset(a, s, 0, false);
		break;
	}
}

short port_events(const struct agent *a, const struct pstream *s)
{
	short ev = 0;

	if (s->open_req)
		return POLLOUT;
	if (!s->rd_eof && s->send_credit > 0 && agent_out_pending(a) < OUT_HIGH)
		ev |= POLLIN;
	if (s->in_q.len > s->in_q_off || (s->host_shut && !s->wr_done))
		ev |= POLLOUT;
	return ev;
}

static void connected(struct agent *a, struct pstream *s)
{
	int e = 0;
	socklen_t len = sizeof(e);

	if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &e, &len) < 0)
		e = errno;
	if (e) {
		agent_send_error(a, s->open_req, e, "connect 127.0.0.1:%u: %s", s->port,
				 strerror(e));
		stream_free(a, s);
		return;
	}
	agent_send_ok(a, s->open_req);
	s->open_req = 0;
}

/* Host -> socket. Returns false when the stream was freed. */
static bool drain_in(struct agent *a, struct pstream *s)
{
	while (s->in_q.len > s->in_q_off) {
		ssize_t w = send(s->fd, s->in_q.data + s->in_q_off, s->in_q.len - s->in_q_off,
				 MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				break;
			stream_reset(a, s, errno, true);
			return false;
		}
		s->in_q_off += (size_t)w;
		s->credit_due += (uint32_t)w;
	}
	if (s->in_q_off == s->in_q.len) {
		buf_reset(&s->in_q);
		s->in_q_off = 0;
	}
	if (s->credit_due && (s->credit_due >= CREDIT_BATCH || s->in_q.len == 0)) {
		send_port(a, PT_PORT_CREDIT, s->id, s->credit_due, 0);
		s->unacked_in -= s->credit_due;
		s->credit_due = 0;
	}
	if (s->host_shut && !s->wr_done && s->in_q.len == 0) {
		shutdown(s->fd, SHUT_WR);
		s->wr_done = true;
	}
	return true;
}

/* Socket -> host, within the credit. Returns false when the stream was freed. */
static bool pump_out(struct agent *a, struct pstream *s)
{
	size_t want = s->send_credit < PROTO_CHUNK ? s->send_credit : PROTO_CHUNK;
	ssize_t n;

	if (want == 0 || s->rd_eof)
		return true;
	do
		n = recv(s->fd, a->iobuf, want, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		if (errno == EAGAIN)
			return true;
		stream_reset(a, s, errno, true);
		return false;
	}
	if (n == 0) {
		s->rd_eof = true;
		send_port(a, PT_PORT_SHUT, s->id, 0, 0);
		return true;
	}
	struct proto_port m = { .type = PT_PORT_DATA, .stream = s->id, .data = a->iobuf,
				.len = (size_t)n };
	(void)proto_enc_port(&a->out, 0, &m);
	s->send_credit -= (uint32_t)n;
	agent_touch(a);
	return true;
}

void port_io(struct agent *a, struct pstream *s, short re)
{
	if (s->open_req) {
		connected(a, s);
		return;
	}
	if ((re & (POLLOUT | POLLHUP | POLLERR)) && !drain_in(a, s))
		return;
	if ((re & (POLLIN | POLLHUP | POLLERR)) && !pump_out(a, s))
		return;
	if (s->rd_eof && s->wr_done && s->in_q.len == 0)
		stream_reset(a, s, 0, true);
}

/* Is s still in the table? (port_io may free streams; the loop's snapshot of
 * pointers must be checked before use.) */
bool port_alive(const struct agent *a, const struct pstream *s)
{
	for (const struct pstream *t = a->streams; t; t = t->next)
		if (t == s)
			return true;
	return false;
}

void port_reset_all(struct agent *a)
{
	while (a->streams)
		stream_free(a, a->streams);
}
