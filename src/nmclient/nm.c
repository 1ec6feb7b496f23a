/* nm.c - client of the node manager: one connection per call. */
#include "nm.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "../lib/log.h"
#include "../lib/util.h"
#include "wire.h"

/* nm_last_from_pool: per thread, as the node serves one request a thread */
static __thread bool last_from_pool;

bool nm_last_from_pool(void)
{
	return last_from_pool;
}

static int nm_connect(const char *sock, err_t *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(sock) >= sizeof(sa.sun_path))
		return err_set(err, ENAMETOOLONG, "nodemgr socket path too long");
	strcpy(sa.sun_path, sock);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return err_sys(err, "socket");
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int r = err_sys(err, "connect to nodemgr at %s", sock);
		close(fd);
		return r;
	}
	return fd;
}

static void req_init(struct nm_req *q, enum nm_verb verb)
{
	memset(q, 0, sizeof(*q));
	q->magic = NM_WIRE_MAGIC;
	q->version = NM_WIRE_VERSION;
	q->verb = verb;
	/* the log's id of the request this thread serves (already checked) */
	snprintf(q->request_id, sizeof(q->request_id), "%s", log_request_id());
}

/* Copy s into a fixed wire field; refuse (rather than cut) what does not fit. */
static int put_str(char *dst, size_t cap, const char *s, const char *what, err_t *err)
{
	if (!s || strlen(s) >= cap)
		return err_set(err, EINVAL, "%s too long or missing", what);
	memcpy(dst, s, strlen(s) + 1);
	return 0;
}

/* Send q, then read replies: ITEMs go to items (if not NULL), PROGRESS lines
 * to progress, until the RESULT, which is left in *res (with its fd). */
/* Wait until s has a reply to read, or cancel_fd (when >= 0) is readable:
 * -ECANCELED then. */
static int wait_reply(int s, int cancel_fd)
{
	struct pollfd pf[2] = { { .fd = s, .events = POLLIN }, { .fd = cancel_fd, .events = POLLIN } };

	if (cancel_fd < 0)
		return 0;
	for (;;) {
		if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (pf[1].revents)
			return -ECANCELED;
		if (pf[0].revents)
			return 0;
	}
}

/* cancel_fd: when it becomes readable the call is abandoned and the socket
 * closed, which nodemgr sees as the client going away (a template build is
 * then stopped). */
static int nm_call_full(const char *sock, const struct nm_req *q, int in_fd, struct nm_resp *res,
			int *fd, char ***items, void (*progress)(void *, const char *), void *arg,
			int timeout_ms, int cancel_fd, err_t *err)
{
	_cleanup_close_ int s = nm_connect(sock, err);
	size_t n = 0, cap = 0;
	char **list = NULL;
	int r;

	if (fd)
		*fd = -1;
	if (s < 0)
		return s;
	if (timeout_ms > 0) {
		/* wire_send/wire_recv block in sendmsg/recvmsg: these bound them */
		struct timeval tv = { .tv_sec = timeout_ms / 1000,
				      .tv_usec = (timeout_ms % 1000) * 1000 };
		setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	}
	if ((r = wire_send(s, q, sizeof(*q), in_fd)) < 0) {
		errno = -r;
		return err_sys(err, "send to nodemgr");
	}
	for (;;) {
		int rfd = -1;
		if ((r = wait_reply(s, cancel_fd)) < 0) {
			r = err_set(err, -r, r == -ECANCELED ? "cancelled" : "wait for nodemgr");
			goto fail;
		}
		if ((r = wire_recv(s, res, sizeof(*res), &rfd)) < 0) {
			errno = -r;
			r = err_sys(err, "receive from nodemgr");
			goto fail;
		}
		res->text[sizeof(res->text) - 1] = '\0';
		res->addr[sizeof(res->addr) - 1] = '\0';
		if (res->magic != NM_WIRE_MAGIC || res->version != NM_WIRE_VERSION) {
			if (rfd >= 0)
				close(rfd);
			r = err_set(err, EPROTO, "nodemgr: bad reply");
			goto fail;
		}
		if (res->type == NM_MSG_RESULT) {
			if (res->code != 0) {
				if (rfd >= 0)
					close(rfd);
				r = err_set(err, res->code, "nodemgr: %s", res->text);
				goto fail;
			}
			if (fd)
				*fd = rfd;
			else if (rfd >= 0)
				close(rfd);
			break;
		}
		if (rfd >= 0)
			close(rfd);
		if (res->type == NM_MSG_PROGRESS && progress)
			progress(arg, res->text);
		else if (res->type == NM_MSG_ITEM && items) {
			if (n + 2 > cap) {
				cap = cap ? cap * 2 : 16;
				list = xrealloc(list, cap * sizeof(*list));
			}
			list[n++] = xstrdup(res->text);
			list[n] = NULL;
		}
	}
	if (items) {
		if (!list)
			list = xcalloc(1, sizeof(*list));
		*items = list;
	}
	return 0;
fail:
	for (size_t i = 0; i < n; i++)
		free(list[i]);
	free(list);
	return r;
}

static int nm_call(const char *sock, const struct nm_req *q, struct nm_resp *res, int *fd,
		   char ***items, void (*progress)(void *, const char *), void *arg, err_t *err)
{
	return nm_call_full(sock, q, -1, res, fd, items, progress, arg, -1, -1, err);
}

/* What a reply that started a sandbox carries besides the channel. */
static void started(const struct nm_resp *res, pid_t *pid, char addr[16])
{
	if (pid)
		*pid = res->pid;
	if (addr)
		snprintf(addr, 16, "%s", res->addr);
}

int nm_sandbox_create(const char *sock, const struct nm_sandbox_spec *spec, int *chan_fd,
		      pid_t *pid, char addr[16], err_t *err)
{
	struct nm_req q;
	struct nm_resp res;
	int r;

	req_init(&q, NM_SANDBOX_CREATE);
	q.u.create = *spec;
	if ((r = nm_call(sock, &q, &res, chan_fd, NULL, NULL, NULL, err)) < 0)
		return err_wrap(err, "create sandbox %.64s", spec->id);
	if (*chan_fd < 0)
		return err_set(err, EPROTO, "create sandbox %.64s: no channel fd", spec->id);
	started(&res, pid, addr);
	last_from_pool = res.from_pool != 0;
	return 0;
}

int nm_sandbox_adopt(const char *sock, const char *id, int *chan_fd, pid_t *pid, char addr[16],
		     err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	req_init(&q, NM_SANDBOX_ADOPT);
	if (put_str(q.u.sandbox.id, sizeof(q.u.sandbox.id), id, "sandbox id", err) < 0)
		return -EINVAL;
	if (nm_call(sock, &q, &res, chan_fd, NULL, NULL, NULL, err) < 0)
		return err_wrap(err, "adopt sandbox %s", id);
	if (*chan_fd < 0)
		return err_set(err, EPROTO, "adopt sandbox %s: no channel fd", id);
	started(&res, pid, addr);
	return 0;
}

int nm_vm_console(const char *sock, const char *id, int *fd, err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	*fd = -1;
	req_init(&q, NM_VM_CONSOLE);
	if (put_str(q.u.sandbox.id, sizeof(q.u.sandbox.id), id, "sandbox id", err) < 0)
		return -EINVAL;
	if (nm_call(sock, &q, &res, fd, NULL, NULL, NULL, err) < 0)
		return err_wrap(err, "console of sandbox %s", id);
	if (*fd < 0)
		return err_set(err, EPROTO, "console of sandbox %s: no fd", id);
	return 0;
}

int nm_sandbox_destroy(const char *sock, const char *id, err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	req_init(&q, NM_SANDBOX_DESTROY);
	if (put_str(q.u.sandbox.id, sizeof(q.u.sandbox.id), id, "sandbox id", err) < 0)
		return -EINVAL;
	if (nm_call(sock, &q, &res, NULL, NULL, NULL, NULL, err) < 0)
		return err_wrap(err, "destroy sandbox %s", id);
	return 0;
}

int nm_sandbox_freeze(const char *sock, const char *id, bool freeze, err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	req_init(&q, freeze ? NM_SANDBOX_FREEZE : NM_SANDBOX_THAW);
	if (put_str(q.u.sandbox.id, sizeof(q.u.sandbox.id), id, "sandbox id", err) < 0)
		return -EINVAL;
	if (nm_call(sock, &q, &res, NULL, NULL, NULL, NULL, err) < 0)
		return err_wrap(err, "%s sandbox %s", freeze ? "freeze" : "thaw", id);
	return 0;
}

int nm_sandbox_list(const char *sock, char ***ids, err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	req_init(&q, NM_SANDBOX_LIST);
	return nm_call(sock, &q, &res, NULL, ids, NULL, NULL, err);
}

int nm_template_build(const char *sock, const struct nm_template_spec *spec, int cancel_fd,
		      void (*progress)(void *arg, const char *line), void *arg, err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	req_init(&q, NM_TEMPLATE_BUILD);
	q.u.build = *spec;
	if (nm_call_full(sock, &q, -1, &res, NULL, NULL, progress, arg, -1, cancel_fd, err) < 0)
		return err_wrap(err, "build template %.64s/%u", spec->name, spec->version);
	return 0;
}

int nm_template_delete(const char *sock, const char *name, uint32_t version, err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	req_init(&q, NM_TEMPLATE_DELETE);
	if (put_str(q.u.tmpl.name, sizeof(q.u.tmpl.name), name, "template name", err) < 0)
		return -EINVAL;
	q.u.tmpl.version = version;
	if (nm_call(sock, &q, &res, NULL, NULL, NULL, NULL, err) < 0)
		return err_wrap(err, "delete template %s/%u", name, version);
	return 0;
}

int nm_template_config(const char *sock, const char *name, uint32_t version, char **json_text,
		       err_t *err)
{
	struct nm_req q;
	struct nm_resp res;
	char **items = NULL;
	struct buf b;

	*json_text = NULL;
	req_init(&q, NM_TEMPLATE_CONFIG);
	if (put_str(q.u.tmpl.name, sizeof(q.u.tmpl.name), name, "template name", err) < 0)
		return -EINVAL;
	q.u.tmpl.version = version;
	if (nm_call(sock, &q, &res, NULL, &items, NULL, NULL, err) < 0)
		return err_wrap(err, "config of template %s/%u", name, version);
	/* ITEM pieces of at most sizeof(text) - 1 bytes; none: no config */
	buf_init(&b);
	for (size_t i = 0; items && items[i]; i++) {
		if (b.len <= NM_TEMPLATE_CONFIG_MAX)
			buf_adds(&b, items[i]);
		free(items[i]);
	}
	free(items);
	if (b.len > NM_TEMPLATE_CONFIG_MAX) {
		buf_free(&b);
		return err_set(err, EFBIG, "config of template %s/%u is too big", name, version);
	}
	if (b.len)
		*json_text = buf_steal(&b);
	buf_free(&b);
	return 0;
}

int nm_template_list(const char *sock, char ***out, err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	req_init(&q, NM_TEMPLATE_LIST);
	return nm_call(sock, &q, &res, NULL, out, NULL, NULL, err);
}

int nm_node_info(const char *sock, struct nm_node_info *out, err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	req_init(&q, NM_NODE_INFO);
	if (nm_call(sock, &q, &res, NULL, NULL, NULL, NULL, err) < 0)
		return -err->code;
	*out = res.info;
	out->cgroup_mode[sizeof(out->cgroup_mode) - 1] = '\0';
	return 0;
}

int nm_doctor(const char *sock, const char *default_backend, char **json_text, err_t *err)
{
	struct nm_req q;
	struct nm_resp res;
	char **items = NULL;
	struct buf b;

	*json_text = NULL;
	req_init(&q, NM_DOCTOR);
	if (put_str(q.u.doctor.backend, sizeof(q.u.doctor.backend), default_backend, "backend",
		    err) < 0)
		return -err->code;
	if (nm_call(sock, &q, &res, NULL, &items, NULL, NULL, err) < 0)
		return -err->code;
	/* the report comes in ITEM pieces of at most sizeof(text) - 1 bytes */
	buf_init(&b);
	for (size_t i = 0; items[i]; i++) {
		buf_adds(&b, items[i]);
		free(items[i]);
	}
	free(items);
	buf_addc(&b, '\0');
	*json_text = buf_steal(&b);
	return 0;
}

int nm_pool_levels(const char *sock, char ***out, err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	req_init(&q, NM_POOL_LEVELS);
	return nm_call(sock, &q, &res, NULL, out, NULL, NULL, err);
}

int nm_sandbox_stats(const char *sock, const char *id, struct nm_sandbox_stats *out,
		     err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	req_init(&q, NM_SANDBOX_STATS);
	if (put_str(q.u.sandbox.id, sizeof(q.u.sandbox.id), id, "sandbox id", err) < 0)
		return -EINVAL;
	if (nm_call(sock, &q, &res, NULL, NULL, NULL, NULL, err) < 0)
		return -err->code;
	*out = res.stats;
	return 0;
}

int nm_sandbox_limits(const char *sock, const char *id, struct nm_limit_hits **out, size_t *n,
		      err_t *err)
{
	struct nm_req q;
	struct nm_resp res;
	char **items = NULL;
	size_t k = 0, cnt = 0;

	*out = NULL;
	*n = 0;
	req_init(&q, NM_SANDBOX_LIMITS);
	if (id && put_str(q.u.sandbox.id, sizeof(q.u.sandbox.id), id, "sandbox id", err) < 0)
		return -EINVAL;
	if (nm_call(sock, &q, &res, NULL, &items, NULL, NULL, err) < 0)
		return -err->code;
	while (items[cnt])
		cnt++;
	*out = xcalloc(cnt ? cnt : 1, sizeof(**out));
	/* nodemgr's own text: "<id> <gen> <oom_kills> <pids_max> <gone> <signal>" */
	for (size_t i = 0; i < cnt; i++) {
		struct nm_limit_hits *h = &(*out)[k];
		int gone = 0;

		if (sscanf(items[i], "%64s %" SCNu64 " %" SCNu64 " %" SCNu64 " %d %d", h->id, &h->gen,
			   &h->oom_kills, &h->pids_max, &gone, &h->init_signal) == 6) {
			h->init_gone = gone != 0;
			k++;
		}
		free(items[i]);
	}
	free(items);
	*n = k;
	return 0;
}

int nm_ping(const char *sock, int timeout_ms, err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	/* NODE_INFO is cheap (sysinfo, statvfs) and answered on its own thread */
	req_init(&q, NM_NODE_INFO);
	if (nm_call_full(sock, &q, -1, &res, NULL, NULL, NULL, NULL, timeout_ms, -1, err) < 0)
		return err->code == EAGAIN ? err_set(err, ETIMEDOUT, "nodemgr: no answer within %d ms",
						     timeout_ms)
					   : -err->code;
	return 0;
}

int nm_vm_create(const char *sock, const struct nm_sandbox_spec *spec, uint32_t mode,
		 int *chan_fd, pid_t *pid, char addr[16], err_t *err)
{
	struct nm_req q;
	struct nm_resp res;
	int r;

	req_init(&q, NM_VM_CREATE);
	q.u.vm.spec = *spec;
	q.u.vm.mode = mode;
	if ((r = nm_call(sock, &q, &res, chan_fd, NULL, NULL, NULL, err)) < 0)
		return r;
	if (*chan_fd < 0)
		return err_set(err, EPROTO, "create vm %.64s: no channel fd", spec->id);
	started(&res, pid, addr);
	last_from_pool = res.from_pool != 0;
	return 0;
}

int nm_vm_template_save(const char *sock, const struct nm_sandbox_spec *spec, bool discard,
			err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	req_init(&q, NM_VM_TEMPLATE_SAVE);
	q.u.vm.spec = *spec;
	q.u.vm.mode = discard;
	if (nm_call(sock, &q, &res, NULL, NULL, NULL, NULL, err) < 0)
		return err_wrap(err, "save template vm %.64s/%u", spec->template_name,
				spec->template_version);
	return 0;
}

int nm_snapshot_create(const char *sock, const char *id, const char *snap, const char *prev,
		       int64_t *size, err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	req_init(&q, NM_SNAPSHOT_CREATE);
	if (put_str(q.u.snap.spec.id, sizeof(q.u.snap.spec.id), id, "sandbox id", err) < 0 ||
	    put_str(q.u.snap.snap, sizeof(q.u.snap.snap), snap, "snapshot id", err) < 0 ||
	    put_str(q.u.snap.prev, sizeof(q.u.snap.prev), prev ? prev : "", "snapshot id", err) < 0)
		return -EINVAL;
	if (nm_call(sock, &q, &res, NULL, NULL, NULL, NULL, err) < 0)
		return err_wrap(err, "snapshot sandbox %s", id);
	*size = res.size;
	return 0;
}

int nm_snapshot_create_full(const char *sock, const char *id, const char *snap,
			    const char *prev, int64_t *size, err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	req_init(&q, NM_SNAPSHOT_CREATE);
	q.u.snap.full = 1;
	if (put_str(q.u.snap.spec.id, sizeof(q.u.snap.spec.id), id, "sandbox id", err) < 0 ||
	    put_str(q.u.snap.snap, sizeof(q.u.snap.snap), snap, "snapshot id", err) < 0 ||
	    put_str(q.u.snap.prev, sizeof(q.u.snap.prev), prev ? prev : "", "snapshot id", err) < 0)
		return -EINVAL;
	if (nm_call(sock, &q, &res, NULL, NULL, NULL, NULL, err) < 0)
		return err_wrap(err, "full snapshot of sandbox %s", id);
	*size = res.size;
	return 0;
}

int nm_snapshot_create_memory(const char *sock, const char *id, const char *snap,
			      int64_t *size, err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	req_init(&q, NM_SNAPSHOT_CREATE);
	q.u.snap.full = 3;
	if (put_str(q.u.snap.spec.id, sizeof(q.u.snap.spec.id), id, "sandbox id", err) < 0 ||
	    put_str(q.u.snap.snap, sizeof(q.u.snap.snap), snap, "snapshot id", err) < 0)
		return -EINVAL;
	if (nm_call(sock, &q, &res, NULL, NULL, NULL, NULL, err) < 0)
		return err_wrap(err, "memory snapshot of sandbox %s", id);
	*size = res.size;
	return 0;
}

int nm_snapshot_create_fork(const char *sock, const struct nm_sandbox_spec *spec,
			    const char *snap, int64_t *size, err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	req_init(&q, NM_SNAPSHOT_CREATE);
	q.u.snap.full = 2;
	q.u.snap.spec = *spec;
	if (put_str(q.u.snap.snap, sizeof(q.u.snap.snap), snap, "snapshot id", err) < 0)
		return -EINVAL;
	if (nm_call(sock, &q, &res, NULL, NULL, NULL, NULL, err) < 0)
		return err_wrap(err, "fork snapshot of sandbox %s", spec->id);
	*size = res.size;
	return 0;
}

int nm_snapshot_delete(const char *sock, const char *id, const char *snap, err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	req_init(&q, NM_SNAPSHOT_DELETE);
	if (put_str(q.u.snap.spec.id, sizeof(q.u.snap.spec.id), id, "sandbox id", err) < 0 ||
	    put_str(q.u.snap.snap, sizeof(q.u.snap.snap), snap, "snapshot id", err) < 0)
		return -EINVAL;
	if (nm_call(sock, &q, &res, NULL, NULL, NULL, NULL, err) < 0)
		return err_wrap(err, "delete snapshot %s of sandbox %s", snap, id);
	return 0;
}

int nm_sandbox_fork(const char *sock, const struct nm_sandbox_spec *spec, const char *parent,
		    const char *snap, bool vm, int *chan_fd, pid_t *pid, char addr[16],
		    err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	req_init(&q, NM_SANDBOX_FORK);
	q.u.snap.spec = *spec;
	q.u.snap.vm = vm;
	if (put_str(q.u.snap.snap, sizeof(q.u.snap.snap), snap, "snapshot id", err) < 0 ||
	    put_str(q.u.snap.prev, sizeof(q.u.snap.prev), parent, "sandbox id", err) < 0)
		return -EINVAL;
	if (nm_call(sock, &q, &res, chan_fd, NULL, NULL, NULL, err) < 0)
		return err_wrap(err, "fork sandbox %.64s", parent);
	if (*chan_fd < 0)
		return err_set(err, EPROTO, "fork sandbox %.64s: no channel fd", parent);
	started(&res, pid, addr);
	return 0;
}

int nm_sandbox_rollback(const char *sock, const struct nm_sandbox_spec *spec, const char *snap,
			int *chan_fd, pid_t *pid, err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	req_init(&q, NM_SANDBOX_ROLLBACK);
	q.u.snap.spec = *spec;
	if (put_str(q.u.snap.snap, sizeof(q.u.snap.snap), snap, "snapshot id", err) < 0)
		return -EINVAL;
	if (nm_call(sock, &q, &res, chan_fd, NULL, NULL, NULL, err) < 0)
		return err_wrap(err, "roll back sandbox %.64s", spec->id);
	if (*chan_fd < 0)
		return err_set(err, EPROTO, "roll back sandbox %.64s: no channel fd", spec->id);
	if (pid)
		*pid = res.pid;
	return 0;
}

static int xfer_req(struct nm_req *q, enum nm_verb verb, const struct nm_sandbox_spec *spec,
		    const char *snap, enum nm_artifact artifact, err_t *err)
{
	req_init(q, verb);
	q->u.xfer.spec = *spec;
	q->u.xfer.artifact = artifact;
	return put_str(q->u.xfer.snap, sizeof(q->u.xfer.snap), snap, "snapshot id", err);
}

int nm_suspend_export(const char *sock, const struct nm_sandbox_spec *spec, const char *snap,
		      enum nm_artifact artifact, int fd, int64_t *size, char base_sha[65],
		      err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	if (xfer_req(&q, NM_SUSPEND_EXPORT, spec, snap, artifact, err) < 0)
		return -EINVAL;
	if (base_sha && base_sha[0] &&
	    put_str(q.u.xfer.base, sizeof(q.u.xfer.base), base_sha, "memory base", err) < 0)
		return -EINVAL;
	if (base_sha)
		base_sha[0] = '\0';
	if (nm_call_full(sock, &q, fd, &res, NULL, NULL, NULL, NULL, -1, -1, err) < 0)
		return err_wrap(err, "export artifact %d of sandbox %s", (int)artifact, spec->id);
	*size = res.size;
	res.sha256[sizeof(res.sha256) - 1] = '\0';
	if (base_sha)
		memcpy(base_sha, res.sha256, sizeof(res.sha256));
	return 0;
}

int nm_suspend_import(const char *sock, const struct nm_sandbox_spec *spec, const char *snap,
		      enum nm_artifact artifact, int fd, const char *base_sha, err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	if (xfer_req(&q, NM_SUSPEND_IMPORT, spec, snap, artifact, err) < 0)
		return -EINVAL;
	if (base_sha && put_str(q.u.xfer.base, sizeof(q.u.xfer.base), base_sha, "memory base", err) < 0)
		return -EINVAL;
	if (nm_call_full(sock, &q, fd, &res, NULL, NULL, NULL, NULL, -1, -1, err) < 0)
		return err_wrap(err, "import artifact %d of sandbox %s", (int)artifact, spec->id);
	return 0;
}

static int base_req(struct nm_req *q, enum nm_verb verb, const struct nm_sandbox_spec *spec,
		    const char *sha, err_t *err)
{
	req_init(q, verb);
	if (spec)
		q->u.vmbase.spec = *spec;
	return sha ? put_str(q->u.vmbase.sha, sizeof(q->u.vmbase.sha), sha, "memory base", err) : 0;
}

int nm_vm_base_find(const char *sock, const struct nm_sandbox_spec *spec, const char *sha,
		    char out[65], uint64_t *size, err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	if (base_req(&q, NM_VM_BASE_FIND, spec, sha, err) < 0)
		return -EINVAL;
	if (nm_call(sock, &q, &res, NULL, NULL, NULL, NULL, err) < 0)
		return err_wrap(err, "find memory base");
	res.sha256[sizeof(res.sha256) - 1] = '\0';
	if (out)
		memcpy(out, res.sha256, sizeof(res.sha256));
	if (size)
		*size = res.base_size;
	return 0;
}

int nm_vm_base_export(const char *sock, const struct nm_sandbox_spec *spec, int fd, char sha[65],
		      uint64_t *size, int64_t *bytes, err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	if (base_req(&q, NM_VM_BASE_EXPORT, spec, NULL, err) < 0)
		return -EINVAL;
	if (nm_call_full(sock, &q, fd, &res, NULL, NULL, NULL, NULL, -1, -1, err) < 0)
		return err_wrap(err, "export the memory base of %.64s/%u", spec->template_name,
				spec->template_version);
	res.sha256[sizeof(res.sha256) - 1] = '\0';
	memcpy(sha, res.sha256, sizeof(res.sha256));
	*size = res.base_size;
	*bytes = res.size;
	return 0;
}

int nm_vm_base_import(const char *sock, const struct nm_sandbox_spec *spec, const char *sha,
		      int fd, err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	if (base_req(&q, NM_VM_BASE_IMPORT, spec, sha, err) < 0)
		return -EINVAL;
	if (nm_call_full(sock, &q, fd, &res, NULL, NULL, NULL, NULL, -1, -1, err) < 0)
		return err_wrap(err, "import memory base %.16s…", sha);
	return 0;
}

static int txfer_req(struct nm_req *q, enum nm_verb verb, const char *name, const char *uuid,
		     uint32_t version, err_t *err)
{
	req_init(q, verb);
	q->u.txfer.version = version;
	if (put_str(q->u.txfer.name, sizeof(q->u.txfer.name), name, "template name", err) < 0)
		return -EINVAL;
	if (uuid && put_str(q->u.txfer.uuid, sizeof(q->u.txfer.uuid), uuid, "template uuid", err) < 0)
		return -EINVAL;
	return 0;
}

int nm_template_export(const char *sock, const char *name, uint32_t version, int fd,
		       char uuid[37], int64_t *size, err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	uuid[0] = '\0';
	*size = -1;
	if (txfer_req(&q, NM_TEMPLATE_EXPORT, name, NULL, version, err) < 0)
		return -EINVAL;
	if (nm_call_full(sock, &q, fd, &res, NULL, NULL, NULL, NULL, -1, -1, err) < 0)
		return err_wrap(err, "export template %.64s/%u", name, version);
	res.uuid[sizeof(res.uuid) - 1] = '\0';
	memcpy(uuid, res.uuid, sizeof(res.uuid));
	*size = res.size;
	return 0;
}

int nm_template_find(const char *sock, const char *name, const char *uuid, uint32_t *version,
		     err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	if (txfer_req(&q, NM_TEMPLATE_FIND, name, uuid, 0, err) < 0)
		return -EINVAL;
	if (nm_call(sock, &q, &res, NULL, NULL, NULL, NULL, err) < 0)
		return err_wrap(err, "find template %.64s %.36s", name, uuid);
	*version = res.tmpl_version;
	return 0;
}

int nm_template_import(const char *sock, const char *name, const char *uuid,
		       uint32_t min_version, int fd, uint32_t *version, err_t *err)
{
	struct nm_req q;
	struct nm_resp res;

	if (txfer_req(&q, NM_TEMPLATE_IMPORT, name, uuid, min_version, err) < 0)
		return -EINVAL;
	if (nm_call_full(sock, &q, fd, &res, NULL, NULL, NULL, NULL, -1, -1, err) < 0)
		return err_wrap(err, "import template %.64s %.36s", name, uuid);
	*version = res.tmpl_version;
	return 0;
}
