/* proto.h - the channel protocol between the node and airlock-guest.
 *
 * Shared by both ends. Every byte that arrives on the node's side comes from
 * inside a sandbox and is untrusted; the decoder therefore never reads past the
 * buffer it is given, limits sizes and counts, and reports malformed input as
 * an error value. It never aborts on input (only xmalloc aborts, on OOM).
 *
 * Wire format (all integers little-endian):
 *
 *   frame  = header payload
 *   header = u32 magic (PROTO_MAGIC, bytes "ALCK") | u8 version (1) | u8 type
 *          | u16 flags | u32 request_id | u32 payload_len          (16 bytes)
 *   payload = field*        field = u16 tag | u32 len | len bytes
 *
 * A whole frame (header + payload) is at most PROTO_MAX_FRAME bytes. Fields
 * are looked up by tag; a singleton tag that appears twice uses the first
 * occurrence; unknown tags are ignored (forward compatibility). A field may
 * hold a nested field sequence (PT_DIRENT).
 *
 * Requests go host -> guest with a non-zero request_id; the guest answers with
 * the same id (OK, ERROR or a typed reply). Unsolicited guest frames (OUTPUT,
 * EXIT, and the HELLO/READY the guest sends unprompted when it starts) carry
 * request_id 0.
 *
 * Multi-frame transfers (file data, long directory listings) set PROTO_F_MORE
 * on every frame but the last one; the last frame is the end marker (it may
 * carry data too, or none).
 *
 * Message types (PT_<NAME>) and their fields (tags PTAG_<NAME>; not PF_,
 * which <sys/socket.h> owns):
 *
 *   HELLO    g->h  VERSION u32, BOOT_ID str. Sent unprompted (id 0) each time
 *                  the agent starts, and as the answer to a host HELLO.
 *            h->g  VERSION u32. "Re-announce yourself": the guest answers
 *                  HELLO + READY with the same request id. A new node that
 *                  adopts a running guest starts with this.
 *   READY    g->h  (none). The agent is set up and serves requests.
 *   ERROR    g->h  ERRNO u32, MSG str. Failed request (id) or a malformed
 *                  frame from the host (id of that frame when known, else 0).
 *   OK       g->h  (none). Success of STDIN, SIGNAL, RESIZE, WRITE, MKDIR,
 *                  REMOVE, RENAME.
 *   EXEC     h->g  ARG str*, ENV str*, CWD str, UID u32, GID u32, PTY u8,
 *                  ROWS u16, COLS u16, STDIN_OPEN u8  -> EXEC_OK{PID u32}
 *   STDIN    h->g  PID u32, DATA bytes, EOF u8
 *   SIGNAL   h->g  PID u32, SIGNAL u32       (sent to the process group)
 *   RESIZE   h->g  PID u32, ROWS u16, COLS u16
 *   OUTPUT   g->h  PID u32, FD u8 (1|2), OFFSET u64, DATA bytes
 *   EXIT     g->h  PID u32, EXIT_CODE u32 | EXIT_SIGNAL u32. Sent after the
 *                  last OUTPUT of that process.
 *   READ     h->g  PATH str, MAX u64 -> DATA frames {SIZE u64 (first frame),
 *                  OFFSET u64, DATA bytes}, PROTO_F_MORE on all but the last.
 *   WRITE    h->g  PATH str, MODE u32 (first frame), OFFSET u64, DATA bytes;
 *                  PROTO_F_MORE on all but the last frame -> OK after the last.
 *                  An ERROR may come early; the host then stops sending.
 *   STAT     h->g  PATH str -> STAT_OK{TYPE u8, SIZE u64, MODE u32, MTIME i64,
 *                  UID u32, GID u32}  (lstat: symlinks are not followed)
 *   LIST     h->g  PATH str -> LIST_OK{DIRENT*}, PROTO_F_MORE on all but the
 *                  last; DIRENT = nested {NAME str, TYPE, SIZE, MODE, MTIME,
 *                  UID, GID}
 *   MKDIR    h->g  PATH str, PARENTS u8
 *   REMOVE   h->g  PATH str, RECURSIVE u8 (symlinks are never followed)
 *   RENAME   h->g  PATH str, PATH2 str
 *   STATUS   h->g  (none) -> STATUS_OK{LAST_ACTIVITY i64, UPTIME u64, NPROCS u32,
 *                  CPU_MS u64 (optional: CPU time of every process the agent
 *                  started or reaped, theirs and their reaped children's;
 *                  the node compares it between polls to see activity)}
 *   RESET    h->g  WALLCLOCK u64 (ns since the epoch; 0 = leave the clock),
 *                  ENTROPY bytes (PROTO_RESET_ENTROPY_MIN..MAX), HOSTNAME str,
 *                  MACHINE_ID str (32 lowercase hex), and optionally
 *                  NET_ADDR u32, NET_PREFIX u8 (1..32), NET_GATEWAY u32,
 *                  NET_DNS u32 (IPv4, host order; all four or none) -> OK
 *                  once the guest has set the clock, reseeded its RNG, set
 *                  the hostname and written /etc/machine-id, and with the
 *                  NET_ fields given, given eth0 that address (replacing
 *                  any other), set it up with the default route via the
 *                  gateway and written /etc/resolv.conf. Sent after a VM is
 *                  restored or forked from a memory snapshot: clones must
 *                  not share any of these. Nothing is changed when a field
 *                  is invalid.
 *   SYNC     h->g  (none) -> OK once the guest's sync(2) returned: every
 *                  filesystem's dirty data is on its disk. Sent before a
 *                  disk snapshot of a VM, so the image holds what the guest
 *                  wrote.
 *
 * Port streams (forwarding a TCP port of the sandbox to its owner, see
 * docs/API.md "Ports"). The host picks the stream id; ids are never reused
 * while a stream with that id may still have frames in flight. Every stream
 * frame except PORT_OPEN carries request_id 0 and gets no answer.
 *
 *   PORT_OPEN   h->g  STREAM u32, PORT u16 -> OK once the guest's TCP
 *                     connection to 127.0.0.1:PORT is established, or ERROR
 *                     with the connect errno (ECONNREFUSED, ETIMEDOUT, ...);
 *                     EEXIST for a stream id in use, EMFILE over the limit.
 *   PORT_DATA   both  STREAM u32, DATA bytes (1..PROTO_CHUNK). A sender may
 *                     have at most PROTO_PORT_WINDOW bytes unacknowledged per
 *                     stream and direction; more is a protocol violation that
 *                     resets the stream (guest) or closes the channel (host).
 *   PORT_CREDIT both  STREAM u32, CREDIT u32: the receiver consumed (wrote
 *                     to its socket) CREDIT more bytes; the sender may send
 *                     that much more. This is the flow control: a slow reader
 *                     on either end stops the other one's reads, so neither
 *                     the agent nor the node buffers more than a window.
 *   PORT_SHUT   both  STREAM u32: the sender's direction ended (EOF on its
 *                     socket): the receiver shuts down writing once it has
 *                     written what it buffered. Half-close, as TCP's FIN.
 *   PORT_CLOSE  both  STREAM u32, ERRNO u32 (0 = clean): the stream is gone
 *                     (both directions ended, or an error/reset). The
 *                     receiver closes its socket and forgets the id; frames
 *                     for an unknown id are dropped (they crossed a CLOSE).
 *
 * File watches (inotify in the guest, see docs/API.md "files/watch"). The
 * host picks the watch id, as for port streams.
 *
 *   WATCH_START h->g  STREAM u32, PATH str (absolute), RECURSIVE u8 -> OK
 *                     once the watches are set, or ERROR (ENOENT, ENOSPC
 *                     over PROTO_WATCH_MAX_DIRS directories, EMFILE over
 *                     PROTO_WATCH_MAX watches, EEXIST for an id in use).
 *   WATCH_EVENT g->h  STREAM u32, TYPE u8 (PW_*), PATH str (relative to the
 *                     watched path, "" for itself; absent for OVERFLOW),
 *                     PATH2 str (RENAME: the new name), DIR u8. request_id
 *                     0. OVERFLOW: events were lost (the kernel's queue or
 *                     the agent's limits); what follows is live again.
 *   WATCH_STOP  h->g  STREAM u32. No answer; events for an id the host
 *                     stopped are dropped (they crossed the STOP).
 */
#ifndef AIRLOCK_PROTO_H
#define AIRLOCK_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../lib/util.h"

#define PROTO_MAGIC 0x4b434c41u     /* "ALCK" as bytes on the wire */
#define PROTO_VERSION 1
#define PROTO_HDR_LEN 16
#define PROTO_FIELD_HDR_LEN 6
#define PROTO_MAX_FRAME (1u << 20)  /* header + payload */
#define PROTO_MAX_PAYLOAD (PROTO_MAX_FRAME - PROTO_HDR_LEN)
#define PROTO_CHUNK (256u * 1024)   /* data bytes per file/output frame */
#define PROTO_MAX_FIELDS 65536      /* per frame, nested ones included */
#define PROTO_MAX_ARGV 4096
#define PROTO_MAX_ENV 4096
#define PROTO_MAX_PATH 4096         /* bytes, without the NUL */
#define PROTO_MAX_MSG 1024          /* ERROR message */
#define PROTO_BOOT_ID_MAX 63
#define PROTO_RESET_ENTROPY_MIN 32  /* bytes: a full reseed of the CRNG */
#define PROTO_RESET_ENTROPY_MAX 512
#define PROTO_HOSTNAME_MAX 64       /* HOST_NAME_MAX */
#define PROTO_MACHINE_ID_LEN 32     /* hex digits, as in machine-id(5) */
#define PROTO_PORT_WINDOW (512u * 1024)  /* unacknowledged bytes per stream direction */
#define PROTO_PORT_MAX_STREAMS 1024 /* open streams per guest */
#define PROTO_WATCH_MAX 64          /* watches per guest */
#define PROTO_WATCH_MAX_DIRS 8192   /* inotify watches (directories) per watch */

/* Header flags. */
#define PROTO_F_MORE 0x0001         /* more frames of this transfer follow */

enum proto_type {
	PT_HELLO = 1,
	PT_READY = 2,
	PT_ERROR = 3,
	PT_OK = 4,
	PT_EXEC = 10,
	PT_EXEC_OK = 11,
	PT_STDIN = 12,
	PT_SIGNAL = 13,
	PT_RESIZE = 14,
	PT_OUTPUT = 15,
	PT_EXIT = 16,
	PT_READ = 20,
	PT_DATA = 21,
	PT_WRITE = 22,
	PT_STAT = 24,
	PT_STAT_OK = 25,
	PT_LIST = 26,
	PT_LIST_OK = 27,
	PT_MKDIR = 28,
	PT_REMOVE = 29,
	PT_RENAME = 30,
	PT_STATUS = 31,
	PT_STATUS_OK = 32,
	PT_RESET = 33,
	PT_SYNC = 40,
	PT_RECLAIM = 41,
	/* 50..59: port streams */
	PT_PORT_OPEN = 50,
	PT_PORT_DATA = 51,
	PT_PORT_CREDIT = 52,
	PT_PORT_SHUT = 53,
	PT_PORT_CLOSE = 54,
	/* 60..69: file watches */
	PT_WATCH_START = 60,
	PT_WATCH_EVENT = 61,
	PT_WATCH_STOP = 62,
};

/* WATCH_EVENT kinds (TYPE). */
enum proto_watch_kind {
	PW_CREATE = 1,
	PW_WRITE = 2,
	PW_REMOVE = 3,
	PW_RENAME = 4,
	PW_OVERFLOW = 5,
};

enum proto_tag {
	PTAG_VERSION = 1,
	PTAG_BOOT_ID = 2,
	PTAG_ARG = 3,
	PTAG_ENV = 4,
	PTAG_CWD = 5,
	PTAG_UID = 6,
	PTAG_GID = 7,
	PTAG_PTY = 8,
	PTAG_ROWS = 9,
	PTAG_COLS = 10,
	PTAG_STDIN_OPEN = 11,
	PTAG_PID = 12,
	PTAG_DATA = 13,
	PTAG_EOF = 14,
	PTAG_SIGNAL = 15,
	PTAG_FD = 16,
	PTAG_OFFSET = 17,
	PTAG_EXIT_CODE = 18,
	PTAG_EXIT_SIGNAL = 19,
	PTAG_ERRNO = 20,
	PTAG_MSG = 21,
	PTAG_PATH = 22,
	PTAG_PATH2 = 23,
	PTAG_MODE = 24,
	PTAG_MAX = 25,
	PTAG_SIZE = 26,
	PTAG_RECURSIVE = 27,
	PTAG_PARENTS = 28,
	PTAG_TYPE = 29,
	PTAG_MTIME = 30,
	PTAG_NAME = 31,
	PTAG_DIRENT = 32,
	PTAG_LAST_ACTIVITY = 33,
	PTAG_UPTIME = 34,
	PTAG_NPROCS = 35,
	PTAG_WALLCLOCK = 36,
	PTAG_ENTROPY = 37,
	PTAG_HOSTNAME = 38,
	PTAG_MACHINE_ID = 39,
	/* 40..49: the guest's network (RESET) */
	PTAG_NET_ADDR = 40,
	PTAG_NET_PREFIX = 41,
	PTAG_NET_GATEWAY = 42,
	PTAG_NET_DNS = 43,
	/* 60..69: lifecycle (scheduler, idle handling). */
	PTAG_CPU_MS = 60,
	/* 50..59: port streams */
	PTAG_STREAM = 50,
	PTAG_PORT = 51,
	PTAG_CREDIT = 52,
	/* 70..79: file watches */
	PTAG_DIR = 70,
};

/* Name of a frame type for messages ("EXEC"), or "?" */
const char *proto_type_name(unsigned type);

/* ---- encoding ------------------------------------------------------------ */

/* Builds one frame at the end of `out` (borrowed). Fields are appended in
 * order; proto_enc_end patches the payload length. */
struct proto_enc {
	struct buf *out;
	size_t start;      /* offset of the header in out */
};

void proto_enc_begin(struct proto_enc *e, struct buf *out, unsigned type, uint16_t flags,
		     uint32_t req_id);
void proto_enc_bytes(struct proto_enc *e, uint16_t tag, const void *p, size_t n);
void proto_enc_str(struct proto_enc *e, uint16_t tag, const char *s);
void proto_enc_u8(struct proto_enc *e, uint16_t tag, uint8_t v);
void proto_enc_u16(struct proto_enc *e, uint16_t tag, uint16_t v);
void proto_enc_u32(struct proto_enc *e, uint16_t tag, uint32_t v);
void proto_enc_u64(struct proto_enc *e, uint16_t tag, uint64_t v);
void proto_enc_i64(struct proto_enc *e, uint16_t tag, int64_t v);
/* Nested field: returns a mark for proto_enc_nest_end, which patches its length. */
size_t proto_enc_nest_begin(struct proto_enc *e, uint16_t tag);
void proto_enc_nest_end(struct proto_enc *e, size_t mark);
/* Change the header flags of the frame being built. */
void proto_enc_set_flags(struct proto_enc *e, uint16_t flags);
/* Current frame size in bytes (header included). */
size_t proto_enc_size(const struct proto_enc *e);
/* Finish the frame. -EMSGSIZE (and the frame is removed from out again) when
 * it exceeds PROTO_MAX_FRAME; 0 otherwise. */
int proto_enc_end(struct proto_enc *e);
/* Remove the frame being built from out. */
void proto_enc_abort(struct proto_enc *e);

/* ---- decoding ------------------------------------------------------------ */

struct proto_frame {
	uint8_t type;
	uint16_t flags;
	uint32_t req_id;
	uint32_t len;             /* payload length */
	const uint8_t *payload;   /* borrowed from the buffer given to proto_parse */
};

/* Parse one frame from the front of p[0..n). The bytes are untrusted.
 *   0          a complete, well-formed frame; *frame_len = its size.
 *   -EAGAIN    the header is fine but more bytes are needed (n too short).
 *   -EBADMSG   the payload's fields are malformed; *frame_len says how much to
 *              skip; f->type and f->req_id are set.
 *   -EPROTONOSUPPORT  unknown version with a sane length: same as -EBADMSG.
 *   -EPROTO    bad magic: frame boundary unknown, *frame_len = 0.
 *   -EMSGSIZE  payload_len too large: boundary not trusted, *frame_len = 0;
 *              f->req_id is set.
 * The header is checked as soon as 16 bytes are there, before the payload
 * arrives, so an oversized frame is refused without buffering it. */
int proto_parse(const uint8_t *p, size_t n, struct proto_frame *f, size_t *frame_len);

/* Check that p[0..n) is a well-formed field sequence with at most `*budget`
 * fields (decremented; nested fields are not descended into). -EBADMSG if not. */
int proto_validate_fields(const uint8_t *p, size_t n, size_t *budget);

struct proto_field {
	uint16_t tag;
	uint32_t len;
	const uint8_t *val;       /* borrowed */
};

struct proto_iter {
	const uint8_t *p;
	size_t left;
};
void proto_iter_init(struct proto_iter *it, const void *p, size_t n);
/* 1 and *fld filled, 0 at the end, -EBADMSG when the rest is malformed. */
int proto_iter_next(struct proto_iter *it, struct proto_field *fld);

/* Lookups in a field sequence (a frame's payload or a nested field). Each
 * returns 0, -ENOENT when the tag is absent, or -EBADMSG when its value has the
 * wrong size or (strings) contains a NUL or exceeds max. */
int proto_find(const void *p, size_t n, uint16_t tag, struct proto_field *fld);
int proto_get_u8(const void *p, size_t n, uint16_t tag, uint8_t *v);
int proto_get_u16(const void *p, size_t n, uint16_t tag, uint16_t *v);
int proto_get_u32(const void *p, size_t n, uint16_t tag, uint32_t *v);
int proto_get_u64(const void *p, size_t n, uint16_t tag, uint64_t *v);
int proto_get_i64(const void *p, size_t n, uint16_t tag, int64_t *v);
/* Boolean: absent = false; any non-zero u8 = true. */
bool proto_get_flag(const void *p, size_t n, uint16_t tag);
/* NUL-terminated copy; caller owns *s. */
int proto_get_str(const void *p, size_t n, uint16_t tag, size_t max, char **s);
/* Copy into a fixed buffer of size cap (max cap-1 bytes). */
int proto_get_strbuf(const void *p, size_t n, uint16_t tag, char *s, size_t cap);
/* Borrowed bytes; absent -> -ENOENT. */
int proto_get_bytes(const void *p, size_t n, uint16_t tag, const uint8_t **v, size_t *len);

/* ---- typed messages ------------------------------------------------------ */

struct proto_exec {
	char **argv;          /* NULL-terminated; argc >= 1 */
	size_t argc;
	char **env;           /* NULL-terminated, or NULL when no ENV field */
	size_t envc;
	char *cwd;            /* NULL when absent */
	uint32_t uid, gid;
	bool pty;
	uint16_t rows, cols;
	bool stdin_open;
};
/* Appends an EXEC frame. argv must be non-empty. -EMSGSIZE / -E2BIG. */
int proto_enc_exec(struct buf *out, uint32_t req_id, const struct proto_exec *x);
/* Decode an EXEC payload (untrusted); fills *x (free with proto_exec_free).
 * -EBADMSG malformed, -EINVAL no argv, -E2BIG too many argv/env entries. */
int proto_dec_exec(const struct proto_frame *f, struct proto_exec *x);
void proto_exec_free(struct proto_exec *x);

struct proto_hello {
	uint32_t version;
	char boot_id[PROTO_BOOT_ID_MAX + 1];
};
int proto_enc_hello(struct buf *out, uint32_t req_id, const struct proto_hello *h);
int proto_dec_hello(const struct proto_frame *f, struct proto_hello *h);

struct proto_error {
	uint32_t err;         /* positive errno */
	char msg[PROTO_MAX_MSG + 1];
};
int proto_enc_error(struct buf *out, uint32_t req_id, int err, const char *msg);
/* A missing or zero errno decodes as EIO: an error is never "success". */
int proto_dec_error(const struct proto_frame *f, struct proto_error *e);

struct proto_output {
	uint32_t pid;
	uint8_t fd;           /* 1 or 2 */
	uint64_t offset;
	const uint8_t *data;  /* borrowed from the frame */
	size_t len;
};
int proto_enc_output(struct buf *out, const struct proto_output *o);
int proto_dec_output(const struct proto_frame *f, struct proto_output *o);

struct proto_exit {
	uint32_t pid;
	int32_t code;         /* >= 0 when exited, else -1 */
	int32_t signal;       /* > 0 when killed, else 0 */
};
int proto_enc_exit(struct buf *out, const struct proto_exit *x);
int proto_dec_exit(const struct proto_frame *f, struct proto_exit *x);

struct proto_stat {
	char type;            /* 'f' 'd' 'l' 'o' */
	uint64_t size;
	uint32_t mode;        /* permission bits (07777) */
	int64_t mtime_ms;
	uint32_t uid, gid;
};
void proto_enc_stat_fields(struct proto_enc *e, const struct proto_stat *st);
int proto_dec_stat_fields(const void *p, size_t n, struct proto_stat *st);

struct proto_status {
	int64_t last_activity_ms;
	uint64_t uptime_ms;
	uint32_t n_procs;
	uint64_t cpu_ms;          /* 0 when the guest does not send it */
};
int proto_enc_status(struct buf *out, uint32_t req_id, const struct proto_status *s);
int proto_dec_status(const struct proto_frame *f, struct proto_status *s);

/* The vm guest's network, the same in every VM: eth0 100.96.0.2/30, its
 * gateway and resolver 100.96.0.1 (the tap's end, in QEMU's network
 * namespace, which translates it to and from the sandbox's own address;
 * nodemgr net.c). The guest sets it at boot (vminit), so a template's
 * memory snapshot holds it and no clone or fork child configures its
 * network. From the shared address space (RFC 6598), which no upstream a
 * sandbox dials is expected to use. Host byte order. */
#define PROTO_VM_NET_ADDR 0x64600002u    /* 100.96.0.2 */
#define PROTO_VM_NET_GATEWAY 0x64600001u /* 100.96.0.1 */
#define PROTO_VM_NET_PREFIX 30

/* RESET (host -> guest). Both ends validate: the encoder refuses what the
 * decoder would refuse, so a bad request fails on the host with EINVAL. */
struct proto_reset {
	uint64_t wall_ns;     /* CLOCK_REALTIME to set, ns since the epoch; 0 = keep */
	uint8_t entropy[PROTO_RESET_ENTROPY_MAX];
	size_t entropy_len;   /* PROTO_RESET_ENTROPY_MIN..MAX */
	char hostname[PROTO_HOSTNAME_MAX + 1];    /* letters, digits, '-', '.' */
	char machine_id[PROTO_MACHINE_ID_LEN + 1]; /* 32 lowercase hex, not all zero */
	/* eth0 (vm): net_addr 0 = leave the network alone. Otherwise
	 * net_addr/net_prefix with the gateway inside that subnet, neither
	 * being its network or broadcast address unless prefix >= 31, none
	 * of them 0, loopback, multicast or broadcast. */
	uint32_t net_addr, net_gateway, net_dns;
	uint8_t net_prefix;
};
/* -EINVAL when a field is out of range (see above). */
int proto_enc_reset(struct buf *out, uint32_t req_id, const struct proto_reset *x);
/* -EBADMSG malformed or missing fields, -EINVAL out-of-range values. */
int proto_dec_reset(const struct proto_frame *f, struct proto_reset *x);
/* The checks both sides apply (the hostname's: lib/ident.h, ident_hostname_ok). */
bool proto_machine_id_ok(const char *s);

/* PORT_* frames (see the table above). One struct for all five; which fields
 * are meaningful depends on the type. The decoder checks the type, that
 * PORT is not 0, that DATA is 1..PROTO_CHUNK bytes and CREDIT is
 * 1..PROTO_PORT_WINDOW: -EBADMSG otherwise. */
struct proto_port {
	uint8_t type;         /* PT_PORT_* */
	uint32_t stream;
	uint16_t port;        /* OPEN */
	const uint8_t *data;  /* DATA: borrowed from the frame (or the caller) */
	size_t len;
	uint32_t credit;      /* CREDIT */
	uint32_t err;         /* CLOSE: positive errno, 0 = clean */
};
int proto_enc_port(struct buf *out, uint32_t req_id, const struct proto_port *m);
int proto_dec_port(const struct proto_frame *f, struct proto_port *m);

/* WATCH_* frames. One struct for the three; which fields are meaningful
 * depends on the type. The decoder checks the type, the kind, that paths are
 * there when the kind needs them (PATH for all but OVERFLOW, PATH2 for
 * RENAME), at most PROTO_MAX_PATH bytes without a NUL, and that an event's
 * paths are relative (no leading '/'): -EBADMSG otherwise. */
struct proto_watch {
	uint8_t type;         /* PT_WATCH_* */
	uint32_t id;
	uint8_t kind;         /* EVENT: PW_* */
	bool recursive;       /* START */
	bool dir;             /* EVENT: the path is a directory */
	char *path;           /* START: absolute; EVENT: relative, "" = the watched path */
	char *path2;          /* EVENT, RENAME: the new path (relative) */
};
/* Borrowed strings; -EINVAL when the decoder would refuse the frame. */
int proto_enc_watch(struct buf *out, uint32_t req_id, const struct proto_watch *m);
/* Fills *m; the caller frees it with proto_watch_free (also after a failure). */
int proto_dec_watch(const struct proto_frame *f, struct proto_watch *m);
void proto_watch_free(struct proto_watch *m);

/* ---- stream receiver ----------------------------------------------------- */

/* Reassembles frames from a byte stream and resynchronises after garbage by
 * scanning for the next magic. */
struct proto_rx {
	struct buf b;
	size_t off;           /* start of unconsumed bytes in b */
	bool resync;          /* skipping garbage until the next magic */
};
void proto_rx_init(struct proto_rx *rx);
void proto_rx_free(struct proto_rx *rx);
/* One read(2) from fd into the buffer: bytes read, 0 on EOF, -errno
 * (-EAGAIN on a non-blocking fd with nothing to read). */
ssize_t proto_rx_fill(struct proto_rx *rx, int fd);
/* Append bytes (for tests and the fuzzer). */
void proto_rx_feed(struct proto_rx *rx, const void *p, size_t n);
/* 1: *f is the next frame (payload valid until the next proto_rx_* call).
 * 0: need more bytes. <0: a malformed frame was skipped (see proto_parse for
 * the codes); f->req_id is the request id when it could be read, else 0. After
 * an error with unknown boundary the receiver skips to the next magic. */
int proto_rx_next(struct proto_rx *rx, struct proto_frame *f);
/* Bytes buffered and not yet consumed. */
size_t proto_rx_pending(const struct proto_rx *rx);

#endif
