/* escape.c - percent-encoding for the CLI's request targets. A file of its
 * own so that the MCP core (mcp.c) and its fuzz target link it without the
 * rest of the CLI. */
#include "cli.h"

char *cli_escape(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	struct buf b;

	buf_init(&b);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
			buf_addc(&b, (char)c);
		} else {
			buf_addc(&b, '%');
			buf_addc(&b, hex[c >> 4]);
			buf_addc(&b, hex[c & 15]);
		}
	}
	buf_addc(&b, '\0');
	b.len--;
	return buf_steal(&b);
}
