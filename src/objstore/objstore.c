/* objstore.c - the driver-neutral half: the URL picks the driver, keys are
 * checked once here, and the buffer/fd forms of put and get are reduced to
 * the drivers' source and sink. */
#include "objstore-internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/util.h"

struct objstore *objstore_open(const char *url, const struct objstore_opts *opts, err_t *err)
{
	if (!url) {
		err_set(err, EINVAL, "objstore: no URL");
		return NULL;
	}
	if (strncmp(url, "file://", 7) == 0)
		return os_file_open(url + 7, opts, err);
	if (strncmp(url, "s3://", 5) == 0)
		return os_s3_open(url + 5, opts, err);
	err_set(err, EINVAL, "objstore: `%.200s`: not a file:// or s3:// URL", url);
	return NULL;
}

void objstore_close(struct objstore *os)
{
	if (os)
		os->ops->close(os);
}

const char *objstore_driver(const struct objstore *os)
{
	return os->ops->name;
}

void os_opts_init(struct objstore *os, const struct objstore_opts *opts)
{
	struct objstore_opts o = { 0 };
	const char *ak, *sk;

	if (opts)
		o = *opts;
	ak = o.access_key ? o.access_key : getenv("AWS_ACCESS_KEY_ID");
	sk = o.secret_key ? o.secret_key : getenv("AWS_SECRET_ACCESS_KEY");
	o.access_key = ak ? xstrdup(ak) : NULL;
	o.secret_key = sk ? xstrdup(sk) : NULL;
	if (o.timeout_ms <= 0)
		o.timeout_ms = 30000;
	if (o.retries <= 0)
		o.retries = 4;
	if (o.part_size == 0)
		o.part_size = 16ull << 20;
	if (o.parallel <= 0)
		o.parallel = 4;
	if (o.parallel > 64)
		o.parallel = 64;
	os->opts = o;
}

void os_opts_free(struct objstore *os)
{
	free((char *)os->opts.access_key);
	free((char *)os->opts.secret_key);
}

static bool seg_char(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '_' || c == '-';
}

bool objstore_key_valid(const char *key)
{
	size_t n, seg = 0;

	if (!key)
		return false;
	n = strnlen(key, 1025);
	if (n == 0 || n > 1024)
		return false;
	for (size_t i = 0; i <= n; i++) {
		if (i < n && key[i] != '/') {
			if (!seg_char(key[i]))
				return false;
			continue;
		}
		/* the segment key[seg, i) */
		if (i == seg || (i - seg == 1 && key[seg] == '.') ||
		    (i - seg == 2 && key[seg] == '.' && key[seg + 1] == '.'))
			return false;
		seg = i + 1;
	}
	return true;
}

static int bad_key(const char *key, err_t *err)
{
	return err_set(err, EINVAL, "objstore: invalid key `%.200s`", key ? key : "(null)");
}

int os_src_read(const struct os_src *s, uint64_t pos, void *p, size_t n)
{
	char *c = p;

	if (pos + n > s->size)
		return -EINVAL;
	if (s->read_at)
		return s->read_at(s->arg, pos, p, n);
	if (s->buf) {
		memcpy(p, s->buf + pos, n);
		return 0;
	}
	while (n) {
		ssize_t r = s->off >= 0 ? pread(s->fd, c, n, s->off + (off_t)pos)
					: read(s->fd, c, n);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -EPIPE;
		c += r;
		pos += (uint64_t)r;
		n -= (size_t)r;
	}
	return 0;
}

static int put(struct objstore *os, const char *key, const struct os_src *src,
	       char sha256_hex[OBJSTORE_SHA256_HEX], err_t *err)
{
	char hex[OBJSTORE_SHA256_HEX];
	int r;

	if (!objstore_key_valid(key))
		return bad_key(key, err);
	r = os->ops->put(os, key, src, hex, err);
	if (r == 0 && sha256_hex)
		memcpy(sha256_hex, hex, sizeof(hex));
	return r;
}

int objstore_put_fd(struct objstore *os, const char *key, int fd, uint64_t size,
		    char sha256_hex[OBJSTORE_SHA256_HEX], err_t *err)
{
	struct os_src src = { .fd = fd, .size = size };

	/* a pipe or socket has no offset: read it in order */
	src.off = lseek(fd, 0, SEEK_CUR);
	if (src.off < 0)
		src.off = -1;
	return put(os, key, &src, sha256_hex, err);
}

int objstore_put_buf(struct objstore *os, const char *key, const void *buf, uint64_t size,
		     char sha256_hex[OBJSTORE_SHA256_HEX], err_t *err)
{
	struct os_src src = { .buf = buf ? buf : "", .fd = -1, .off = 0, .size = size };

	return put(os, key, &src, sha256_hex, err);
}

void os_src_stored(const struct os_src *s, uint64_t n)
{
	if (s->progress)
		s->progress(s->arg, n);
}

int objstore_put_hashed(struct objstore *os, const char *key, int fd, uint64_t size,
			const char sha256_hex[OBJSTORE_SHA256_HEX], objstore_progress_fn progress,
			void *arg, err_t *err)
{
	struct os_src src = { .fd = fd, .off = 0, .size = size, .progress = progress, .arg = arg,
			      .sha256 = sha256_hex };

	if (!sha256_hex || !sha256_hex_ok(sha256_hex))
		return err_set(err, EINVAL, "objstore put %s: not a SHA-256 in hex", key);
	return put(os, key, &src, NULL, err);
}

static int fd_write(void *arg, const void *p, size_t n)
{
	return write_all(*(int *)arg, p, n);
}

struct mem_sink {
	struct buf b;
	uint64_t max;
};

static int mem_write(void *arg, const void *p, size_t n)
{
	struct mem_sink *m = arg;

	if (m->b.len + n > m->max)
		return -EFBIG;
	buf_add(&m->b, p, n);
	return 0;
}

static int get(struct objstore *os, const char *key, const struct os_sink *sink, uint64_t *size,
	       char sha256_hex[OBJSTORE_SHA256_HEX], err_t *err)
{
	char hex[OBJSTORE_SHA256_HEX];
	uint64_t sz = 0;
	int r;

	if (!objstore_key_valid(key))
		return bad_key(key, err);
	r = os->ops->get(os, key, sink, &sz, hex, err);
	if (r < 0)
		return r;
	if (size)
		*size = sz;
	if (sha256_hex)
		memcpy(sha256_hex, hex, sizeof(hex));
	return 0;
}

int objstore_get_fd(struct objstore *os, const char *key, int fd, uint64_t *size,
		    char sha256_hex[OBJSTORE_SHA256_HEX], err_t *err)
{
	struct os_sink sink = { fd_write, &fd };

	return get(os, key, &sink, size, sha256_hex, err);
}

int objstore_get_writer(struct objstore *os, const char *key,
			int (*write)(void *arg, const void *p, size_t n), void *arg,
			uint64_t *size, char sha256_hex[OBJSTORE_SHA256_HEX], err_t *err)
{
	struct os_sink sink = { write, arg };

	return get(os, key, &sink, size, sha256_hex, err);
}

int objstore_get_buf(struct objstore *os, const char *key, uint64_t max, char **buf,
		     uint64_t *size, err_t *err)
{
	struct mem_sink m = { .max = max };
	struct os_sink sink = { mem_write, &m };
	uint64_t sz = 0;
	int r;

	buf_init(&m.b);
	r = get(os, key, &sink, &sz, NULL, err);
	if (r < 0) {
		buf_free(&m.b);
		return r;
	}
	if (!m.b.data)
		buf_add(&m.b, "", 0);
	*buf = buf_steal(&m.b);
	if (size)
		*size = sz;
	return 0;
}

int objstore_head(struct objstore *os, const char *key, uint64_t *size,
		  char sha256_hex[OBJSTORE_SHA256_HEX], err_t *err)
{
	char hex[OBJSTORE_SHA256_HEX];
	uint64_t sz = 0;
	int r;

	if (!objstore_key_valid(key))
		return bad_key(key, err);
	r = os->ops->head(os, key, &sz, hex, err);
	if (r < 0)
		return r;
	if (size)
		*size = sz;
	if (sha256_hex)
		memcpy(sha256_hex, hex, sizeof(hex));
	return 0;
}

int objstore_delete(struct objstore *os, const char *key, err_t *err)
{
	if (!objstore_key_valid(key))
		return bad_key(key, err);
	return os->ops->del(os, key, err);
}

int objstore_list(struct objstore *os, const char *prefix, objstore_list_fn fn, void *arg,
		  err_t *err)
{
	return os->ops->list(os, prefix ? prefix : "", fn, arg, err);
}
