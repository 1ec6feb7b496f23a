/* test-config-doc: docs/CONFIGURATION.md, packaging/airlockd.conf and
 * config_defaults agree with the parser's table of keys (config_keys in
 * src/airlockd/config.c), so the page cannot drift from the code:
 * - every key of the table has exactly one row on the page, and every row a key;
 * - a row's type and default are the table's;
 * - a default that is a value (not "(...)") is what config_defaults leaves:
 *   setting it changes nothing;
 * - every key the packaged config file names, commented out or not, is one
 *   the parser takes, with a value it takes.
 * The source tree is $AIRLOCK_SRC (set by ctest), else argv[1]. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/airlockd/config.h"
#include "check.h"

#define MAX_ROWS 256

struct row {
	char key[64], type[128], def[256];
	int line;
};

static char *trim(char *s)
{
	char *e;

	while (*s == ' ')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\n'))
		*--e = '\0';
	return s;
}

/* "`x`" -> "x"; "`\"\"`" -> ""; anything else as it is. */
static void unquote(const char *cell, char *out, size_t cap)
{
	size_t n = strlen(cell);

	if (n >= 2 && cell[0] == '`' && cell[n - 1] == '`') {
		if (n == 4 && !strncmp(cell, "`\"\"`", 4))
			n = 2;
		snprintf(out, cap, "%.*s", (int)(n - 2), cell + 1);
	} else {
		snprintf(out, cap, "%s", cell);
	}
}

/* The key rows of every table on the page: "| `key` | type | default | ...". */
static int read_rows(const char *path, struct row *rows)
{
	FILE *f = fopen(path, "r");
	char line[8192];
	int n = 0, lineno = 0;

	if (!f) {
		fprintf(stderr, "cannot open %s\n", path);
		exit(1);
	}
	while (fgets(line, sizeof(line), f)) {
		char *cells[4], *p = line + 1;
		int i;

		lineno++;
		if (strncmp(line, "| `", 3))
			continue;
		for (i = 0; i < 4 && p; i++) {
			char *bar = strchr(p, '|');

			if (bar)
				*bar = '\0';
			cells[i] = trim(p);
			p = bar ? bar + 1 : NULL;
		}
		if (i < 4 || !p || n == MAX_ROWS) {
			fprintf(stderr, "%s:%d: not a | key | type | default | meaning | row\n",
				path, lineno);
			failures++;
			continue;
		}
		unquote(cells[0], rows[n].key, sizeof(rows[n].key));
		snprintf(rows[n].type, sizeof(rows[n].type), "%s", cells[1]);
		unquote(cells[2], rows[n].def, sizeof(rows[n].def));
		rows[n].line = lineno;
		n++;
	}
	fclose(f);
	return n;
}

static void check_page(const char *path)
{
	static struct row rows[MAX_ROWS];
	int n = read_rows(path, rows);

	CHECK(n > 0);
	for (int i = 0; i < n; i++) {
		const struct config_key *k = config_key_find(rows[i].key);

		for (int j = 0; j < i; j++)
			if (!strcmp(rows[i].key, rows[j].key)) {
				fprintf(stderr, "%s:%d: `%s` has a row already (line %d)\n", path,
					rows[i].line, rows[i].key, rows[j].line);
				failures++;
			}
		if (!k) {
			fprintf(stderr, "%s:%d: `%s` is not a key of config_keys (src/airlockd/config.c)\n",
				path, rows[i].line, rows[i].key);
			failures++;
			continue;
		}
		if (strcmp(rows[i].type, k->type)) {
			fprintf(stderr, "%s:%d: `%s`: type `%s`, the parser's table says `%s`\n", path,
				rows[i].line, k->key, rows[i].type, k->type);
			failures++;
		}
		if (strcmp(rows[i].def, k->def)) {
			fprintf(stderr, "%s:%d: `%s`: default `%s`, the parser's table says `%s`\n",
				path, rows[i].line, k->key, rows[i].def, k->def);
			failures++;
		}
	}
	for (size_t i = 0; i < config_keys_n; i++) {
		bool found = false;

		for (int j = 0; j < n && !found; j++)
			found = !strcmp(rows[j].key, config_keys[i].key);
		if (!found) {
			fprintf(stderr, "%s: no row for `%s` (a key of config_keys)\n", path,
				config_keys[i].key);
			failures++;
		}
	}
}

/* A default given as a value is the one config_defaults leaves. */
static void check_defaults(void)
{
	static struct airlockd_config base, c;

	config_defaults(&base);
	for (size_t i = 0; i < config_keys_n; i++) {
		const struct config_key *k = &config_keys[i];
		err_t err = { 0 };

		if (k->def[0] == '(')
			continue;
		memcpy(&c, &base, sizeof(c));
		if (config_set(&c, k->key, k->def, &err) < 0) {
			fprintf(stderr, "`%s`: its default `%s` is refused: %s\n", k->key, k->def,
				err.msg);
			failures++;
		} else if (memcmp(&c, &base, sizeof(c))) {
			fprintf(stderr, "`%s`: config_defaults does not leave the table's default `%s`\n",
				k->key, k->def);
			failures++;
		}
	}
}

/* packaging/airlockd.conf: "# key = value" or "key = value" lines. */
static void check_packaged(const char *path)
{
	static struct airlockd_config c;
	FILE *f = fopen(path, "r");
	char line[4096];
	int lineno = 0, keys = 0;

	CHECK(f != NULL);
	if (!f)
		return;
	config_defaults(&c);
	while (fgets(line, sizeof(line), f)) {
		char *s = line, *eq, *key, *e;
		err_t err = { 0 };

		lineno++;
		if (*s == '#')
			s++;
		s = trim(s);
		eq = strchr(s, '=');
		key = s;
		e = key;
		while (*e && (*e == '_' || (*e >= 'a' && *e <= 'z')))
			e++;
		if (!eq || e == key || trim(e) != eq)
			continue;   /* prose */
		*eq = '\0';
		*e = '\0';
		keys++;
		if (config_set(&c, key, trim(eq + 1), &err) < 0) {
			fprintf(stderr, "%s:%d: %s\n", path, lineno, err.msg);
			failures++;
		}
	}
	fclose(f);
	CHECK(keys > 0);
}

int main(int argc, char **argv)
{
	const char *src = getenv("AIRLOCK_SRC");
	char path[4096];

	if (!src)
		src = argc > 1 ? argv[1] : ".";
	snprintf(path, sizeof(path), "%s/docs/CONFIGURATION.md", src);
	check_page(path);
	check_defaults();
	snprintf(path, sizeof(path), "%s/packaging/airlockd.conf", src);
	check_packaged(path);
	return check_done("test-config-doc");
}
