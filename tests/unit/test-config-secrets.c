/* test-config-secrets: the configuration's secrets (issue 34, item 8).
 * - `*_file` settings read the secret from a file: one line, the trailing
 *   newline stripped; a file others can read or write, a missing or empty
 *   one, or a relative path is refused with an error naming the key;
 * - systemd credentials ($CREDENTIALS_DIRECTORY/<name>) fill a secret the
 *   settings leave empty, under the same checks;
 * - db_password reaches the database target (URL and conninfo), and needs
 *   a PostgreSQL db;
 * - config_keep_secrets leaves each role only the secrets it reads: the
 *   api's copy has no S3 key (nor $AWS_SECRET_ACCESS_KEY), nodemgr's no
 *   database target or password, the node's everything;
 * - a config file holding a secret is reported when others can read it. */
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../src/airlockd/config.h"
#include "../../src/lib/secret.h"
#include "check.h"

static char dir[] = "/tmp/airlock-test-secrets-XXXXXX";

/* dir/name with content, then chmod mode; returns the path (static). */
static const char *put(const char *name, const char *content, mode_t mode)
{
	static char path[4][512];
	static int k;
	char *p = path[k++ % 4];
	int fd;

	snprintf(p, 512, "%s/%s", dir, name);
	unlink(p);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(fd >= 0);
	CHECK(write(fd, content, strlen(content)) == (ssize_t)strlen(content));
	close(fd);
	CHECK(chmod(p, mode) == 0);
	return p;
}

static bool all_zero(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

static void test_read_file(void)
{
	char out[32];
	err_t err = { 0 };

	CHECK(secret_read_file(put("a", "s3cr3t\n", 0600), out, sizeof(out), &err) == 0);
	CHECK(!strcmp(out, "s3cr3t"));
	CHECK(secret_read_file(put("a", "crlf\r\n", 0640), out, sizeof(out), &err) == 0);
	CHECK(!strcmp(out, "crlf"));
	CHECK(secret_read_file(put("a", "no-newline", 0400), out, sizeof(out), &err) == 0);
	CHECK(!strcmp(out, "no-newline"));

	/* refused: out is left as it was */
	memset(&err, 0, sizeof(err));
	CHECK(secret_read_file(put("a", "world\n", 0644), out, sizeof(out), &err) == -EPERM);
	CHECK(strstr(err.msg, "every user read") != NULL);
	CHECK(!strcmp(out, "no-newline"));
	memset(&err, 0, sizeof(err));
	CHECK(secret_read_file(put("a", "world\n", 0602), out, sizeof(out), &err) == -EPERM);
	CHECK(strstr(err.msg, "every user write") != NULL);
	memset(&err, 0, sizeof(err));
	CHECK(secret_read_file("/nonexistent/airlock-secret", out, sizeof(out), &err) == -ENOENT);
	CHECK(strstr(err.msg, "/nonexistent/airlock-secret") != NULL);
	CHECK(secret_read_file(put("a", "\n", 0600), out, sizeof(out), &err) == -EINVAL);
	CHECK(strstr(err.msg, "empty") != NULL);
	CHECK(secret_read_file(put("a", "two\nlines\n", 0600), out, sizeof(out), &err) == -EINVAL);
	CHECK(secret_read_file(put("a", "0123456789012345678901234567890123456789", 0600), out,
			       sizeof(out), &err) == -EINVAL);
	CHECK(strstr(err.msg, "longer than 31") != NULL);
	CHECK(secret_read_file(dir, out, sizeof(out), &err) == -EINVAL);
	CHECK(!strcmp(out, "no-newline"));
}

static void test_file_keys(void)
{
	static struct airlockd_config c;
	err_t err = { 0 };
	char line[600];
	FILE *f;

	config_defaults(&c);
	CHECK(config_set(&c, "s3_secret_key_file", put("sk", "SECRET/KEY+1\n", 0600), &err) == 0);
	CHECK(!strcmp(c.s3_secret_key, "SECRET/KEY+1"));
	CHECK(config_set(&c, "s3_access_key_file", put("ak", "AKIA1\n", 0640), &err) == 0);
	CHECK(!strcmp(c.s3_access_key, "AKIA1"));
	CHECK(config_set(&c, "db_password_file", put("pw", "p@ss 'w\\d\n", 0600), &err) == 0);
	CHECK(!strcmp(c.db_password, "p@ss 'w\\d"));
	CHECK(config_set(&c, "s3_secret_key_file", "", &err) == 0);   /* empty: nothing */
	CHECK(!strcmp(c.s3_secret_key, "SECRET/KEY+1"));

	memset(&err, 0, sizeof(err));
	CHECK(config_set(&c, "s3_secret_key_file", put("sk", "x\n", 0644), &err) < 0);
	CHECK(strstr(err.msg, "s3_secret_key_file") && strstr(err.msg, "every user"));
	memset(&err, 0, sizeof(err));
	CHECK(config_set(&c, "db_password_file", "/nonexistent/pw", &err) < 0);
	CHECK(strstr(err.msg, "db_password_file") && strstr(err.msg, "/nonexistent/pw"));
	memset(&err, 0, sizeof(err));
	CHECK(config_set(&c, "s3_secret_key_file", "relative/key", &err) == -EINVAL);
	CHECK(strstr(err.msg, "absolute") != NULL);

	/* From a config file, the error names the file and line. */
	snprintf(line, sizeof(line), "listen = 127.0.0.1:1\ns3_secret_key_file = %s\n",
		 put("sk", "y\n", 0604));
	f = fmemopen(line, strlen(line), "r");
	memset(&err, 0, sizeof(err));
	CHECK(config_read(&c, f, "test.conf", &err) < 0);
	CHECK(strstr(err.msg, "test.conf:2") && strstr(err.msg, "every user"));
	fclose(f);
}

static void test_credentials(void)
{
	static struct airlockd_config c;
	char creds[600];
	err_t err = { 0 };

	snprintf(creds, sizeof(creds), "%s/creds", dir);
	CHECK(mkdir(creds, 0700) == 0);
	setenv("CREDENTIALS_DIRECTORY", creds, 1);
	put("creds/s3_secret_key", "from-credential\n", 0400);
	put("creds/db_password", "pg-credential\n", 0400);

	config_defaults(&c);
	CHECK(config_set(&c, "db", "postgresql://airlock@db.example/airlock", &err) == 0);
	CHECK(config_set(&c, "s3_access_key", "AKIA-from-config", &err) == 0);
	CHECK(config_secrets_load(&c, &err) == 0);
	CHECK(!strcmp(c.s3_secret_key, "from-credential"));
	CHECK(!strcmp(c.db_password, "pg-credential"));
	CHECK(!strcmp(c.s3_access_key, "AKIA-from-config"));   /* no credential: kept */

	/* A setting the operator gave wins over the credential. */
	config_defaults(&c);
	CHECK(config_set(&c, "s3_secret_key", "from-config", &err) == 0);
	CHECK(config_set(&c, "db", "host=db dbname=airlock", &err) == 0);
	CHECK(config_secrets_load(&c, &err) == 0);
	CHECK(!strcmp(c.s3_secret_key, "from-config"));

	/* The same checks as a *_file. */
	put("creds/s3_secret_key", "leaky\n", 0644);
	config_defaults(&c);
	CHECK(config_set(&c, "db", "host=db", &err) == 0);
	memset(&err, 0, sizeof(err));
	CHECK(config_secrets_load(&c, &err) < 0);
	CHECK(strstr(err.msg, "credential `s3_secret_key`") && strstr(err.msg, "every user"));
	unlink(put("creds/s3_secret_key", "x", 0600));

	/* A password for SQLite is a mistake, said so. */
	config_defaults(&c);
	memset(&err, 0, sizeof(err));
	CHECK(config_secrets_load(&c, &err) == -EINVAL);
	CHECK(strstr(err.msg, "not PostgreSQL") != NULL);
	unlink(put("creds/db_password", "x", 0600));
	rmdir(creds);
	unsetenv("CREDENTIALS_DIRECTORY");
}

static void test_db_target(void)
{
	static struct airlockd_config c;
	char *t;

	config_defaults(&c);
	t = config_db_target(&c);
	CHECK(!strcmp(t, "/var/lib/airlock/db/airlock.db"));
	free(t);
	snprintf(c.db, sizeof(c.db), "postgresql://airlock:old@db:5432/airlock");
	t = config_db_target(&c);
	CHECK(!strcmp(t, c.db));   /* no db_password: as configured */
	free(t);
	snprintf(c.db_password, sizeof(c.db_password), "p@ss w/&?'");
	t = config_db_target(&c);
	CHECK(!strcmp(t, "postgresql://airlock:old@db:5432/airlock?password=p%40ss%20w%2F%26%3F%27"));
	free(t);
	snprintf(c.db, sizeof(c.db), "postgres://db/airlock?sslmode=require");
	t = config_db_target(&c);
	CHECK(!strcmp(t, "postgres://db/airlock?sslmode=require&password=p%40ss%20w%2F%26%3F%27"));
	free(t);
	snprintf(c.db, sizeof(c.db), "host=db dbname=airlock");
	snprintf(c.db_password, sizeof(c.db_password), "it's\\x");
	t = config_db_target(&c);
	CHECK(!strcmp(t, "host=db dbname=airlock password='it\\'s\\\\x'"));
	free(t);
}

/* A config as `up` holds it, every secret set. */
static void full(struct airlockd_config *c)
{
	config_defaults(c);
	snprintf(c->s3_access_key, sizeof(c->s3_access_key), "AKIAEXAMPLE");
	snprintf(c->s3_secret_key, sizeof(c->s3_secret_key), "wJalrXUtnFEMI/K7MDENG");
	snprintf(c->db, sizeof(c->db), "postgresql://airlock:dsnpass@db/airlock");
	snprintf(c->db_password, sizeof(c->db_password), "filepass");
	setenv("AWS_SECRET_ACCESS_KEY", "env-secret", 1);
	setenv("PGPASSWORD", "env-pg", 1);
}

static void test_keep_secrets(void)
{
	static struct airlockd_config c;
	char *env;

	/* The api: the database (it serves from it), no S3 key. */
	full(&c);
	env = getenv("AWS_SECRET_ACCESS_KEY");
	config_keep_secrets(&c, CONFIG_ROLE_API);
	CHECK(all_zero(c.s3_secret_key, sizeof(c.s3_secret_key)));
	CHECK(all_zero(c.s3_access_key, sizeof(c.s3_access_key)));
	CHECK(getenv("AWS_SECRET_ACCESS_KEY") == NULL);
	CHECK(all_zero(env, strlen("env-secret")));   /* the bytes, not only the pointer */
	CHECK(!strcmp(c.db, "postgresql://airlock:dsnpass@db/airlock"));
	CHECK(!strcmp(c.db_password, "filepass"));
	CHECK(getenv("PGPASSWORD") && !strcmp(getenv("PGPASSWORD"), "env-pg"));
	CHECK(!strcmp(c.listen, "127.0.0.1:7070"));   /* the rest untouched */

	/* The gateway: as the api. */
	full(&c);
	config_keep_secrets(&c, CONFIG_ROLE_GATEWAY);
	CHECK(all_zero(c.s3_secret_key, sizeof(c.s3_secret_key)));
	CHECK(!strcmp(c.db_password, "filepass"));

	/* nodemgr: never opens the database, never talks to S3. */
	full(&c);
	config_keep_secrets(&c, CONFIG_ROLE_NODEMGR);
	CHECK(all_zero(c.s3_secret_key, sizeof(c.s3_secret_key)));
	CHECK(all_zero(c.db, sizeof(c.db)));
	CHECK(all_zero(c.db_password, sizeof(c.db_password)));
	CHECK(getenv("PGPASSWORD") == NULL);
	CHECK(!strcmp(c.data_dir, "/var/lib/airlock"));

	/* The node: everything. */
	full(&c);
	config_keep_secrets(&c, CONFIG_ROLE_NODE);
	CHECK(!strcmp(c.s3_secret_key, "wJalrXUtnFEMI/K7MDENG"));
	CHECK(!strcmp(c.s3_access_key, "AKIAEXAMPLE"));
	CHECK(!strcmp(c.db_password, "filepass"));
	CHECK(getenv("AWS_SECRET_ACCESS_KEY") && !strcmp(getenv("AWS_SECRET_ACCESS_KEY"), "env-secret"));

	/* A helper process that needs none. */
	full(&c);
	config_keep_secrets(&c, 0);
	CHECK(all_zero(c.s3_secret_key, sizeof(c.s3_secret_key)));
	CHECK(all_zero(c.db, sizeof(c.db)));
	unsetenv("AWS_SECRET_ACCESS_KEY");
	unsetenv("PGPASSWORD");
}

static void test_exposure(void)
{
	char why[512];
	const char *p;
	gid_t other = getgid() ? getgid() : 1;   /* a group that is not root's */

	CHECK(secret_setting_holds("s3_secret_key", "x"));
	CHECK(!secret_setting_holds("s3_secret_key", ""));
	CHECK(secret_setting_holds("db", "postgresql://u:pw@h/d"));
	CHECK(secret_setting_holds("db", "postgresql://u@h/d?sslmode=require&password=x"));
	CHECK(!secret_setting_holds("db", "postgresql://u@h:5432/d"));
	CHECK(secret_setting_holds("db", "host=h password = x"));
	CHECK(!secret_setting_holds("db", "host=h dbname=d"));
	CHECK(!secret_setting_holds("db", "sqlite:/srv/password=x"));
	CHECK(!secret_setting_holds("s3_secret_key_file", "/etc/airlock/s3"));

	p = put("conf", "listen = 0.0.0.0:7070\ns3_secret_key = abc\n", 0644);
	CHECK(secret_config_exposure(p, why, sizeof(why)) == SECRET_WORLD_READABLE);
	CHECK(strstr(why, "s3_secret_key") && strstr(why, "0644") && strstr(why, "s3_secret_key_file"));
	CHECK(chmod(p, 0600) == 0);
	CHECK(secret_config_exposure(p, why, sizeof(why)) == SECRET_NOT_EXPOSED);
	CHECK(chmod(p, 0640) == 0);
	if (chown(p, (uid_t)-1, other) == 0) {
		CHECK(secret_config_exposure(p, why, sizeof(why)) == SECRET_GROUP_READABLE);
		/* the database's password is every group member's already */
		p = put("conf", "db = postgresql://u:pw@h/d\n", 0640);
		CHECK(chown(p, (uid_t)-1, other) == 0);
		CHECK(secret_config_exposure(p, why, sizeof(why)) == SECRET_NOT_EXPOSED);
		CHECK(chmod(p, 0644) == 0);
		CHECK(secret_config_exposure(p, why, sizeof(why)) == SECRET_WORLD_READABLE);
		CHECK(strstr(why, "db_password_file") != NULL);
	}
	/* no secret, or only a commented one: nothing to say */
	p = put("conf", "# s3_secret_key = abc\ns3_secret_key_file = /etc/airlock/s3\n", 0644);
	CHECK(secret_config_exposure(p, why, sizeof(why)) == SECRET_NOT_EXPOSED);
	CHECK(secret_config_exposure("/nonexistent/airlockd.conf", why, sizeof(why)) ==
	      SECRET_NOT_EXPOSED);
}

static void cleanup(void)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
}

int main(void)
{
	REQUIRE(mkdtemp(dir) != NULL, cleanup);
	umask(022);
	test_read_file();
	test_file_keys();
	test_credentials();
	test_db_target();
	test_keep_secrets();
	test_exposure();
	cleanup();
	return check_done("test-config-secrets");
}
