/* agent.c - the guest agent's event loop: channel I/O, request dispatch,
 * HELLO/READY/STATUS.
 *
 * Connection states:
 *   up     frames are read and dispatched; replies and output are queued in
 *          a->out and written as the channel accepts them (never blocking).
 *   down   the host end was closed (EOF or a write error). With the ns
 *          backend the channel is an inherited socketpair whose host end is
 *          held by the node manager, so EOF means nobody can ever talk to us
 *          again: processes keep running, their output is read and dropped
 *          (so they never block on a full pipe), zombies are still reaped, and
 *          the agent stays alive as init of the sandbox.
 *   With the vm backend the channel is a virtio-serial port and "down" is not
 *   final: the host end of the chardev can disconnect (a node restart) and
 *   connect again (the node, or a restored clone's first connection). A port
 *   without a host polls as POLLHUP|POLLIN for ever, so while down we do not
 *   poll it; virtio_console raises SIGIO on every change of the host's
 *   connection (vm_port_async), and a slow timer covers a missed signal. On
 *   reconnect we say HELLO + READY again, unprompted: bytes the host sent
 *   before we noticed it may be lost, so the host waits for us to speak.
 *   A host HELLO request (a new node adopting this sandbox) makes us drop the
 *   previous node's half-done file transfers and re-announce HELLO + READY
 *   with the request's id. Queued output is kept: it belongs to processes
 *   that are still of interest to whoever is listening now.
 */
#include "guest.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

void agent_touch(struct agent *a)
{
	a->last_activity_ms = wall_ms();
}

size_t agent_out_pending(const struct agent *a)
{
	return a->out.len - a->out_off;
}

void agent_send_error(struct agent *a, uint32_t req_id, int err, const char *fmt, ...)
{
	char msg[PROTO_MAX_MSG];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	(void)proto_enc_error(&a->out, req_id, err, msg);
}

void agent_send_ok(struct agent *a, uint32_t req_id)
{
	struct proto_enc e;

	proto_enc_begin(&e, &a->out, PT_OK, 0, req_id);
	(void)proto_enc_end(&e);
}

static void send_hello(struct agent *a, uint32_t req_id)
{
	struct proto_hello h = { .version = PROTO_VERSION };
	struct proto_enc e;

	snprintf(h.boot_id, sizeof(h.boot_id), "%s", a->boot_id);
	(void)proto_enc_hello(&a->out, req_id, &h);
	proto_enc_begin(&e, &a->out, PT_READY, 0, req_id);
	(void)proto_enc_end(&e);
}

#define PORT_PROBE_MS 1000       /* port down: look again this often without SIGIO */

static void chan_down(struct agent *a, const char *why)
{
	if (!a->chan_up)
		return;
	if (a->vm_port)
		fprintf(stderr, "airlock-guest: host disconnected (%s); waiting for it\n", why);
	else
		fprintf(stderr, "airlock-guest: channel closed (%s); processes keep running\n", why);
	a->chan_up = false;
	buf_reset(&a->out);
	a->out_off = 0;
	file_reset_transfers(a);
	port_reset_all(a);
	watch_reset_all(a);
	a->next_probe_ms = now_ms() + PORT_PROBE_MS;
}

/* vm_port only: is the host back? Then start over as a fresh connection. */
static void port_probe(struct agent *a)
{
	a->port_event = false;
	a->next_probe_ms = now_ms() + PORT_PROBE_MS;
	if (a->chan_up || !vm_port_connected(a->chan_fd))
		return;
	/* Input the old host left half-sent is garbage to the new one. */
	proto_rx_free(&a->rx);
	proto_rx_init(&a->rx);
	proc_forget_acks(a);
	a->chan_up = true;
	send_hello(a, 0);
}

void agent_flush(struct agent *a)
{
	if (!a->chan_up) {
		buf_reset(&a->out);
		a->out_off = 0;
		return;
	}
	while (agent_out_pending(a)) {
		ssize_t w = write(a->chan_fd, a->out.data + a->out_off, agent_out_pending(a));
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				break;
			chan_down(a, strerror(errno));
			return;
		}
		a->out_off += (size_t)w;
	}
	if (a->out_off == a->out.len) {
		buf_reset(&a->out);
		a->out_off = 0;
	} else if (a->out_off >= (1u << 20)) {
		memmove(a->out.data, a->out.data + a->out_off, agent_out_pending(a));
		a->out.len -= a->out_off;
		a->out_off = 0;
	}
}

static void do_status(struct agent *a, const struct proto_frame *f)
{
	/* STATUS does not count as activity: the node polls it to find idle
	 * sandboxes. */
	struct proto_status s = {
		.last_activity_ms = a->last_activity_ms,
		.uptime_ms = now_ms() - a->start_ms,
		.n_procs = proc_count_live(a),
		.cpu_ms = proc_cpu_ms(a),
	};
	(void)proto_enc_status(&a->out, f->req_id, &s);
}

/* One well-formed frame from the host. Its payload is still to be decoded by
 * each handler's typed decoder, which checks every field. */
static void dispatch(struct agent *a, const struct proto_frame *f)
{
	switch (f->type) {
	case PT_HELLO:
		/* A (new) node took over: nothing it did not ask for may be
		 * answered any more. */
		file_reset_transfers(a);
		proc_forget_acks(a);
		port_reset_all(a);
		watch_reset_all(a);
		send_hello(a, f->req_id);
		return;
	case PT_EXEC: proc_exec(a, f); return;
	case PT_STDIN: proc_stdin(a, f); return;
	case PT_SIGNAL: proc_signal(a, f); return;
	case PT_RESIZE: proc_resize(a, f); return;
	case PT_READ: file_read(a, f); return;
	case PT_WRITE: file_write(a, f); return;
	case PT_STAT: file_stat(a, f); return;
	case PT_LIST: file_list(a, f); return;
	case PT_MKDIR: file_mkdir(a, f); return;
	case PT_REMOVE: file_remove(a, f); return;
	case PT_RENAME: file_rename(a, f); return;
	case PT_STATUS: do_status(a, f); return;
	case PT_RESET: guest_reset(a, f); return;
	case PT_SYNC:
		/* Before a disk snapshot: the page cache goes to the disk so
		 * the host's snapshot of the image holds it. */
		sync();
		agent_send_ok(a, f->req_id);
		return;
	case PT_RECLAIM: guest_reclaim(a, f); return;
	case PT_PORT_OPEN: port_open(a, f); return;
	case PT_PORT_DATA:
	case PT_PORT_CREDIT:
	case PT_PORT_SHUT:
	case PT_PORT_CLOSE: port_frame(a, f); return;
	case PT_WATCH_START: watch_start(a, f); return;
	case PT_WATCH_STOP: watch_stop(a, f); return;
	}
	agent_send_error(a, f->req_id, ENOSYS, "unsupported frame type %u (%s)", f->type,
			 proto_type_name(f->type));
}

static void chan_read(struct agent *a)
{
	struct proto_frame f;
	ssize_t n = proto_rx_fill(&a->rx, a->chan_fd);
	int r;

	if (n == -EAGAIN)
		return;
	if (n == 0) {
		chan_down(a, "EOF");
		return;
	}
	if (n < 0) {
		chan_down(a, strerror((int)-n));
		return;
	}
	while ((r = proto_rx_next(&a->rx, &f)) != 0) {
		if (r < 0) {
			/* Malformed input from the host: answer and carry on; the
			 * receiver has already skipped the frame or is scanning for
			 * the next magic. */
			agent_send_error(a, f.req_id, -r, "malformed frame: %s", strerror(-r));
			continue;
		}
		dispatch(a, &f);
		if (!a->chan_up)
			return;
	}
}

static void handle_signals(struct agent *a)
{
	struct signalfd_siginfo si;

	for (;;) {
		ssize_t n = read(a->sig_fd, &si, sizeof(si));
		if (n != (ssize_t)sizeof(si))
			break;
		switch (si.ssi_signo) {
		case SIGCHLD:
			proc_reap(a);
			break;
		case SIGIO:
			a->port_event = true;
			break;
		case SIGTERM:
		case SIGINT:
		case SIGHUP:
			/* As init of a sandbox, termination comes from outside as
			 * SIGKILL of the whole namespace; a stray TERM from inside
			 * must not take the sandbox down. Run as a plain process
			 * (tests), TERM means "clean up and exit". */
			if (!a->pid1)
				a->quit = true;
			break;
		}
	}
	/* signalfd coalesces SIGCHLD: always sweep for zombies once more. */
	proc_reap(a);
}

enum { K_CHAN, K_SIG, K_OUT0, K_OUT1, K_IN, K_PORT, K_WATCH };

int agent_run(struct agent *a)
{
	struct pollfd *pfd = NULL;
	void **owner = NULL;
	int *kind = NULL;
	size_t cap = 0;

	a->iobuf = xmalloc(PROTO_CHUNK);
	/* The guest speaks first, every time it comes up: bytes the host sent
	 * before we opened the channel may be lost (virtio-serial). A port
	 * with no host yet waits for one (port_probe). */
	if (a->vm_port && !vm_port_connected(a->chan_fd)) {
		a->chan_up = false;
		a->next_probe_ms = now_ms();
	} else {
		send_hello(a, 0);
	}

	while (!a->quit) {
		size_t n = 0, nprocs = 0;
		int timeout;

		proc_finish(a);
		file_pump_downloads(a);
		agent_flush(a);

		for (struct proc *p = a->procs; p; p = p->next)
			nprocs++;
		size_t want = 2 + 3 * nprocs + a->n_streams + a->n_watches;
		if (cap < want) {
			cap = want + 16;
			pfd = xrealloc(pfd, cap * sizeof(*pfd));
			owner = xrealloc(owner, cap * sizeof(*owner));
			kind = xrealloc(kind, cap * sizeof(*kind));
		}
		pfd[n] = (struct pollfd){ .fd = a->sig_fd, .events = POLLIN };
		owner[n] = NULL;
		kind[n++] = K_SIG;
		if (a->chan_up) {
			short ev = 0;
			if (agent_out_pending(a) < IN_HIGH)
				ev |= POLLIN;
			if (agent_out_pending(a))
				ev |= POLLOUT;
			pfd[n] = (struct pollfd){ .fd = a->chan_fd, .events = ev };
			owner[n] = NULL;
			kind[n++] = K_CHAN;
		}
		/* Backpressure: process output is read only while the channel
		 * keeps up (or is down and output is dropped anyway). */
		bool room = !a->chan_up || agent_out_pending(a) < OUT_HIGH;
		for (struct proc *p = a->procs; p; p = p->next) {
			for (int i = 0; i < 2; i++) {
				if (p->out_fd[i] < 0 || !room)
					continue;
				pfd[n] = (struct pollfd){ .fd = p->out_fd[i], .events = POLLIN };
				owner[n] = p;
				kind[n++] = i ? K_OUT1 : K_OUT0;
			}
			if (p->in_fd >= 0 && (p->in_q.len > p->in_q_off || p->in_eof)) {
				pfd[n] = (struct pollfd){ .fd = p->in_fd, .events = POLLOUT };
				owner[n] = p;
				kind[n++] = K_IN;
			}
		}
		for (struct pstream *s = a->streams; s && a->chan_up; s = s->next) {
			short ev = port_events(a, s);
			if (!ev)
				continue;   /* not even for POLLHUP: it would spin */
			pfd[n] = (struct pollfd){ .fd = s->fd, .events = ev };
			owner[n] = s;
			kind[n++] = K_PORT;
		}
		/* Watches are read only while the channel keeps up: a host
		 * that does not read lets the kernel's queue overflow. */
		for (struct gwatch *w = a->watches; w && a->chan_up && room; w = watch_next(w)) {
			pfd[n] = (struct pollfd){ .fd = watch_fd(w), .events = POLLIN };
			owner[n] = w;
			kind[n++] = K_WATCH;
		}
		/* Downloads left after file_pump_downloads wait for POLLOUT. */
		timeout = proc_next_timeout(a);
		if (a->vm_port && !a->chan_up) {
			uint64_t now = now_ms();
			int left = a->next_probe_ms > now ? (int)(a->next_probe_ms - now) : 0;
			if (timeout < 0 || left < timeout)
				timeout = left;
		}

		int r = poll(pfd, n, timeout);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "airlock-guest: poll: %s\n", strerror(errno));
			break;
		}
		for (size_t i = 0; i < n; i++) {
			short re = pfd[i].revents;
			if (!re)
				continue;
			switch (kind[i]) {
			case K_SIG:
				handle_signals(a);
				break;
			case K_CHAN:
				if (re & POLLOUT)
					agent_flush(a);
				if (re & POLLIN)
					chan_read(a);
				else if (re & (POLLHUP | POLLERR | POLLNVAL))
					chan_down(a, "hangup");
				break;
			case K_OUT0:
			case K_OUT1:
				proc_read_output(a, owner[i], kind[i] == K_OUT1, false);
				break;
			case K_IN:
				proc_write_stdin(a, owner[i]);
				break;
			case K_PORT:
				/* An earlier entry of this round (a CLOSE from
				 * the host, the channel going down) may have
				 * freed it; the fd check guards against a new
				 * stream at the same address. */
				if (port_alive(a, owner[i]) &&
				    ((struct pstream *)owner[i])->fd == pfd[i].fd)
					port_io(a, owner[i], re);
				break;
			case K_WATCH:
				if (watch_alive(a, owner[i]) && watch_fd(owner[i]) == pfd[i].fd)
					watch_io(a, owner[i]);
				break;
			}
		}
		if (a->vm_port && !a->chan_up && (a->port_event || now_ms() >= a->next_probe_ms))
			port_probe(a);
	}
	proc_kill_all(a);
	free(pfd);
	free(owner);
	free(kind);
	free(a->iobuf);
	return 0;
}
