/* fuzz-api-ports: the api's parsers of client bytes for port forwarding
 * (Host of a host-routed URL, the Cookie header, the query string). Every
 * parser gets the whole input as a string; nothing may crash, leak or read
 * out of bounds, and what the host parser accepts must be a port in
 * 1..65535 and a short lowercase id; the redirect built from a request
 * target must be a path of the same host (not "//host" or "/\\host"). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/api/api-internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	char id[65];
	unsigned port = 0;

	memcpy(s, data, size);
	s[size] = '\0';
	if (ports_parse_host(s, "ports.test", &port, id, sizeof(id))) {
		if (port == 0 || port > 65535 || strlen(id) == 0 || strlen(id) >= sizeof(id))
			abort();
		for (char *p = id; *p; p++)
			if (*p >= 'A' && *p <= 'Z')
				abort();
	}
	free(ports_cookie_get(s, "airlock_port_token"));
	char *c = ports_cookie_without_token(s);
	if (c && strstr(c, "airlock_port_token=") == c)
		abort();
	free(c);
	free(ports_query_without_token(s));
	/* as a request target: the redirect stays on this host */
	char *loc = ports_redirect_location(s, "");
	if (loc[0] != '/' || loc[1] == '/' || strpbrk(loc, "\\\r\n\t "))
		abort();
	free(loc);
	free(s);
	return 0;
}
