/* secret.c - secrets from files and systemd credentials, and the mode
 * check of a config file that holds one (secret.h). */
#include "secret.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

/* The longest secret file read: more than any field that takes one. */
#define SECRET_MAX 4096

int secret_read_file(const char *path, char *out, size_t cap, err_t *err)
{
	char buf[SECRET_MAX + 1];
	struct stat st;
	size_t n = 0;
	int fd, r = 0;

	/* O_NONBLOCK: a FIFO put there must not hang the start; it is refused
	 * below as not a regular file. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return err_sys(err, "secret file `%s`", path);
	if (fstat(fd, &st) < 0) {
		r = err_sys(err, "secret file `%s`", path);
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		r = err_set(err, EINVAL, "secret file `%s`: not a regular file", path);
		goto out;
	}
	if (st.st_mode & (S_IROTH | S_IWOTH)) {
		r = err_set(err, EPERM,
			    "secret file `%s`: mode %04o lets every user %s it; "
			    "chmod o-rw it (root's 0600, or 0640 with a group that needs it)",
			    path, (unsigned)(st.st_mode & 07777),
			    st.st_mode & S_IROTH ? "read" : "write");
		goto out;
	}
	for (;;) {
		ssize_t got = read(fd, buf + n, sizeof(buf) - 1 - n);

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			r = err_sys(err, "secret file `%s`", path);
			goto out;
		}
		if (got == 0 || (n += (size_t)got) == sizeof(buf) - 1)
			break;
	}
	if (n && buf[n - 1] == '\n')
		n--;
	if (n && buf[n - 1] == '\r')
		n--;
	if (!n)
		r = err_set(err, EINVAL, "secret file `%s`: empty", path);
	else if (memchr(buf, '\0', n) || memchr(buf, '\n', n))
		r = err_set(err, EINVAL, "secret file `%s`: not one line of text", path);
	else if (n >= cap)
		r = err_set(err, EINVAL, "secret file `%s`: longer than %zu bytes", path, cap - 1);
	if (r == 0) {
		memcpy(out, buf, n);
		out[n] = '\0';
	}
out:
	explicit_bzero(buf, sizeof(buf));
	close(fd);
	return r;
}

int secret_read_credential(const char *name, char *out, size_t cap, err_t *err)
{
	const char *dir = getenv("CREDENTIALS_DIRECTORY");
	_cleanup_free_ char *path = NULL;
	int r;

	if (!dir || !dir[0])
		return 0;
	path = xasprintf("%s/%s", dir, name);
	if (access(path, F_OK) < 0 && errno == ENOENT)
		return 0;
	r = secret_read_file(path, out, cap, err);
	if (r < 0)
		return err_wrap(err, "systemd credential `%s`", name);
	return 1;
}

/* A PostgreSQL URL with a password in its user info or its query, or a
 * conninfo with a `password` keyword. */
static bool dsn_names_password(const char *v)
{
	const char *sep = strstr(v, "://");

	if (!strncmp(v, "postgres://", 11) || !strncmp(v, "postgresql://", 13)) {
		const char *a = sep + 3, *at, *q;
		size_t n = strcspn(a, "/?#");

		at = memrchr(a, '@', n);
		if (at && memchr(a, ':', (size_t)(at - a)))
			return true;
		for (q = strchr(a, '?'); q; q = strchr(q + 1, '&'))
			if (!strncmp(q + 1, "password=", 9))
				return true;
		return false;
	}
	if (!strchr(v, '='))
		return false;   /* "sqlite", "sqlite:PATH" or a plain path */
	for (const char *p = v; (p = strstr(p, "password")); p += 8) {
		const char *e = p + 8;

		if (p != v && !isspace((unsigned char)p[-1]))
			continue;
		while (isspace((unsigned char)*e))
			e++;
		if (*e == '=')
			return true;
	}
	return false;
}

bool secret_setting_holds(const char *key, const char *val)
{
	if (!strcmp(key, "s3_secret_key") || !strcmp(key, "s3_access_key"))
		return val[0] != '\0';
	if (!strcmp(key, "db"))
		return dsn_names_password(val);
	return false;
}

static char *trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
		*--e = '\0';
	return s;
}

enum secret_exposure secret_config_exposure(const char *path, char *why, size_t cap)
{
	char line[4096], iobuf[BUFSIZ], key[64] = "";
	enum secret_exposure ex = SECRET_NOT_EXPOSED;
	struct stat st;
	FILE *f;

	if (cap)
		why[0] = '\0';
	f = fopen(path, "re");
	if (!f)
		return SECRET_NOT_EXPOSED;
	/* Our own buffer, wiped after: stdio's would be freed holding the
	 * file's bytes. */
	setvbuf(f, iobuf, _IOFBF, sizeof(iobuf));
	if (fstat(fileno(f), &st) < 0 ||
	    !(st.st_mode & S_IROTH || (st.st_mode & S_IRGRP && st.st_gid != 0)))
		goto out;
	while (fgets(line, sizeof(line), f)) {
		char *s = trim(line), *eq = strchr(s, '=');

		if (*s == '#' || !eq)
			continue;
		*eq = '\0';
		s = trim(s);
		/* Read by the group alone, the database's password is no news to
		 * it: the airlock group is the node's, the api's and the
		 * gateway's, and each opens the database with it. */
		if (!(st.st_mode & S_IROTH) && !strcmp(s, "db"))
			continue;
		if (secret_setting_holds(s, trim(eq + 1))) {
			snprintf(key, sizeof(key), "%s", s);
			break;
		}
	}
	if (!key[0])
		goto out;
	if (st.st_mode & S_IROTH) {
		ex = SECRET_WORLD_READABLE;
		snprintf(why, cap,
			 "%s holds a secret (`%s`) and every user can read it (mode %04o): "
			 "chmod o-r it, or move the secret to `%s_file` or a systemd credential",
			 path, key, (unsigned)(st.st_mode & 07777),
			 strcmp(key, "db") ? key : "db_password");
	} else {
		ex = SECRET_GROUP_READABLE;
		snprintf(why, cap,
			 "%s holds a secret (`%s`) and group %u can read it (mode %04o; the api "
			 "and gateway users are in the airlock group): move the secret to "
			 "`%s_file` (root's 0600) or a systemd credential",
			 path, key, (unsigned)st.st_gid, (unsigned)(st.st_mode & 07777),
			 strcmp(key, "db") ? key : "db_password");
	}
out:
	fclose(f);
	explicit_bzero(line, sizeof(line));
	explicit_bzero(iobuf, sizeof(iobuf));
	return ex;
}
