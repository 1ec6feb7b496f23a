/* guestconn.h - the node's side of the private channel to one airlock-guest.
 *
 * Every byte read here comes from inside a sandbox and is untrusted: frames are
 * parsed by src/proto (size-limited, fuzzed). A misbehaving guest can only
 * cause its own connection to be closed (on_closed), never harm the node.
 *
 * Threading: guestconn_open starts one reader thread per connection. Requests
 * (exec, file ops, ...) may be issued from any thread concurrently; each waits
 * for its own reply (matched by request id) up to timeout_ms. Callbacks run on
 * the reader thread and must not block for long or call back into the same
 * guestconn synchronously.
 */
#ifndef AIRLOCK_GUESTCONN_H
#define AIRLOCK_GUESTCONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../lib/err.h"
#include "../lib/util.h"

struct guestconn_cbs {
	/* Output of process `pid`: fd 1 or 2, `off` = byte offset of data[0]
	 * within that fd's stream (starts at 0 per process and fd). */
	void (*on_output)(void *arg, uint32_t pid, int fd, uint64_t off, const void *data,
			  size_t len);
	/* Process ended: exit_code >= 0 for exit, or signal > 0 when killed. */
	void (*on_exit)(void *arg, uint32_t pid, int exit_code, int signal);
	/* Channel closed or protocol violation; called once. reason is borrowed. */
	void (*on_closed)(void *arg, const char *reason);
};

struct guest_hello {
	uint32_t version;      /* protocol version the guest speaks */
	char boot_id[64];      /* random per guest start */
};

struct exec_spec {
	char **argv;           /* NULL-terminated, argv[0] looked up in PATH */
	char **env;            /* NULL-terminated "K=V", may be NULL (guest default env) */
	const char *cwd;       /* NULL = "/" (or the user's home) */
	uint32_t uid, gid;     /* inside the sandbox */
	bool pty;              /* allocate a pseudo-terminal (stdout only, fd 1) */
	uint16_t rows, cols;   /* pty size */
	bool stdin_open;       /* keep stdin open for guestconn_stdin, else /dev/null */
};

struct guest_stat {
	char type;             /* 'f' file, 'd' dir, 'l' symlink, 'o' other */
	uint64_t size;
	uint32_t mode;         /* permission bits */
	int64_t mtime_ms;
	uint32_t uid, gid;
};

struct guest_dirent {
	char *name;            /* owned by the array; freed by guest_dirents_free */
	struct guest_stat st;
};
void guest_dirents_free(struct guest_dirent *d, size_t n);

struct guest_status {
	int64_t last_activity_ms;  /* guest wall clock, ms since epoch */
	uint64_t uptime_ms;
	uint32_t n_procs;          /* live processes started by exec */
	uint64_t cpu_ms;           /* CPU time of those (and reaped ones); 0 = not reported */
};

struct guestconn;

/* Takes ownership of fd (the host end of the channel). Waits up to timeout_ms
 * for the guest's HELLO (the guest always speaks first), then READY, then
 * starts the reader thread. On failure closes fd and returns NULL. */
struct guestconn *guestconn_open(int fd, const struct guestconn_cbs *cbs, void *arg,
				 int timeout_ms, struct guest_hello *hello, err_t *err);
/* Stops the reader thread, closes fd, fails pending requests. Accepts NULL.
 * Must not be called from a callback. */
void guestconn_close(struct guestconn *gc);
bool guestconn_alive(struct guestconn *gc);
/* Per-request timeout for everything below (default 60 s). A request that
 * times out returns -ETIMEDOUT; a late reply is then dropped. */
void guestconn_set_timeout(struct guestconn *gc, int timeout_ms);

/* Errors from the guest carry its errno in err->code (ENOENT, EISDIR, ...).
 * on_output for a new process can run before guestconn_exec has returned its
 * pid to the caller: callbacks must accept a pid they have not seen yet. */
int guestconn_exec(struct guestconn *gc, const struct exec_spec *spec, uint32_t *pid,
		   err_t *err);
int guestconn_stdin(struct guestconn *gc, uint32_t pid, const void *p, size_t n, bool eof,
		    err_t *err);
int guestconn_signal(struct guestconn *gc, uint32_t pid, int sig, err_t *err);
int guestconn_resize(struct guestconn *gc, uint32_t pid, uint16_t rows, uint16_t cols,
		     err_t *err);

/* Files. Paths are absolute paths inside the sandbox. Reads are limited to
 * max bytes (-EFBIG beyond). Writes are atomic (temp file + rename in the
 * guest) and create missing parent directories. */
int guestconn_file_read(struct guestconn *gc, const char *path, size_t max, struct buf *out,
			err_t *err);
int guestconn_file_write(struct guestconn *gc, const char *path, const void *p, size_t n,
			 uint32_t mode, err_t *err);
int guestconn_stat(struct guestconn *gc, const char *path, struct guest_stat *st, err_t *err);
int guestconn_list(struct guestconn *gc, const char *path, struct guest_dirent **ents,
		   size_t *n, err_t *err);
int guestconn_mkdir(struct guestconn *gc, const char *path, bool parents, err_t *err);
int guestconn_remove(struct guestconn *gc, const char *path, bool recursive, err_t *err);
int guestconn_rename(struct guestconn *gc, const char *from, const char *to, err_t *err);

int guestconn_status(struct guestconn *gc, struct guest_status *st, err_t *err);

/* RESET: what clones of one memory snapshot must not share. Send it after a
 * restore or fork, before the sandbox is handed out; success means the guest
 * has reseeded its RNG, set its clock, hostname and /etc/machine-id. All
 * pointers are borrowed. Invalid values fail here with EINVAL. */
struct guest_reset {
	bool set_clock;          /* set the guest's clock to ours, read just before sending */
	uint64_t wall_ns;        /* if non-zero: this CLOCK_REALTIME instead (ns since epoch) */
	const void *entropy;     /* NULL: 64 fresh bytes from getrandom(2) */
	size_t entropy_len;      /* 32..512 when entropy is given */
	const char *hostname;    /* required: letters, digits, '-', '.'; at most 64 */
	const char *machine_id;  /* NULL: a fresh random one; else 32 lowercase hex */
	/* eth0 and /etc/resolv.conf (vm): IPv4 in host order; net_addr 0 =
	 * leave the guest's network alone. */
	uint32_t net_addr, net_gateway, net_dns;
	uint8_t net_prefix;
};
int guestconn_reset(struct guestconn *gc, const struct guest_reset *r, err_t *err);

/* SYNC: the guest runs sync(2); success means what its filesystems hold in
 * their page cache reached their disks (before a disk snapshot). */
int guestconn_sync(struct guestconn *gc, err_t *err);
/* RECLAIM (vm guests): the guest syncs, drops its clean page cache and
 * leaves the pages it has free zeroed (guest reclaim.c), so a memory
 * snapshot taken next holds no copy of what its files already hold, and
 * no stale bytes in free pages. Only a cost of the moment: the guest
 * carries on with a cold page cache. -ENOSYS from an agent without it. */
int guestconn_reclaim(struct guestconn *gc, err_t *err);
/* ---- port streams -------------------------------------------------------
 * A TCP connection the guest agent opens to 127.0.0.1:port inside the
 * sandbox (PORT_* frames). Flow control: the guest never has more than
 * PROTO_PORT_WINDOW bytes in flight towards us per stream, and we consume
 * (and acknowledge) only what gstream_read hands out, so a stream buffers at
 * most one window in the node; gstream_write sends only within the credit
 * the guest granted. One thread drives a stream at a time. */
struct gstream;

/* Connect; waits for the guest's answer (timeout as for requests). On
 * failure err->code is the guest's errno (ECONNREFUSED for a closed port).
 * Caller owns the stream: gstream_close it before the guestconn is closed. */
struct gstream *guestconn_port_open(struct guestconn *gc, uint16_t port, err_t *err);
/* An eventfd that is readable whenever data, credit, a shut or a close
 * arrived; poll it for POLLIN. Borrowed. Only the thread that drives the
 * stream clears it (gstream_clear), and always before it looks at the
 * stream's state: what arrives after the clear sets it again, so no
 * wake-up is lost. */
int gstream_fd(const struct gstream *s);
void gstream_clear(struct gstream *s);
/* Up to n bytes the guest sent: > 0 bytes, 0 at the guest's EOF (PORT_SHUT,
 * everything read), -EAGAIN nothing yet, or -errno when the stream was reset
 * (by the guest, a channel close or guestconn_ports_abort). */
ssize_t gstream_read(struct gstream *s, void *p, size_t n);
/* Send up to n bytes, as much as the credit allows: returns the count (0
 * when there is no credit now), or -errno when the stream or channel is gone. */
ssize_t gstream_write(struct gstream *s, const void *p, size_t n);
/* Our direction ended (EOF from our client): PORT_SHUT. */
int gstream_shut(struct gstream *s);
/* Reset unless the guest already closed it, then free. Accepts NULL. */
void gstream_close(struct gstream *s);
/* Reset every stream of gc now (teardown must not wait for the clients of
 * long-lived tunnels); their users see -ECONNRESET. Takes only gc's own
 * lock, sends nothing, never blocks: callable with the sandbox's lock held. */
void guestconn_ports_abort(struct guestconn *gc);

/* ---- file watches --------------------------------------------------------
 * inotify in the guest on a path (recursive: every directory under it),
 * WATCH_* frames. Events wait in a queue of at most max_queue entries per
 * watch; when its reader is slower than the guest, new events are dropped
 * and one GW_OVERFLOW entry marks where (as the guest's own overflow). */
enum guest_watch_kind { GW_CREATE = 1, GW_WRITE, GW_REMOVE, GW_RENAME, GW_OVERFLOW };

struct guest_watch_event {
	int kind;              /* GW_* */
	bool dir;
	char *path;            /* relative to the watched path ("" = itself); NULL
				* for GW_OVERFLOW. Bytes from the guest: any but NUL. */
	char *path2;           /* GW_RENAME: the new path */
};
void guest_watch_event_free(struct guest_watch_event *ev);

struct guest_watch;
/* Start a watch (waits for the guest's answer). err->code is the guest's
 * errno: ENOENT, ENOSPC (too many directories), EMFILE (too many watches).
 * Caller owns it: guest_watch_stop it before the guestconn is closed. */
struct guest_watch *guestconn_watch_start(struct guestconn *gc, const char *path,
					  bool recursive, size_t max_queue, err_t *err);
/* Readable (POLLIN) when events arrived or the watch ended; same contract
 * as gstream_fd / gstream_clear. Borrowed. */
int guest_watch_fd(const struct guest_watch *w);
void guest_watch_clear(struct guest_watch *w);
/* 1: *ev is the oldest event (caller frees it), 0: none now, -errno: the
 * watch ended (ECONNRESET: channel closed or guestconn_watches_abort). */
int guest_watch_next(struct guest_watch *w, struct guest_watch_event *ev);
/* The watch ended (events may still be queued). */
bool guest_watch_ended(struct guest_watch *w);
/* WATCH_STOP unless the channel is gone, then free. Accepts NULL. */
void guest_watch_stop(struct guest_watch *w);
/* End every watch of gc now; as guestconn_ports_abort (no I/O, own lock). */
void guestconn_watches_abort(struct guestconn *gc);

#endif
