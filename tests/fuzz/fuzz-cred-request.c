/* fuzz-cred-request: a whole plain-HTTP request as a sandbox sends it,
 * through mitm_http_head (head, then a Content-Length or chunked body read
 * whole, an Expect answered) with a hook that lengthens the body as an injection
 * may. Must never crash, hang or leak; what goes upstream must be a head
 * that parses, and a body it declares must be all there, so a rewrite can
 * never change how the request is framed. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../src/gateway/mitm.h"

static int hook(void *arg, struct http_head *h, struct buf *reply)
{
	(void)arg;
	(void)reply;
	head_set(h, "Authorization", "Bearer x");
	if (h->has_body)
		buf_adds(&h->body, "+value");
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_head up;
	struct buf out;
	err_t err = { 0 };
	size_t pre = size < 64 ? size : 64;   /* what the gateway sniffed */
	int sp[2];
	long hl;

	if (size > 100000 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
		return 0;
	/* the rest of the request, then the client's end of sending */
	if (write(sp[1], data + pre, size - pre) != (ssize_t)(size - pre))
		abort();
	shutdown(sp[1], SHUT_WR);
	buf_init(&out);
	if (mitm_http_head(sp[0], data, pre, NULL, 0, hook, NULL, &out, &err) == 0) {
		/* "Connection: close" always (the name as the client spelt
		 * it), however many fields came */
		const char *end = memmem(out.data, out.len, "\r\n\r\n", 4);
		if (!end)
			abort();
		char *head = strndup(out.data, (size_t)(end - out.data) + 2);
		bool closes = strcasestr(head, "\r\nConnection: close\r\n") != NULL;
		free(head);
		if (!closes)
			abort();
		hl = head_parse(out.data, out.len, &up);
		if (hl == -E2BIG)
			goto done;  /* more fields than a client may send: ours added */
		if (hl <= 0)
			abort();
		const char *cl = head_get(&up, "Content-Length");
		if (cl && !head_get(&up, "Transfer-Encoding") && strspn(cl, "0123456789") == strlen(cl) &&
		    strlen(cl) < 9 && out.len - (size_t)hl < (size_t)atol(cl)) {
			/* a declared body that is not all there: only one we did
			 * not read (its framing is not ours to fix) may be short */
			for (size_t i = 0, n = 0; i < up.n; i++)
				if (strcasecmp(up.f[i].name, "Content-Length") == 0 && ++n > 1)
					goto out;
			if ((size_t)atol(cl) <= BODY_MAX)
				abort();
		}
out:
		head_free(&up);
	}
done:
	buf_free(&out);
	close(sp[0]);
	close(sp[1]);
	return 0;
}
