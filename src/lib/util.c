#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

static void oom(void)
{
	static const char m[] = "out of memory\n";
	(void)!write(2, m, sizeof(m) - 1);
	abort();
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		oom();
	return p;
}

void *xcalloc(size_t n, size_t sz)
{
	void *p = calloc(n ? n : 1, sz ? sz : 1);
	if (!p)
		oom();
	return p;
}

void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		oom();
	return p;
}

char *xstrdup(const char *s)
{
	char *p = strdup(s ? s : "");
	if (!p)
		oom();
	return p;
}

char *xstrndup(const char *s, size_t n)
{
	char *p = strndup(s, n);
	if (!p)
		oom();
	return p;
}

char *xasprintf(const char *fmt, ...)
{
	struct buf b;
	va_list ap;

	buf_init(&b);
	va_start(ap, fmt);
	buf_vprintf(&b, fmt, ap);
	va_end(ap);
	return buf_steal(&b);
}

void buf_init(struct buf *b)
{
	b->data = NULL;
	b->len = b->cap = 0;
}

void buf_free(struct buf *b)
{
	free(b->data);
	buf_init(b);
}

void buf_reset(struct buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

static void buf_grow(struct buf *b, size_t extra)
{
	size_t need = b->len + extra + 1;

	if (need <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap *= 2;
	b->data = xrealloc(b->data, cap);
	b->cap = cap;
}

void buf_add(struct buf *b, const void *p, size_t n)
{
	buf_grow(b, n);
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
}

void buf_adds(struct buf *b, const char *s)
{
	buf_add(b, s, strlen(s));
}

void buf_addc(struct buf *b, char c)
{
	buf_add(b, &c, 1);
}

void buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
	va_list ap2;
	int n;

	va_copy(ap2, ap);
	n = vsnprintf(NULL, 0, fmt, ap2);
	va_end(ap2);
	if (n < 0)
		return;
	buf_grow(b, (size_t)n);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	b->len += (size_t)n;
}

void buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	buf_vprintf(b, fmt, ap);
	va_end(ap);
}

char *buf_steal(struct buf *b)
{
	char *p = b->data ? b->data : xstrdup("");
	buf_init(b);
	return p;
}

void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t now_ms(void)
{
	return now_us() / 1000u;
}

int64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void random_bytes(void *p, size_t n)
{
	unsigned char *c = p;

	while (n) {
		ssize_t r = getrandom(c, n, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			abort();
		}
		c += r;
		n -= (size_t)r;
	}
}

char *random_id(const char *prefix, size_t n_bytes)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char raw[64];
	struct buf b;

	if (n_bytes > sizeof(raw))
		n_bytes = sizeof(raw);
	random_bytes(raw, n_bytes);
	buf_init(&b);
	buf_adds(&b, prefix ? prefix : "");
	for (size_t i = 0; i < n_bytes; i++) {
		buf_addc(&b, hex[raw[i] >> 4]);
		buf_addc(&b, hex[raw[i] & 15]);
	}
	return buf_steal(&b);
}

static const char b64[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *base64_encode(const void *p, size_t n)
{
	const unsigned char *s = p;
	struct buf b;
	size_t i;

	buf_init(&b);
	buf_grow(&b, (n + 2) / 3 * 4);
	for (i = 0; i + 2 < n; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
		char q[4] = { b64[v >> 18], b64[(v >> 12) & 63], b64[(v >> 6) & 63], b64[v & 63] };
		buf_add(&b, q, 4);
	}
	if (i < n) {
		uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0);
		char q[4] = { b64[v >> 18], b64[(v >> 12) & 63],
			      i + 1 < n ? b64[(v >> 6) & 63] : '=', '=' };
		buf_add(&b, q, 4);
	}
	return buf_steal(&b);
}

static int b64val(char c)
{
	if (c >= 'A' && c <= 'Z') return c - 'A';
	if (c >= 'a' && c <= 'z') return c - 'a' + 26;
	if (c >= '0' && c <= '9') return c - '0' + 52;
	if (c == '+') return 62;
	if (c == '/') return 63;
	return -1;
}

int base64_decode(const char *s, size_t slen, struct buf *out)
{
	uint32_t acc = 0;
	int bits = 0;
	size_t i, pad = 0;

	for (i = 0; i < slen; i++) {
		if (s[i] == '=') {
			pad++;
			continue;
		}
		if (pad)
			return -1; /* data after padding */
		int v = b64val(s[i]);
		if (v < 0)
			return -1;
		acc = acc << 6 | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			buf_addc(out, (char)((acc >> bits) & 0xff));
		}
	}
	if (pad > 2)
		return -1;
	return 0;
}

int write_all(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n) {
		ssize_t w = write(fd, c, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

int read_all(int fd, void *p, size_t n)
{
	char *c = p;

	while (n) {
		ssize_t r = read(fd, c, n);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -EPIPE;
		c += r;
		n -= (size_t)r;
	}
	return 0;
}

int read_file(const char *path, size_t max, struct buf *out)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	char tmp[4096];

	if (fd < 0)
		return -errno;
	for (;;) {
		ssize_t r = read(fd, tmp, sizeof(tmp));
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return 0;
		if (out->len + (size_t)r > max)
			return -EFBIG;
		buf_add(out, tmp, (size_t)r);
	}
}

int write_file(const char *path, const void *p, size_t n, int mode)
{
	_cleanup_free_ char *tmp = xasprintf("%s.tmp.%d", path, (int)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	int r;

	if (fd < 0)
		return -errno;
	r = write_all(fd, p, n);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	close(fd);
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0)
		unlink(tmp);
	return r;
}

int mkdir_p(const char *path, int mode)
{
	_cleanup_free_ char *p = xstrdup(path);

	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, (mode_t)mode) < 0 && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	if (mkdir(p, (mode_t)mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

void iso_time(int64_t ms, char out[ISO_TIME_MAX])
{
	time_t s = (time_t)(ms / 1000);
	struct tm tm;
	size_t n;

	gmtime_r(&s, &tm);
	n = strftime(out, ISO_TIME_MAX, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + n, ISO_TIME_MAX - n, ".%03uZ", (unsigned)((ms % 1000 + 1000) % 1000));
}

int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

bool host_match(const char *pattern, const char *host)
{
	size_t hn = strlen(host), pn;

	if (hn && host[hn - 1] == '.')
		hn--;
	if (strncmp(pattern, "*.", 2) == 0) {
		pn = strlen(pattern + 1);   /* ".suffix" */
		return hn > pn && strncasecmp(host + hn - pn, pattern + 1, pn) == 0;
	}
	pn = strlen(pattern);
	return hn == pn && strncasecmp(host, pattern, pn) == 0;
}
