/* fuzz-config: the config file parser (src/airlockd/config.c) on arbitrary
 * bytes. A config file is written by an operator, not a tenant, but a bad one
 * must give an error naming the line, never a crash: every key's value parser
 * (sizes, ports, lists, paths, booleans) is reached through config_read. What
 * it accepts must leave every string field terminated. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/airlockd/config.h"

static struct airlockd_config base;
static int ready;

static void check_terminated(const char *field, size_t cap)
{
	if (!memchr(field, '\0', cap))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct airlockd_config c;
	err_t err = { 0 };
	FILE *f;

	if (!ready) {
		/* config_defaults asks the host for its name: once is enough */
		config_defaults(&base);
		ready = 1;
	}
	c = base;
	if (!size || !(f = fmemopen((void *)data, size, "r")))
		return 0;
	if (config_read(&c, f, "fuzz.conf", &err) < 0 && !err.msg[0])
		abort();   /* a refusal must say why */
	fclose(f);
	check_terminated(c.data_dir, sizeof(c.data_dir));
	check_terminated(c.db, sizeof(c.db));
	check_terminated(c.node_name, sizeof(c.node_name));
	check_terminated(c.listen, sizeof(c.listen));
	check_terminated(c.templates, sizeof(c.templates));
	check_terminated(c.gateway_hosts, sizeof(c.gateway_hosts));
	check_terminated(c.tenant_key_dir, sizeof(c.tenant_key_dir));
	return 0;
}
