/* tar.c - the bounded tar reader (tar.h). Every byte here is untrusted. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../lib/util.h"
#include "tar.h"

#define BLOCK 512

void tar_init(struct tar_reader *tr, tar_read_fn fn, void *ctx)
{
	memset(tr, 0, sizeof(*tr));
	tr->read = fn;
	tr->ctx = ctx;
	tr->name = xmalloc(TAR_NAME_MAX + 1);
	tr->link = xmalloc(TAR_NAME_MAX + 1);
}

void tar_free(struct tar_reader *tr)
{
	free(tr->name);
	free(tr->link);
	tr->name = tr->link = NULL;
}

ssize_t tar_mem_read(void *ctx, void *p, size_t n, err_t *err)
{
	struct tar_mem *m = ctx;
	size_t k = m->len - m->off < n ? m->len - m->off : n;

	(void)err;
	memcpy(p, m->p + m->off, k);
	m->off += k;
	return (ssize_t)k;
}

/* Exactly n bytes, or an error: a short stream is a truncated archive. */
static int read_exact(struct tar_reader *tr, void *p, size_t n, err_t *err)
{
	size_t got = 0;

	while (got < n) {
		ssize_t k = tr->read(tr->ctx, (char *)p + got, n - got, err);
		if (k < 0)
			return (int)k;
		if (k == 0)
			return err_set(err, EPROTO, "truncated tar at byte %llu",
				       (unsigned long long)(tr->offset + got));
		got += (size_t)k;
	}
	tr->offset += n;
	return 0;
}

static int skip(struct tar_reader *tr, uint64_t n, err_t *err)
{
	char sink[4096];

	while (n) {
		size_t k = n < sizeof(sink) ? (size_t)n : sizeof(sink);
		int r = read_exact(tr, sink, k, err);
		if (r < 0)
			return r;
		n -= k;
	}
	return 0;
}

/* A numeric field: octal (NUL/space padded) or GNU base-256 (high bit of
 * the first byte set, positive values only). */
static int parse_num(const char *f, size_t len, uint64_t max, uint64_t *out)
{
	const unsigned char *u = (const unsigned char *)f;
	uint64_t v = 0;
	size_t i = 0;

	if (u[0] & 0x80) {
		if (u[0] != 0x80)
			return -1;   /* negative, or more than 63 bits */
		for (i = 1; i < len; i++) {
			if (v >> 55)
				return -1;
			v = (v << 8) | u[i];
		}
	} else {
		while (i < len && (f[i] == ' ' || f[i] == '\0'))
			i++;
		for (; i < len && f[i] >= '0' && f[i] <= '7'; i++) {
			if (v >> 60)
				return -1;
			v = v * 8 + (uint64_t)(f[i] - '0');
		}
		for (; i < len; i++)
			if (f[i] != ' ' && f[i] != '\0')
				return -1;
	}
	if (v > max)
		return -1;
	*out = v;
	return 0;
}

static bool checksum_ok(const unsigned char *h)
{
	uint64_t want;
	unsigned long su = 0;
	long ss = 0;

	if (parse_num((const char *)h + 148, 8, 0xffffff, &want) < 0)
		return false;
	for (int i = 0; i < BLOCK; i++) {
		unsigned char c = (i >= 148 && i < 156) ? ' ' : h[i];
		su += c;
		ss += (signed char)c;
	}
	return su == want || (uint64_t)ss == want;
}

/* Copy a fixed field (not necessarily NUL-terminated) as a string. */
static size_t field(char *out, const unsigned char *f, size_t len)
{
	size_t n = strnlen((const char *)f, len);

	memcpy(out, f, n);
	out[n] = '\0';
	return n;
}

/* The data of a GNU 'L'/'K' record: a name of up to TAR_NAME_MAX bytes. */
static int read_long(struct tar_reader *tr, uint64_t size, char *out, err_t *err)
{
	uint64_t pad = (BLOCK - size % BLOCK) % BLOCK;
	int r;

	if (size == 0 || size > TAR_NAME_MAX)
		return err_set(err, EPROTO, "GNU long name of %llu bytes", (unsigned long long)size);
	if ((r = read_exact(tr, out, (size_t)size, err)) < 0 || (r = skip(tr, pad, err)) < 0)
		return r;
	out[size] = '\0';
	if (strlen(out) == 0)
		return err_set(err, EPROTO, "empty GNU long name");
	out[strnlen(out, (size_t)size)] = '\0';
	return 0;
}

struct pax {
	bool have_path, have_link, have_size, have_uid, have_gid, have_mtime;
	uint64_t size, uid, gid;
	int64_t mtime;
};

static int pax_num(const char *v, size_t len, uint64_t max, uint64_t *out)
{
	uint64_t x = 0;
	size_t i = 0;

	if (len == 0)
		return -1;
	for (; i < len && v[i] >= '0' && v[i] <= '9'; i++) {
		if (x > (UINT64_MAX - 9) / 10)
			return -1;
		x = x * 10 + (uint64_t)(v[i] - '0');
	}
	if (i == 0 || (i < len && v[i] != '.') || x > max)
		return -1;
	*out = x;
	return 0;
}

/* Parse a pax extended header's records ("LEN KEY=VALUE\n"), taking the
 * keys that change an entry. */
static int parse_pax(struct tar_reader *tr, const char *d, size_t n, struct pax *px, err_t *err)
{
	size_t off = 0;

	while (off < n) {
		size_t len = 0, i = off;
		const char *key, *eq, *val, *end;

		while (i < n && d[i] >= '0' && d[i] <= '9' && len < n)
			len = len * 10 + (size_t)(d[i++] - '0');
		if (i >= n || d[i] != ' ' || len < 5 || len > n - off || d[off + len - 1] != '\n')
			return err_set(err, EPROTO, "bad pax record at %zu", off);
		key = d + i + 1;
		end = d + off + len - 1;   /* the '\n' */
		eq = memchr(key, '=', (size_t)(end - key));
		if (!eq || eq == key)
			return err_set(err, EPROTO, "bad pax record at %zu", off);
		val = eq + 1;
		size_t klen = (size_t)(eq - key), vlen = (size_t)(end - val);
#define KEY(s) (klen == strlen(s) && memcmp(key, s, klen) == 0)
		if (KEY("path") || KEY("linkpath")) {
			char *out = KEY("path") ? tr->name : tr->link;
			if (vlen == 0 || vlen > TAR_NAME_MAX || memchr(val, '\0', vlen))
				return err_set(err, EPROTO, "pax %.*s of %zu bytes", (int)klen, key, vlen);
			memcpy(out, val, vlen);
			out[vlen] = '\0';
			if (KEY("path"))
				px->have_path = true;
			else
				px->have_link = true;
		} else if (KEY("size")) {
			if (pax_num(val, vlen, INT64_MAX, &px->size) < 0)
				return err_set(err, EPROTO, "bad pax size");
			px->have_size = true;
		} else if (KEY("uid") || KEY("gid")) {
			uint64_t *o = KEY("uid") ? &px->uid : &px->gid;
			if (pax_num(val, vlen, UINT32_MAX - 1, o) < 0)
				return err_set(err, EPROTO, "bad pax %.*s", (int)klen, key);
			*(KEY("uid") ? &px->have_uid : &px->have_gid) = true;
		} else if (KEY("mtime")) {
			uint64_t t;
			if (pax_num(val, vlen, INT64_MAX, &t) == 0) {
				px->mtime = (int64_t)t;
				px->have_mtime = true;
			}
		}
#undef KEY
		off += len;
	}
	return 0;
}

int tar_next(struct tar_reader *tr, struct tar_entry **out, err_t *err)
{
	unsigned char h[BLOCK];
	struct pax px = { 0 };
	bool long_name = false, long_link = false;
	int r, meta = 0;

	if (tr->done)
		return 0;
	if ((r = skip(tr, tr->left + tr->pad, err)) < 0)
		return r;
	tr->left = tr->pad = 0;
	for (;;) {
		uint64_t size, v;
		char type;

		if ((r = read_exact(tr, h, BLOCK, err)) < 0)
			return r;
		bool zero = true;
		for (int i = 0; i < BLOCK && zero; i++)
			zero = h[i] == 0;
		if (zero) {
			if (meta)
				return err_set(err, EPROTO, "tar ends after an extended header");
			/* The end-of-archive marker. A second zero block and any
			 * padding after it are not read: nothing comes after. */
			tr->done = true;
			return 0;
		}
		if (!checksum_ok(h))
			return err_set(err, EPROTO, "bad tar header checksum at byte %llu",
				       (unsigned long long)(tr->offset - BLOCK));
		if (parse_num((const char *)h + 124, 12, INT64_MAX, &size) < 0)
			return err_set(err, EPROTO, "bad size field at byte %llu",
				       (unsigned long long)(tr->offset - BLOCK));
		type = (char)h[156];
		if (++meta > 8)
			return err_set(err, EPROTO, "too many extended headers in a row");
		if (type == 'x' || type == 'g') {
			_cleanup_free_ char *d = NULL;
			uint64_t pad = (BLOCK - size % BLOCK) % BLOCK;
			if (size > TAR_PAX_MAX)
				return err_set(err, EPROTO, "pax header of %llu bytes (limit %u)",
					       (unsigned long long)size, TAR_PAX_MAX);
			d = xmalloc((size_t)size + 1);
			if ((r = read_exact(tr, d, (size_t)size, err)) < 0 ||
			    (r = skip(tr, pad, err)) < 0)
				return r;
			if (type == 'x' && (r = parse_pax(tr, d, (size_t)size, &px, err)) < 0)
				return r;
			continue;
		}
		if (type == 'L' || type == 'K') {
			if ((r = read_long(tr, size, type == 'L' ? tr->name : tr->link, err)) < 0)
				return r;
			*(type == 'L' ? &long_name : &long_link) = true;
			continue;
		}
		/* A real entry. */
		memset(&tr->e, 0, sizeof(tr->e));
		tr->e.type = type == '\0' || type == '7' ? '0' : type;
		if (!px.have_path && !long_name) {
			size_t n = 0;
			/* POSIX ustar: prefix "/" name (GNU's magic has no prefix) */
			if (!memcmp(h + 257, "ustar\0", 6) && h[345]) {
				n = field(tr->name, h + 345, 155);
				tr->name[n++] = '/';
			}
			field(tr->name + n, h, 100);
		}
		if (!px.have_link && !long_link)
			field(tr->link, h + 157, 100);
		if (!tr->name[0])
			return err_set(err, EPROTO, "tar entry without a name at byte %llu",
				       (unsigned long long)(tr->offset - BLOCK));
		tr->e.name = tr->name;
		tr->e.linkname = tr->link;
		if (parse_num((const char *)h + 100, 8, 07777777, &v) < 0)
			return err_set(err, EPROTO, "%s: bad mode", tr->name);
		tr->e.mode = (uint32_t)(v & 07777);
		if (px.have_uid)
			tr->e.uid = (uint32_t)px.uid;
		else if (parse_num((const char *)h + 108, 8, UINT32_MAX - 1, &v) == 0)
			tr->e.uid = (uint32_t)v;
		else
			return err_set(err, EPROTO, "%s: bad uid", tr->name);
		if (px.have_gid)
			tr->e.gid = (uint32_t)px.gid;
		else if (parse_num((const char *)h + 116, 8, UINT32_MAX - 1, &v) == 0)
			tr->e.gid = (uint32_t)v;
		else
			return err_set(err, EPROTO, "%s: bad gid", tr->name);
		if (px.have_mtime)
			tr->e.mtime = px.mtime;
		else if (parse_num((const char *)h + 136, 12, INT64_MAX, &v) == 0)
			tr->e.mtime = (int64_t)v;
		if (type == '3' || type == '4') {
			if (parse_num((const char *)h + 329, 8, 0xfffff, &v) < 0)
				return err_set(err, EPROTO, "%s: bad device major", tr->name);
			tr->e.devmajor = (uint32_t)v;
			if (parse_num((const char *)h + 337, 8, 0xfffff, &v) < 0)
				return err_set(err, EPROTO, "%s: bad device minor", tr->name);
			tr->e.devminor = (uint32_t)v;
		}
		if (px.have_size)
			size = px.size;
		/* Only regular files carry data here; a hardlink's size field
		 * may repeat its target's, and is not data (POSIX). Other types
		 * with data (sparse, ...) are for the caller to refuse. */
		if (tr->e.type == '1' || tr->e.type == '2' || tr->e.type == '5')
			size = 0;
		tr->e.size = size;
		tr->left = size;
		tr->pad = (BLOCK - size % BLOCK) % BLOCK;
		*out = &tr->e;
		return 1;
	}
}

ssize_t tar_read(struct tar_reader *tr, void *p, size_t n, err_t *err)
{
	int r;

	if (n > tr->left)
		n = (size_t)tr->left;
	if (n == 0)
		return 0;
	if ((r = read_exact(tr, p, n, err)) < 0)
		return r;
	tr->left -= n;
	return (ssize_t)n;
}
