/* fuzz-s3xml: what an S3 server answers, as the s3 driver of src/objstore
 * meets it from a server that may be broken or hostile. The input goes
 * through each XML reader (ListObjectsV2 page, Error, InitiateMultipartUpload
 * and CompleteMultipartUpload results), through the response-head parser,
 * and, as a byte stream over a socketpair whose peer then hangs up, through
 * the response reader (head, Content-Length / chunked / to-EOF body) as a
 * GET into a sink and as a HEAD. Nothing may crash, leak, read out of
 * bounds or hang. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../src/objstore/s3-internal.h"

static int count_key(void *arg, const char *key, uint64_t size)
{
	if (strlen(key) == 0)
		abort();  /* the reader never hands out an empty key */
	(*(size_t *)arg)++;
	return 0;
}

static int sink_write(void *arg, const void *p, size_t n)
{
	*(size_t *)arg += n;
	return *(size_t *)arg > (1u << 20) ? -EFBIG : 0;
}

static void replay_stream(const uint8_t *data, size_t size, bool is_head)
{
	int sv[2];
	size_t got = 0;
	struct os_sink sink = { sink_write, &got };
	struct s3_http_resp resp = { 0 };

	if (size > 65536 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return;
	if (write(sv[1], data, size) != (ssize_t)size) {
		close(sv[0]);
		close(sv[1]);
		return;
	}
	shutdown(sv[1], SHUT_WR);  /* EOF after the data: no read can wait */
	(void)s3_http_read_fd(sv[0], 1000, is_head, &sink, 4096, &resp);
	s3_http_resp_free(&resp);
	close(sv[0]);
	close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* an exact-size copy so ASan catches any read past size */
	char *p = malloc(size ? size : 1);
	char token[64], code[32], msg[64], id[128];
	size_t n = 0;
	bool truncated;
	struct s3_http_resp resp = { 0 };

	memcpy(p, data, size);
	(void)s3_xml_list(p, size, count_key, &n, &truncated, token, sizeof(token));
	s3_xml_error(p, size, code, sizeof(code), msg, sizeof(msg));
	if (strlen(code) >= sizeof(code) || strlen(msg) >= sizeof(msg))
		abort();
	(void)s3_xml_upload_id(p, size, id, sizeof(id));
	(void)s3_xml_complete_ok(p, size);
	(void)s3_http_parse_head(p, size, &resp);
	free(p);
	replay_stream(data, size, false);
	replay_stream(data, size, true);
	return 0;
}
