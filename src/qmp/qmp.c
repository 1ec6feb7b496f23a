/* qmp.c - QMP client: line framing, message parsing, command/reply matching.
 *
 * Every byte read here comes from a QEMU process that runs guest code and is
 * parsed as untrusted: lines are bounded (QMP_MAX_LINE), parsed with the
 * limited JSON parser, and classified strictly by qmp_parse_msg. */
#include "qmp.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../lib/util.h"

struct qmp {
	int fd;
	struct buf in;             /* bytes read but not yet consumed */
	int64_t next_id;
	/* The last events, oldest first: name, "data" (owned or NULL), and
	 * whether qmp_wait_event already handed it out. */
	char events[QMP_KEEP_EVENTS][64];
	json *event_data[QMP_KEEP_EVENTS];
	bool event_taken[QMP_KEEP_EVENTS];
	const char *event_ptrs[QMP_KEEP_EVENTS];
	size_t nevents;
};

static void copy_cut(char *dst, size_t cap, const char *s)
{
	snprintf(dst, cap, "%s", s ? s : "");
}

void qmp_msg_free(struct qmp_msg *m)
{
	if (!m)
		return;
	json_free(m->val);
	memset(m, 0, sizeof(*m));
}

int qmp_parse_msg(const char *line, size_t len, struct qmp_msg *m, err_t *err)
{
	const json *v;
	json *j;

	memset(m, 0, sizeof(*m));
	if (len > QMP_MAX_LINE)
		return err_set(err, EPROTO, "qmp: line of %zu bytes is too long", len);
	if (!(j = json_parse(line, len, err)))
		return err_wrap(err, "qmp: bad json"), -EPROTO;
	if (j->type != JSON_OBJ) {
		json_free(j);
		return err_set(err, EPROTO, "qmp: message is not an object");
	}
	m->val = j;
	if ((v = json_get(j, "id"))) {
		if (v->type != JSON_NUM || !v->is_int) {
			qmp_msg_free(m);
			return err_set(err, EPROTO, "qmp: id is not an integer");
		}
		m->has_id = true;
		m->id = v->i;
	}
	if ((v = json_get(j, "QMP"))) {
		if (v->type != JSON_OBJ)
			goto bad;
		m->type = QMP_MSG_GREETING;
	} else if ((v = json_get(j, "return"))) {
		m->type = QMP_MSG_RETURN;
		m->ret = v;
	} else if ((v = json_get(j, "error"))) {
		const char *cls = json_get_str(v, "class"), *desc = json_get_str(v, "desc");
		if (v->type != JSON_OBJ || !cls)
			goto bad;
		m->type = QMP_MSG_ERROR;
		copy_cut(m->err_class, sizeof(m->err_class), cls);
		copy_cut(m->err_desc, sizeof(m->err_desc), desc);
	} else if ((v = json_get(j, "event"))) {
		if (v->type != JSON_STR)
			goto bad;
		m->type = QMP_MSG_EVENT;
		copy_cut(m->event, sizeof(m->event), v->str);
	} else {
		goto bad;
	}
	return 0;
bad:
	qmp_msg_free(m);
	return err_set(err, EPROTO, "qmp: unknown message shape");
}

/* Wait for one full line and parse it. */
static int read_msg(struct qmp *q, uint64_t deadline, struct qmp_msg *m, err_t *err)
{
	for (;;) {
		char *nl = q->in.len ? memchr(q->in.data, '\n', q->in.len) : NULL;
		if (nl) {
			size_t len = (size_t)(nl - q->in.data), rest;
			int r;
			if (len && q->in.data[len - 1] == '\r')
				len--;
			r = len ? qmp_parse_msg(q->in.data, len, m, err) : 1;
			rest = q->in.len - (size_t)(nl + 1 - q->in.data);
			memmove(q->in.data, nl + 1, rest);
			q->in.len = rest;
			q->in.data[rest] = '\0';
			if (r == 1)
				continue;  /* empty line */
			return r;
		}
		if (q->in.len > QMP_MAX_LINE)
			return err_set(err, EPROTO, "qmp: line longer than %u bytes", QMP_MAX_LINE);

		uint64_t now = now_ms();
		if (now >= deadline)
			return err_set(err, ETIMEDOUT, "qmp: timed out waiting for QEMU");
		struct pollfd pfd = { .fd = q->fd, .events = POLLIN };
		int pr = poll(&pfd, 1, (int)(deadline - now));
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr < 0)
			return err_sys(err, "qmp: poll");
		if (pr == 0)
			continue;
		char tmp[8192];
		ssize_t n = read(q->fd, tmp, sizeof(tmp));
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
			return err_sys(err, "qmp: read");
		if (n == 0)
			return err_set(err, EPIPE, "qmp: QEMU closed the connection");
		buf_add(&q->in, tmp, (size_t)n);
	}
}

/* Keep an event; takes its "data" out of m. */
static void keep_event(struct qmp *q, struct qmp_msg *m)
{
	size_t i;

	if (q->nevents == QMP_KEEP_EVENTS) {
		json_free(q->event_data[0]);
		memmove(q->events[0], q->events[1], sizeof(q->events[0]) * (QMP_KEEP_EVENTS - 1));
		memmove(q->event_data, q->event_data + 1,
			sizeof(q->event_data[0]) * (QMP_KEEP_EVENTS - 1));
		memmove(q->event_taken, q->event_taken + 1,
			sizeof(q->event_taken[0]) * (QMP_KEEP_EVENTS - 1));
		q->nevents--;
	}
	i = q->nevents++;
	copy_cut(q->events[i], sizeof(q->events[0]), m->event);
	q->event_data[i] = NULL;
	q->event_taken[i] = false;
	for (size_t k = 0; k < m->val->n; k++)
		if (!strcmp(m->val->keys[k], "data")) {
			q->event_data[i] = m->val->items[k];
			m->val->items[k] = NULL;
			break;
		}
}

static int take_event(struct qmp *q, const char *name, json **data)
{
	for (size_t i = 0; i < q->nevents; i++)
		if (!q->event_taken[i] && !strcmp(q->events[i], name)) {
			q->event_taken[i] = true;
			if (data) {
				*data = q->event_data[i];
				q->event_data[i] = NULL;
			}
			return 1;
		}
	return 0;
}

int qmp_wait_event(struct qmp *q, const char *name, int timeout_ms, json **data, err_t *err)
{
	uint64_t deadline = now_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
	int r;

	if (data)
		*data = NULL;
	while (!take_event(q, name, data)) {
		struct qmp_msg m;
		if ((r = read_msg(q, deadline, &m, err)) < 0)
			return err_wrap(err, "waiting for event %s", name);
		if (m.type == QMP_MSG_EVENT)
			keep_event(q, &m);
		qmp_msg_free(&m);
	}
	return 0;
}

size_t qmp_events(const struct qmp *q, const char *const **names)
{
	struct qmp *mq = (struct qmp *)q;

	for (size_t i = 0; i < q->nevents; i++)
		mq->event_ptrs[i] = mq->events[i];
	*names = mq->event_ptrs;
	return q->nevents;
}

bool qmp_saw_event(const struct qmp *q, const char *name)
{
	for (size_t i = 0; i < q->nevents; i++)
		if (!strcmp(q->events[i], name))
			return true;
	return false;
}

static int send_line(struct qmp *q, const char *s, int pass_fd, err_t *err)
{
	size_t len = strlen(s);
	struct iovec iov = { .iov_base = (void *)s, .iov_len = len };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (pass_fd >= 0) {
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = sizeof(u.buf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
	}
	/* The fd rides on the first byte; write the rest normally. */
	do
		n = sendmsg(q->fd, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return err_sys(err, "qmp: send");
	if ((size_t)n < len && write_all(q->fd, s + n, len - (size_t)n) < 0)
		return err_sys(err, "qmp: send");
	return 0;
}

int qmp_exec(struct qmp *q, const char *cmd, const char *args_json, int pass_fd,
	     int timeout_ms, json **ret, err_t *err)
{
	uint64_t deadline = now_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
	int64_t id = q->next_id++;
	struct buf b;
	struct jw w;
	int r;

	if (ret)
		*ret = NULL;
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "execute");
	jw_str(&w, cmd);
	if (args_json) {
		jw_key(&w, "arguments");
		jw_raw(&w, args_json);
	}
	jw_key(&w, "id");
	jw_int(&w, id);
	jw_end(&w);
	buf_adds(&b, "\n");
	r = send_line(q, b.data, pass_fd, err);
	buf_free(&b);
	if (r < 0)
		return r;

	for (;;) {
		struct qmp_msg m;
		if ((r = read_msg(q, deadline, &m, err)) < 0)
			return err_wrap(err, "%s", cmd);
		if (m.type == QMP_MSG_EVENT) {
			keep_event(q, &m);
			qmp_msg_free(&m);
			continue;
		}
		if (m.type == QMP_MSG_GREETING || !m.has_id || m.id != id) {
			/* A reply to nothing we asked (or a stale one): ignore. */
			qmp_msg_free(&m);
			continue;
		}
		if (m.type == QMP_MSG_ERROR) {
			r = err_set(err, EREMOTEIO, "%s: %s: %s", cmd, m.err_class, m.err_desc);
			qmp_msg_free(&m);
			return r;
		}
		if (ret) {
			/* Detach the return value from the message. */
			json *whole = m.val;
			for (size_t i = 0; i < whole->n; i++)
				if (whole->items[i] == m.ret) {
					*ret = whole->items[i];
					whole->items[i] = NULL;
					break;
				}
		}
		qmp_msg_free(&m);
		return 0;
	}
}

int qmp_open_fd(int fd, int timeout_ms, struct qmp **out, err_t *err)
{
	struct qmp *q = xcalloc(1, sizeof(*q));
	struct qmp_msg m;
	int r;

	q->fd = fd;
	q->next_id = 1;
	buf_init(&q->in);
	buf_add(&q->in, "", 0);
	if ((r = read_msg(q, now_ms() + (uint64_t)timeout_ms, &m, err)) < 0)
		goto fail;
	if (m.type != QMP_MSG_GREETING) {
		qmp_msg_free(&m);
		r = err_set(err, EPROTO, "qmp: expected the greeting");
		goto fail;
	}
	qmp_msg_free(&m);
	if ((r = qmp_exec(q, "qmp_capabilities", NULL, -1, timeout_ms, NULL, err)) < 0)
		goto fail;
	*out = q;
	return 0;
fail:
	qmp_close(q);
	return r;
}

int qmp_connect(const char *path, int timeout_ms, struct qmp **out, err_t *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	uint64_t deadline = now_ms() + (uint64_t)timeout_ms;

	if (strlen(path) >= sizeof(sa.sun_path))
		return err_set(err, ENAMETOOLONG, "qmp socket path too long: %s", path);
	strcpy(sa.sun_path, path);
	for (;;) {
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return err_sys(err, "socket");
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			uint64_t now = now_ms();
			return qmp_open_fd(fd, now < deadline ? (int)(deadline - now) : 1, out, err);
		}
		int e = errno;
		close(fd);
		if ((e != ENOENT && e != ECONNREFUSED) || now_ms() >= deadline) {
			errno = e;
			return err_sys(err, "qmp: connect %s", path);
		}
		usleep(2000);
	}
}

void qmp_close(struct qmp *q)
{
	if (!q)
		return;
	if (q->fd >= 0)
		close(q->fd);
	for (size_t i = 0; i < q->nevents; i++)
		json_free(q->event_data[i]);
	buf_free(&q->in);
	free(q);
}
