/* util.h - allocation, automatic cleanup, a growable byte buffer, small helpers.
 *
 * Out of memory aborts through xmalloc and friends: callers never check.
 * Cleanup attributes follow systemd/crun:
 *     _cleanup_free_ char *p = xstrdup(s);     freed at scope exit
 *     _cleanup_close_ int fd = open(...);      closed at scope exit (if >= 0)
 *     return TAKE_PTR(p); / return TAKE_FD(fd); hands ownership out.
 */
#ifndef AIRLOCK_UTIL_H
#define AIRLOCK_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t sz);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* Caller owns the result. */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static inline void freep(void *p) { free(*(void **)p); }
static inline void closep(int *fd) { if (*fd >= 0) close(*fd); }
#define _cleanup_(f) __attribute__((cleanup(f)))
#define _cleanup_free_ _cleanup_(freep)
#define _cleanup_close_ _cleanup_(closep)
#define TAKE_PTR(p) ({ __typeof__(p) _t = (p); (p) = NULL; _t; })
#define TAKE_FD(fd) ({ int _t = (fd); (fd) = -1; _t; })
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Growable buffer. Always NUL-terminated after data (not counted in len). */
struct buf {
	char *data;
	size_t len, cap;
};
void buf_init(struct buf *b);
void buf_free(struct buf *b);            /* accepts a zeroed or freed buffer */
void buf_reset(struct buf *b);           /* len = 0, keeps memory */
void buf_add(struct buf *b, const void *p, size_t n);
void buf_adds(struct buf *b, const char *s);
void buf_addc(struct buf *b, char c);
void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_vprintf(struct buf *b, const char *fmt, va_list ap);
/* Returns data (caller owns) and leaves the buffer empty. */
char *buf_steal(struct buf *b);

/* Monotonic and wall clocks. */
#define ISO_TIME_MAX 40
uint64_t now_ms(void);        /* CLOCK_MONOTONIC, milliseconds */
uint64_t now_us(void);        /* CLOCK_MONOTONIC, microseconds */
int64_t wall_ms(void);        /* CLOCK_REALTIME, ms since epoch */
/* ms since the epoch as "YYYY-MM-DDTHH:MM:SS.mmmZ" (UTC), NUL-terminated. */
void iso_time(int64_t ms, char out[ISO_TIME_MAX]);

/* Raise the soft open-files limit to the hard one: a server holding an fd
 * or two per connection would stop at 1024 (a login shell's soft limit)
 * long before the hard limit. Servers call it for themselves; nodemgr does
 * not, so sandboxes keep the limit they were given. */
void raise_fd_limit(void);

/* Fill with bytes from getrandom(2); aborts if the kernel cannot supply them. */
void random_bytes(void *p, size_t n);
/* Random id: prefix + n_bytes of randomness as lowercase hex. Caller owns. */
char *random_id(const char *prefix, size_t n_bytes);

/* Base64 (standard alphabet, padded). Caller owns results. decode returns -1 on bad input. */
char *base64_encode(const void *p, size_t n);
int base64_decode(const char *s, size_t slen, struct buf *out);
/* The value of one hex digit, or -1. */
int hexval(int c);

/* Does host name `host` match `pattern`? A pattern "*.example.org" matches
 * every name below example.org and not example.org itself; any other
 * pattern matches only itself. ASCII case is ignored and one trailing dot
 * of host is too, so both an unnormalised name (a request's Host) and a
 * normalised one (policy_host_valid's) compare right. */
bool host_match(const char *pattern, const char *host);

/* Write/read all bytes, retrying on EINTR and short counts. -errno on failure. */
int write_all(int fd, const void *p, size_t n);
int read_all(int fd, void *p, size_t n);     /* -EPIPE on early EOF */
/* Read a whole small file (up to max bytes); -errno on failure. */
int read_file(const char *path, size_t max, struct buf *out);
int write_file(const char *path, const void *p, size_t n, int mode);  /* atomic: tmp + rename */
int mkdir_p(const char *path, int mode);

#endif
