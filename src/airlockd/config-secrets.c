/* config-secrets.c - the secrets of the configuration: where they come from
 * besides the file (systemd credentials), which role keeps which, the
 * database target that carries the password, and the start-up warnings.
 *
 * Every role is forked from `up` with the whole parsed config; the api
 * faces the internet and the gateway parses what sandboxes send, so each
 * role wipes the secrets it never reads before it runs (config_keep_secrets).
 * docs/DESIGN.md "Secrets in the configuration" says who keeps what. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../db/db.h"
#include "../lib/log.h"
#include "../lib/secret.h"
#include "../lib/util.h"

#define DB_ROLES (CONFIG_ROLE_NODE | CONFIG_ROLE_API | CONFIG_ROLE_GATEWAY)

/* Each secret: its field, the systemd credential that may hold it, the
 * environment variable read in its place (when its field is empty), and
 * the roles that read it - every other role's copy is wiped. */
static const struct config_secret {
	const char *name;        /* the setting, and the credential's name */
	bool credential;         /* may come from $CREDENTIALS_DIRECTORY/<name> */
	const char *env;         /* read when the field is empty, or NULL */
	size_t off, size;
	unsigned keep;           /* CONFIG_ROLE_* bits that read it */
} config_secrets[] = {
	/* Only the node talks to the object store (suspend, restore, moves
	 * between nodes); src/objstore signs its requests with both keys. */
	{ "s3_access_key", true, "AWS_ACCESS_KEY_ID",
	  offsetof(struct airlockd_config, s3_access_key),
	  sizeof(((struct airlockd_config *)0)->s3_access_key), CONFIG_ROLE_NODE },
	{ "s3_secret_key", true, "AWS_SECRET_ACCESS_KEY",
	  offsetof(struct airlockd_config, s3_secret_key),
	  sizeof(((struct airlockd_config *)0)->s3_secret_key), CONFIG_ROLE_NODE },
	/* The node, the api and the gateway each open the database; nodemgr
	 * never does. The target (db) may name the password itself. */
	{ "db_password", true, "PGPASSWORD", offsetof(struct airlockd_config, db_password),
	  sizeof(((struct airlockd_config *)0)->db_password), DB_ROLES },
	{ "db", false, NULL, offsetof(struct airlockd_config, db),
	  sizeof(((struct airlockd_config *)0)->db), DB_ROLES },
};

#define SECRET_FIELD(c, s) ((char *)(c) + (s)->off)

int config_secrets_load(struct airlockd_config *c, err_t *err)
{
	for (size_t i = 0; i < ARRAY_SIZE(config_secrets); i++) {
		const struct config_secret *s = &config_secrets[i];
		char *field = SECRET_FIELD(c, s);
		int r;

		/* A setting the operator gave (the file, a *_file, a flag) wins
		 * over a credential. */
		if (!s->credential || field[0])
			continue;
		if ((r = secret_read_credential(s->name, field, s->size, err)) < 0)
			return r;
	}
	if (c->db_password[0] && !db_target_is_postgres(c->db))
		return err_set(err, EINVAL,
			       "db_password_file (or the credential db_password): db `%s` is not "
			       "PostgreSQL",
			       c->db);
	return 0;
}

void config_keep_secrets(struct airlockd_config *c, unsigned role)
{
	for (size_t i = 0; i < ARRAY_SIZE(config_secrets); i++) {
		const struct config_secret *s = &config_secrets[i];
		char *v;

		if (s->keep & role)
			continue;
		explicit_bzero(SECRET_FIELD(c, s), s->size);
		/* The bytes themselves, not only the pointer: /proc/<pid>/environ
		 * reads the process's original environment block. */
		if (s->env && (v = getenv(s->env))) {
			explicit_bzero(v, strlen(v));
			unsetenv(s->env);
		}
	}
}

/* Append `?password=` or `&password=` with v percent-encoded. */
static void url_add_password(struct buf *b, const char *v)
{
	buf_printf(b, "%cpassword=", strchr(b->data, '?') ? '&' : '?');
	for (const unsigned char *p = (const unsigned char *)v; *p; p++)
		if (isalnum(*p) || strchr("-._~", *p))
			buf_printf(b, "%c", *p);
		else
			buf_printf(b, "%%%02X", *p);
}

/* Append ` password='...'` with v's backslashes and quotes escaped. */
static void conninfo_add_password(struct buf *b, const char *v)
{
	buf_printf(b, " password='");
	for (const char *p = v; *p; p++)
		buf_printf(b, "%s%c", *p == '\\' || *p == '\'' ? "\\" : "", *p);
	buf_printf(b, "'");
}

char *config_db_target(const struct airlockd_config *c)
{
	struct buf b;

	if (!strcmp(c->db, "sqlite"))
		return xasprintf("%s/db/airlock.db", c->data_dir);
	if (!c->db_password[0])
		return xstrdup(c->db);
	/* libpq takes the last value given for a parameter: the URL's query
	 * comes after its user info, the keyword after the conninfo's own. */
	buf_init(&b);
	buf_printf(&b, "%s", c->db);
	if (!strncmp(c->db, "postgres://", 11) || !strncmp(c->db, "postgresql://", 13))
		url_add_password(&b, c->db_password);
	else
		conninfo_add_password(&b, c->db_password);
	return buf_steal(&b);
}

void config_secrets_warn(const struct airlockd_config *c)
{
	char why[1024];

	if (c->config_path[0] && secret_config_exposure(c->config_path, why, sizeof(why)))
		log_warn("%s", why);
	if (c->secret_in_argv)
		log_warn("a secret was given on the command line, where every user of this host "
			 "sees it (ps, /proc/<pid>/cmdline): use s3_secret_key_file, "
			 "db_password_file or a systemd credential");
}
