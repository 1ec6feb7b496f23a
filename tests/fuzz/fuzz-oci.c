/* fuzz-oci: the parsers of an image's untrusted bytes (src/oci). The first
 * byte picks one:
 *   0  a layer: the tar reader over the rest, every entry's name cleaned
 *      and its data read (bounded: the reader must never read past the
 *      input, loop, or accept a name over TAR_NAME_MAX);
 *   1  the same through the decompressing stream (the rest written to a
 *      memfd: gzip and zstd are detected by magic, else plain);
 *   2  an image config: JSON parsed with src/lib/json.c, then normalised;
 *      whatever it writes must parse back.
 * The applier's writes are tested in tests/unit/test-oci.c and
 * tests/e2e/test_oci.py; here nothing touches the file system but a
 * memfd. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../src/oci/oci.h"

static void walk(struct tar_reader *tr)
{
	struct tar_entry *e;
	char clean[TAR_NAME_MAX + 1], chunk[4096];
	err_t err = { 0 };
	int n = 0;

	while (n++ < 10000 && tar_next(tr, &e, &err) > 0) {
		if (strlen(e->name) > TAR_NAME_MAX || strlen(e->linkname) > TAR_NAME_MAX)
			abort();
		if (oci_clean_path(e->name, clean) == 0 && strstr(clean, "/../"))
			abort();
		while (tar_read(tr, chunk, sizeof(chunk), &err) > 0)
			;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	switch (data[0] % 3) {
	case 0: {
		struct tar_mem m = { .p = data + 1, .len = size - 1 };
		struct tar_reader tr;
		tar_init(&tr, tar_mem_read, &m);
		walk(&tr);
		if (m.off > m.len)
			abort();
		tar_free(&tr);
		break;
	}
	case 1: {
		int fd = memfd_create("fuzz-oci", MFD_CLOEXEC);
		err_t err = { 0 };
		struct oci_stream *s;
		if (fd < 0 || write_all(fd, data + 1, size - 1) < 0) {
			if (fd >= 0)
				close(fd);
			break;
		}
		s = oci_stream_open(fd, 0, size - 1, &err);
		if (s) {
			struct tar_reader tr;
			tar_init(&tr, oci_stream_read, s);
			walk(&tr);
			tar_free(&tr);
			oci_stream_close(s);
		}
		close(fd);
		break;
	}
	case 2: {
		err_t err = { 0 };
		json *j = json_parse((const char *)data + 1, size - 1, &err);
		struct buf out;
		buf_init(&out);
		if (j && oci_config_normalize(j, &out, &err) == 0) {
			json *back = json_parse(out.data, out.len, &err);
			if (!back)
				abort();
			json_free(back);
		}
		json_free(j);
		buf_free(&out);
		break;
	}
	}
	return 0;
}
