/* template.c - template build, delete, list.
 *
 * templates/<name>/<ver> is a subvolume; a build runs
 * scripts/template-build.sh into its rootfs/ and, on success, makes it
 * read-only. Read-only therefore means complete: list shows only those, and
 * a sandbox can only be created from a finished template. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../lib/log.h"
#include "../../lib/util.h"
#include "../../pool/pool.h"
#include "../core/nodemgr-internal.h"
#include "templates.h"

/* How long a cancelled builder has after SIGTERM before SIGKILL. */
#define BUILD_TERM_MS 3000

static bool in_set(const char *s, const char *extra)
{
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || strchr(extra, *s)))
			return false;
	return true;
}

/* A host path for "dir"/"tar"/"oci": absolute, printable, no "." or ".."
 * components. Access itself is checked by the builder reading as the
 * requester (see template-build.sh). */
static bool valid_host_path(const char *p)
{
	if (p[0] != '/' || strlen(p) >= PATH_MAX)
		return false;
	for (const char *c = p; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			return false;
	for (const char *c = p; *c; c++)
		if (c[0] == '/' && c[1] == '.' &&
		    (c[2] == '/' || c[2] == '\0' || (c[2] == '.' && (c[3] == '/' || c[3] == '\0'))))
			return false;
	return true;
}

static int check_spec(const struct nm_template_spec *t, err_t *err)
{
	if (!mgr_valid_template_name(t->name, sizeof(t->name)))
		return err_set(err, EINVAL, "bad template name");
	if (!memchr(t->kind, '\0', sizeof(t->kind)) || !memchr(t->arg, '\0', sizeof(t->arg)) ||
	    !memchr(t->packages, '\0', sizeof(t->packages)))
		return err_set(err, EINVAL, "unterminated field");
	if (!in_set(t->packages, ".+,-"))
		return err_set(err, EINVAL, "bad package list");
	if (!strcmp(t->kind, "debian") || !strcmp(t->kind, "code")) {
		if (!t->arg[0] || strlen(t->arg) > 32 || !in_set(t->arg, "-"))
			return err_set(err, EINVAL, "bad debian suite");
	} else if (!strcmp(t->kind, "dir") || !strcmp(t->kind, "tar") || !strcmp(t->kind, "oci")) {
		if (!valid_host_path(t->arg))
			return err_set(err, EINVAL, "bad host path for %s", t->kind);
	} else if (strcmp(t->kind, "busybox")) {
		return err_set(err, EINVAL, "unknown template kind");
	}
	return 0;
}

/* The builder child: stdout+stderr into the pipe, own process group (so the
 * whole build can be killed), a clean environment and signal state. */
static __attribute__((noreturn)) void exec_builder(struct nm_server *s,
						   const struct nm_template_spec *t,
						   const char *out, int wfd, uid_t peer_uid)
{
	_cleanup_free_ char *script = xasprintf("%s/template-build.sh", s->cfg->scripts_dir);
	_cleanup_free_ char *ca = xasprintf("%s/ca.crt", s->cfg->data_dir);
	_cleanup_free_ char *caenv = xasprintf("AIRLOCK_CA_CERT=%s", ca);
	/* airlock-oci sits beside the guest agent (both are built and
	 * installed together): the image importer, and the finishing touches
	 * of every rootfs, done beneath it (src/oci/oci.h). */
	_cleanup_free_ char *gdir = xstrdup(s->cfg->guest_path);
	char *slash = strrchr(gdir, '/');
	_cleanup_free_ char *ocienv = NULL;
	char uidenv[64], gidenv[64];
	const char *envp[12];
	int n = 0, null = open("/dev/null", O_RDONLY);
	sigset_t none;

	setpgid(0, 0);
	if (null < 0 || dup2(null, 0) < 0 || dup2(wfd, 1) < 0 || dup2(wfd, 2) < 0)
		_exit(126);
	for (int sig = 1; sig < NSIG; sig++)
		signal(sig, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	envp[n++] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
	envp[n++] = "HOME=/root";
	envp[n++] = "LC_ALL=C.UTF-8";
	envp[n++] = "DEBIAN_FRONTEND=noninteractive";
	if (access(ca, R_OK) == 0)   /* the gateway's interception CA (cred/ca.h) */
		envp[n++] = caenv;
	if (slash) {
		*slash = '\0';
		ocienv = xasprintf("AIRLOCK_OCI_TOOL=%s/airlock-oci", gdir);
		if (access(ocienv + strlen("AIRLOCK_OCI_TOOL="), X_OK) == 0)
			envp[n++] = ocienv;
	}
	if (peer_uid != 0) {
		snprintf(uidenv, sizeof(uidenv), "AIRLOCK_SOURCE_UID=%u", (unsigned)s->cfg->client_uid);
		snprintf(gidenv, sizeof(gidenv), "AIRLOCK_SOURCE_GID=%u", (unsigned)s->cfg->client_gid);
		envp[n++] = uidenv;
		envp[n++] = gidenv;
	}
	envp[n] = NULL;
	const char *argv[] = { "/bin/sh", script, t->kind, t->arg[0] ? t->arg : "-", out,
			       t->packages, NULL };
	execve("/bin/sh", (char *const *)argv, (char *const *)envp);
	_exit(127);
}

/* The builder is done with, or the client gone: stop it, politely first (a
 * debootstrap-like tool cleans up its own mounts on SIGTERM), and read its
 * output to the end, which comes once every process holding the pipe is
 * gone. */
static void cancel_builder(int out_fd, pid_t pid)
{
	uint64_t kill_at = now_ms() + BUILD_TERM_MS;
	bool killed = false;
	char chunk[4096];

	kill(-pid, SIGTERM);
	for (;;) {
		struct pollfd pf = { .fd = out_fd, .events = POLLIN };
		ssize_t k;
		int n;

		if (!killed && now_ms() >= kill_at) {
			kill(-pid, SIGKILL);
			killed = true;
		}
		if (killed && now_ms() >= kill_at + BUILD_TERM_MS) {
			/* a process outside the group still holds the pipe */
			log_warn("template build (pid %d): output still open after SIGKILL", (int)pid);
			break;
		}
		if ((n = poll(&pf, 1, 100)) < 0 && errno != EINTR)
			break;
		if (n <= 0)
			continue;
		k = read(out_fd, chunk, sizeof(chunk));
		if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN))
			break;
	}
}

/* Stream each output line of the builder (cut at 1000 bytes) as progress
 * until it closes its end. The builder runs as root on host inputs the node
 * chose; its output is host data, not sandbox data. The client going away
 * cancels the build: a failed progress write, or a hang-up on its socket,
 * which is seen even while the builder prints nothing (the node hangs up
 * when it stops). Returns whether the client went away. */
static bool stream_build(int out_fd, int client_fd, pid_t pid, progress_fn progress, void *arg,
			 char *last, size_t last_sz)
{
	struct buf line;
	char chunk[4096];
	bool gone = false;

	buf_init(&line);
	while (!gone) {
		struct pollfd pf[2] = { { .fd = out_fd, .events = POLLIN },
					{ .fd = client_fd, .events = POLLRDHUP } };
		ssize_t n;

		if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pf[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
			gone = true;
			break;
		}
		if (!pf[0].revents)
			continue;
		n = read(out_fd, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		for (ssize_t i = 0; i < n && !gone; i++) {
			if (chunk[i] != '\n') {
				if (line.len < 1000)
					buf_addc(&line, chunk[i]);
				continue;
			}
			gone = progress(arg, line.data ? line.data : "") < 0;
			if (line.len)
				snprintf(last, last_sz, "%s", line.data);
			buf_reset(&line);
		}
	}
	if (gone) {
		log_info("template build (pid %d): the client went away; cancelling it", (int)pid);
		cancel_builder(out_fd, pid);
	} else if (line.len) {
		progress(arg, line.data);
		snprintf(last, last_sz, "%s", line.data);
	}
	buf_free(&line);
	return gone;
}

int tmpl_build(struct nm_server *s, const struct nm_template_spec *t, uid_t peer_uid,
	       int client_fd, progress_fn progress, void *arg, err_t *err)
{
	_cleanup_free_ char *namedir = NULL, *sub = NULL, *out = NULL;
	char last[300] = "";
	int p[2], st = 0, r;
	bool client_gone;
	pid_t pid;

	if (check_spec(t, err) < 0)
		return -err->code;
	namedir = xasprintf("%s/templates/%s", s->pool, t->name);
	sub = xasprintf("%s/%u", namedir, t->version);
	out = xasprintf("%s/rootfs", sub);
	if (mkdir(namedir, 0700) < 0 && errno != EEXIST)
		return err_sys(err, "mkdir %s", namedir);
	if (access(sub, F_OK) == 0)
		return err_set(err, EEXIST, "template %s/%u exists", t->name, t->version);
	if (pool_subvol_create(sub, err) < 0)
		return -err->code;
	if (pipe2(p, O_CLOEXEC) < 0) {
		r = err_sys(err, "pipe");
		goto fail;
	}
	pid = fork();
	if (pid < 0) {
		r = err_sys(err, "fork");
		close(p[0]);
		close(p[1]);
		goto fail;
	}
	if (pid == 0)
		exec_builder(s, t, out, p[1], peer_uid);
	close(p[1]);
	log_info("template %s/%u: building (%s), pid %d", t->name, t->version, t->kind, (int)pid);

	client_gone = stream_build(p[0], client_fd, pid, progress, arg, last, sizeof(last));
	close(p[0]);
	if ((r = mgr_wait_child(s, pid, &st, -1)) < 0) {
		err_set(err, -r, "wait for template builder");
		goto fail;
	}
	if (client_gone) {
		r = err_set(err, ECANCELED, "client went away");
		goto fail;
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		/* The builder's last line says why (airlock-oci's refusal names
		 * the layer and the entry); it is host data, see stream_build. */
		r = err_set(err, EIO, "template build failed (%s %d)%s%s",
			    WIFEXITED(st) ? "exit" : "signal",
			    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), last[0] ? ": " : "",
			    last);
		goto fail;
	}
	/* Received-uuid first (only a writable subvolume takes it): a suspended
	 * sandbox's disk stream is sent against this template and cloned from
	 * it on receive (pool_subvol_mark_received says why). */
	if ((r = pool_subvol_mark_received(sub, err)) < 0 ||
	    (r = pool_subvol_set_readonly(sub, true, err)) < 0)
		goto fail;
	log_info("template %s/%u: ready", t->name, t->version);
	/* Creates resolve to the newest version from now on. */
	mgr_template_retire_pools(s, t->name, t->version, true);
	return 0;
fail:
	{
		err_t e2 = { 0 };
		if (pool_subvol_delete(sub, &e2) < 0)
			log_warn("template %s/%u cleanup: %s", t->name, t->version, e2.msg);
		rmdir(namedir); /* only succeeds when no other version is left */
	}
	return r;
}

int tmpl_delete(struct nm_server *s, const char *name, uint32_t version, err_t *err)
{
	_cleanup_free_ char *namedir = xasprintf("%s/templates/%s", s->pool, name);
	_cleanup_free_ char *sub = xasprintf("%s/%u", namedir, version);

	/* Sandboxes are independent snapshots: deleting their template is safe.
	 * Jails and QEMUs waiting for it would never be asked for. */
	mgr_template_retire_pools(s, name, version, false);
	if (pool_subvol_delete(sub, err) < 0)
		return -err->code;
	/* The vm backend's memory snapshots of this version (vm-state.c). While a
	 * clone still maps one this fails with EBUSY; delete again later. */
	{
		_cleanup_free_ char *vmc = xasprintf("%s/%u.vm", namedir, version);
		if (pool_subvol_delete(vmc, err) < 0)
			return err_wrap(err, "vm snapshots of %s/%u", name, version);
	}
	rmdir(namedir);
	return 0;
}

int tmpl_config(struct nm_server *s, const char *name, uint32_t version, struct buf *out,
		err_t *err)
{
	_cleanup_free_ char *path = xasprintf("%s/templates/%s/%u/image.json", s->pool, name,
					      version);
	/* Written by airlock-oci beside rootfs/ (never inside it), in what is
	 * now a read-only subvolume: O_NOFOLLOW all the same. */
	_cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	char chunk[4096];
	ssize_t k;

	buf_reset(out);
	if (fd < 0)
		return errno == ENOENT ? 0 : err_sys(err, "open %s", path);
	while ((k = read(fd, chunk, sizeof(chunk))) != 0) {
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return err_sys(err, "read %s", path);
		if (out->len + (size_t)k > NM_TEMPLATE_CONFIG_MAX)
			return err_set(err, EFBIG, "%s is over %u bytes", path, NM_TEMPLATE_CONFIG_MAX);
		buf_add(out, chunk, (size_t)k);
	}
	if (out->len && memchr(out->data, '\0', out->len))
		return err_set(err, EINVAL, "%s holds a NUL byte", path);
	return 0;
}

void tmpl_each(struct nm_server *s, tmpl_entry_fn fn, void *arg)
{
	_cleanup_free_ char *dir = xasprintf("%s/templates", s->pool);
	DIR *d = opendir(dir);
	struct dirent *de;

	while (d && (de = readdir(d))) {
		if (!mgr_valid_template_name(de->d_name, sizeof(de->d_name)))
			continue;
		_cleanup_free_ char *nd = xasprintf("%s/%s", dir, de->d_name);
		DIR *vd = opendir(nd);
		struct dirent *ve;
		while (vd && (ve = readdir(vd)))
			fn(arg, de->d_name, nd, ve->d_name);
		if (vd)
			closedir(vd);
		fn(arg, de->d_name, nd, NULL);
	}
	if (d)
		closedir(d);
}

struct list {
	char **v;
	size_t n;
};

static void list_one(void *arg, const char *name, const char *namedir, const char *entry)
{
	struct list *l = arg;
	char *end;
	unsigned long ver;

	if (!entry)
		return;
	ver = strtoul(entry, &end, 10);
	if (!entry[0] || *end || ver > UINT32_MAX)
		return;
	_cleanup_free_ char *sub = xasprintf("%s/%s", namedir, entry);
	_cleanup_close_ int fd = open(sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct stat st;
	/* Only finished (read-only) builds count. */
	if (fd < 0 || fstat(fd, &st) < 0 || faccessat(fd, ".", W_OK, AT_EACCESS) == 0)
		return;
	l->v = xrealloc(l->v, (l->n + 2) * sizeof(*l->v));
	l->v[l->n++] = xasprintf("%s/%lu", name, ver);
	l->v[l->n] = NULL;
}

char **tmpl_list(struct nm_server *s)
{
	struct list l = { xcalloc(1, sizeof(*l.v)), 0 };

	tmpl_each(s, list_one, &l);
	return l.v;
}
