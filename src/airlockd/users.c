/* users.c - the daemons' users: made when missing, dropped to for good, and
 * checked to reach the data dir. The node runs as cfg->user; the api and
 * the gateway as users of their own in its group (see role_user). */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../db/db.h"
#include "../lib/peer.h"
#include "../lib/util.h"
#include "airlockd.h"

int lookup_user(const char *name, uid_t *uid, gid_t *gid, err_t *err)
{
	struct passwd *pw = getpwnam(name);

	if (!pw)
		return err_set(err, ENOENT, "user `%s` does not exist", name);
	*uid = pw->pw_uid;
	*gid = pw->pw_gid;
	return 0;
}

/* Create the unprivileged service user on first run (root only). */
int ensure_user(const char *name, err_t *err)
{
	if (getpwnam(name))
		return 0;
	pid_t pid = fork();
	if (pid < 0)
		return err_sys(err, "fork");
	if (pid == 0) {
		execlp("useradd", "useradd", "--system", "--no-create-home", "--user-group",
		       "--shell", "/usr/sbin/nologin", name, (char *)NULL);
		_exit(127);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !getpwnam(name))
		return err_set(err, EIO, "useradd %s failed", name);
	return 0;
}

/* The `up` process, when this one is a role it spawned; 0 otherwise. */
pid_t airlockd_supervisor;

/* Each daemon has a user of its own: the node cfg->user, the api and the
 * gateway theirs (configured, or cfg->user with "-api" / "-gw"). So the api,
 * which parses the internet's input, can read neither the node's files (the
 * tenants' BYOK keys, sandboxes' artifacts in transit) nor the gateway's
 * memory and keys, and the node, which talks to sandboxes, not the
 * gateway's. The api and the gateway have cfg->user's group as their only
 * supplementary group, for the database and the sockets in run/. */
static const char *role_user(const struct airlockd_config *cfg, const char *set,
			     const char *suffix, char buf[64])
{
	if (set[0])
		return set;
	snprintf(buf, 64, "%.58s%s", cfg->user, suffix);
	return buf;
}

const char *gateway_user(const struct airlockd_config *cfg, char buf[64])
{
	return role_user(cfg, cfg->gateway_user, "-gw", buf);
}

const char *api_user(const struct airlockd_config *cfg, char buf[64])
{
	return role_user(cfg, cfg->api_user, "-api", buf);
}

/* cfg->user's group, the one the api and the gateway share with the node;
 * (gid_t)-1 when not root (nothing to drop then). */
int shared_group(const struct airlockd_config *cfg, gid_t *gid, err_t *err)
{
	uid_t uid;

	*gid = (gid_t)-1;
	if (getuid() != 0)
		return 0;
	return lookup_user(cfg->user, &uid, gid, err);
}

/* The uid each role runs as, for the checks on node.sock and gateway.sock
 * (lib/peer.h), resolved the way each role's drop_privileges resolves its
 * user, and before this role drops (the users are not secret; this is so a
 * missing one is said at start). Without root no role drops: all are this
 * process's uid, which the zero struct says. A gateway that is never
 * started (network off) may have no user: then no peer holds its role. */
int role_uids(const struct airlockd_config *cfg, struct peer_uids *out, err_t *err)
{
	char apibuf[64], gwbuf[64];
	gid_t gid;
	int r;

	*out = (struct peer_uids){ 0 };
	if (getuid() != 0)
		return 0;
	out->set = true;
	out->gateway = (uid_t)-1;
	if ((r = lookup_user(cfg->user, &out->node, &gid, err)) < 0 ||
	    (r = lookup_user(api_user(cfg, apibuf), &out->api, &gid, err)) < 0)
		return r;
	if (cfg->network && (r = lookup_user(gateway_user(cfg, gwbuf), &out->gateway, &gid, err)) < 0)
		return r;
	return 0;
}

/* Drop root for good: supplementary groups (only extra_group, when not
 * (gid_t)-1), gid, uid, and no way back. */
int drop_privileges(const char *user, gid_t extra_group, err_t *err)
{
	uid_t uid = 0;
	gid_t gid = 0;
	int r;

	if (getuid() != 0)
		return 0;  /* already unprivileged (tests, manual runs) */
	r = lookup_user(user, &uid, &gid, err);
	if (r < 0)
		return r;
	if (setgroups(extra_group == (gid_t)-1 ? 0 : 1, &extra_group) < 0 ||
	    setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0)
		return err_sys(err, "drop privileges to %s", user);
	if (setuid(0) == 0)
		return err_set(err, EPERM, "could regain root after dropping privileges");
	umask(DB_SHARED_UMASK);   /* files for the group, none for others */
	prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
	prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
	/* Changing credentials clears the parent-death signal: set it again,
	 * and leave at once if the supervisor already died in between. */
	if (airlockd_supervisor > 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);
		if (getppid() != airlockd_supervisor)
			return err_set(err, ESRCH, "the supervisor exited during start-up");
	}
	return 0;
}

/* Can user (uid, gid and its groups) reach the data dir: search (x) every
 * directory from / down to DIR itself? The node and api open DATA/db and
 * DATA/run as that user; a parent they cannot cross (a data dir under
 * /root, or under a 0700 mkdtemp) otherwise shows up much later as SQLite's
 * "unable to open database file" from a role that keeps being restarted.
 * The test runs as the user, in a child (access(2) with its real ids: ACLs
 * and all), before any role is started. 0, or -EACCES naming the first
 * directory that stops it and how to fix that. */
int check_data_dir_reachable(const struct airlockd_config *cfg, const char *user,
				    gid_t extra_gid, err_t *err)
{
	uid_t uid = 0;
	gid_t gid = 0;
	_cleanup_free_ char *abs = NULL;
	char bad[PATH_MAX] = "";
	int pfd[2], st;
	ssize_t n;
	pid_t pid;

	if (cfg->data_dir[0] == '/') {
		abs = xstrdup(cfg->data_dir);
	} else {
		char cwd[PATH_MAX];
		if (!getcwd(cwd, sizeof(cwd)))
			return err_sys(err, "getcwd");
		abs = xasprintf("%s/%s", cwd, cfg->data_dir);
	}
	if (lookup_user(user, &uid, &gid, err) < 0)
		return -err->code;
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return err_sys(err, "pipe");
	pid = fork();
	if (pid < 0) {
		close(pfd[0]);
		close(pfd[1]);
		return err_sys(err, "fork");
	}
	if (pid == 0) {
		/* child: become the user, then walk down; write the first
		 * directory it cannot search, nothing when all can be */
		close(pfd[0]);
		if ((extra_gid == (gid_t)-1 ? initgroups(user, gid)
					    : setgroups(1, &extra_gid)) < 0 ||
		    setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0)
			_exit(2);
		if (access("/", X_OK) < 0)
			_exit(write(pfd[1], "/", 1) == 1 ? 0 : 3);
		for (size_t i = 1;; i++) {
			char c = abs[i];
			if (c != '/' && c != '\0')
				continue;
			if (abs[i - 1] != '/') {   /* not an empty component ("//") */
				abs[i] = '\0';
				if (access(abs, X_OK) < 0 && errno != ENOENT)
					_exit(write(pfd[1], abs, i) == (ssize_t)i ? 0 : 3);
				abs[i] = c;
			}
			if (!c)
				break;
		}
		_exit(0);
	}
	close(pfd[1]);
	do
		n = read(pfd[0], bad, sizeof(bad) - 1);
	while (n < 0 && errno == EINTR);
	close(pfd[0]);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return err_set(err, EIO, "cannot check that user `%s` reaches %s", user,
			       cfg->data_dir);
	if (n <= 0)
		return 0;
	bad[n] = '\0';
	return err_set(err, EACCES,
		       "data dir %s: directory %s is not traversable by user `%s` (uid %u), "
		       "which a daemon runs as: allow it with `chmod o+x %s` (or an ACL: "
		       "`setfacl -m u:%s:x %s`), or choose a data dir under a directory it can "
		       "reach (e.g. /var/lib/airlock)",
		       cfg->data_dir, bad, user, (unsigned)uid, bad, user, bad);
}

