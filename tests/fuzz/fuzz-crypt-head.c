/* fuzz-crypt-head: a sealed object as the node reads it back from the object
 * store, which may be broken or hostile (src/byok/envelope.h). The input
 * goes through the header parser and then, whole, through crypt_open_buf
 * (and in pieces through the in-order crypt_opener)
 * under a fixed key and context: nothing may crash, read out of bounds, or
 * open (only what this key sealed for this context opens, and the fuzzer
 * cannot forge a tag). An input starting with 'S' is instead sealed and
 * opened back: the round trip must give the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../src/byok/envelope.h"

static const uint8_t key[CRYPT_KEY_LEN] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 };
static const uint8_t ref[CRYPT_REF_LEN] = { 9, 8, 7 };
static const struct crypt_ctx ctx = { "t-fuzz", "sb-fuzz", "disk", "su-fuzz" };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct crypt_head h;
	struct buf sealed, out;
	err_t err = { 0 };
	int r;

	for (size_t n = 0; n <= size && n <= CRYPT_HEAD_MAX + 1; n += 7)
		(void)crypt_head_parse(data, n, &h, &err);
	r = crypt_head_parse(data, size, &h, &err);
	if (r > 0 && (h.len > size || h.len < CRYPT_HEAD_FIXED))
		abort();
	buf_init(&out);
	buf_init(&sealed);
	if (size > 0 && data[0] == 'S') {
		if (crypt_seal_buf(data + 1, size - 1, key, ref, &ctx, &sealed, &err) < 0 ||
		    crypt_open_buf(sealed.data, sealed.len, key, &ctx, &out, &err) < 0 ||
		    out.len != size - 1 || (out.len && memcmp(out.data, data + 1, out.len)))
			abort();
	} else {
		int fd = memfd_create("fuzz-out", 0);
		struct crypt_opener *o;

		if (crypt_open_buf(data, size, key, &ctx, &out, &err) == 0)
			abort();  /* a forged object opened */
		/* the same bytes through the in-order opener, in pieces of 3 */
		if (fd < 0)
			abort();
		o = crypt_opener_new(fd, key, &ctx);
		for (size_t pos = 0; pos < size; pos += 3)
			if (crypt_opener_write(o, data + pos, size - pos < 3 ? size - pos : 3) < 0)
				break;
		if (crypt_opener_finish(o, NULL, &err) == 0)
			abort();
		crypt_opener_free(o);
		close(fd);
	}
	buf_free(&out);
	buf_free(&sealed);
	return 0;
}
