/* guest.h - internals of airlock-guest, the agent that runs as PID 1 inside a
 * sandbox. Private to src/guest.
 *
 * One thread, one poll(2) loop (agent.c) over: the channel, a signalfd
 * (SIGCHLD and termination signals), every started process's output and
 * stdin fds, and the TCP sockets of port streams (agent-ports.c). Nothing in the
 * loop blocks on a peer: the channel, process stdin and port sockets are
 * non-blocking with per-connection / per-process / per-stream buffers.
 *
 * Backpressure: when more than OUT_HIGH bytes wait to go out on the channel,
 * the loop stops reading process output and producing file-read chunks, so a
 * slow node slows the processes down instead of growing our memory.
 */
#ifndef AIRLOCK_GUEST_H
#define AIRLOCK_GUEST_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../lib/util.h"
#include "../guestproto/proto.h"

#define OUT_HIGH (4u << 20)         /* stop reading process output above this */
#define IN_HIGH (16u << 20)         /* stop reading the channel above this much output queued */
#define STDIN_HIGH (1u << 20)       /* defer STDIN acks while more is queued */
#define EXIT_LINGER_MS 1000         /* after exit, wait this long for pipes held by others */
#define MAX_UPLOADS 64
#define MAX_DOWNLOADS 64

struct proc {
	struct proc *next;
	pid_t pid;
	bool pty;
	int out_fd[2];          /* [0] fd 1 (or pty master), [1] fd 2; -1 when at EOF */
	uint64_t off[2];        /* bytes reported so far per stream */
	int in_fd;              /* stdin pipe write end, pty master (dup), or -1 */
	struct buf in_q;        /* stdin bytes not yet written */
	size_t in_q_off;
	bool in_eof;            /* close stdin once in_q is drained */
	uint32_t *acks;         /* STDIN request ids whose OK waits for in_q to drain */
	size_t n_acks;
	bool exited;
	int status;             /* waitpid status, valid when exited */
	uint64_t exit_ms;       /* monotonic time of the exit */
};

struct upload {                 /* a WRITE in progress (multi-frame) */
	struct upload *next;
	uint32_t req_id;
	int fd;
	char *tmp, *path;
	uint64_t next_off;
};

struct download {               /* a READ in progress: chunks are produced as the channel drains */
	struct download *next;
	uint32_t req_id;
	int fd;
	uint64_t off, size, max;
};

struct pstream {                /* a port stream (agent-ports.c) */
	struct pstream *next;
	uint32_t id;            /* chosen by the host */
	int fd;                 /* TCP socket to 127.0.0.1:port, non-blocking */
	uint16_t port;
	uint32_t open_req;      /* PORT_OPEN request id while connecting, else 0 */
	struct buf in_q;        /* host -> socket bytes not yet written */
	size_t in_q_off;
	uint32_t unacked_in;    /* host bytes received and not yet credited back */
	uint32_t credit_due;    /* of those, written to the socket */
	uint32_t send_credit;   /* bytes we may still send the host */
	bool host_shut;         /* host sent PORT_SHUT */
	bool wr_done;           /* shutdown(SHUT_WR) done */
	bool rd_eof;            /* EOF from the socket; PORT_SHUT sent */
};

struct gwatch;                  /* a file watch (agent-watch.c) */

struct agent {
	int chan_fd;
	bool chan_up;           /* false after EOF/error: output is then discarded */
	bool vm_port;           /* the channel is a virtio-serial port: the host end
				 * can go away and come back (see agent.c) */
	bool port_event;        /* SIGIO: the port's host connection may have changed */
	uint64_t next_probe_ms; /* port down: when to look again without a SIGIO */
	int sig_fd;
	bool pid1;
	struct proto_rx rx;
	struct buf out;         /* frames queued for the channel */
	size_t out_off;
	struct proc *procs;
	struct upload *uploads;
	struct download *downloads;
	struct pstream *streams;
	size_t n_streams;
	struct gwatch *watches;
	size_t n_watches;
	int64_t last_activity_ms;
	uint64_t start_ms;
	char boot_id[PROTO_BOOT_ID_MAX + 1];
	bool quit;
	uint8_t *iobuf;         /* PROTO_CHUNK scratch for reads */
	uint64_t pgfree_mark;   /* the kernel's pgfree when RECLAIM last zeroed (0: never) */
};

/* agent.c */
int agent_run(struct agent *a);
/* start.c: run the template's /etc/airlock/start, if any; with wait, until
 * it exits (bounded). */
void agent_start_program(bool wait);
void agent_touch(struct agent *a);
size_t agent_out_pending(const struct agent *a);
/* Queue a frame; the encoders append to a->out directly. */
void agent_send_error(struct agent *a, uint32_t req_id, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void agent_send_ok(struct agent *a, uint32_t req_id);
void agent_flush(struct agent *a);

/* reclaim.c: RECLAIM (vm only: sync, drop the page cache, zero free
 * memory, before a suspend's memory snapshot). */
void guest_reclaim(struct agent *a, const struct proto_frame *f);

/* reset.c: RESET (clock, RNG, hostname, machine-id of a clone). */
void guest_reset(struct agent *a, const struct proto_frame *f);
/* eth0 = addr/prefix with the default route via gw, unless it has exactly
 * that address already, and /etc/resolv.conf naming dns. Host byte order.
 * On failure -errno, *step says what failed. */
int guest_net_setup(uint32_t addr, uint8_t prefix, uint32_t gw, uint32_t dns, const char **step);

/* vminit.c: init of a microVM. */
/* PID 1 with no channel handed over (no AIRLOCK_CHANNEL_FD, fd 3 not a socket). */
bool vm_detect(void);
/* Mount, load modules, wait for the disk and the port, switch root into the
 * disk. Returns the port's fd (O_NONBLOCK, O_CLOEXEC; caller owns) or -1
 * after printing why to the console. */
int vm_init(void);
/* Ask for SIGIO on host connect/disconnect (SIGIO must be blocked first). */
int vm_port_async(int fd);
/* Is a host connected to the port's other end now? */
bool vm_port_connected(int fd);

/* proc.c */
void proc_exec(struct agent *a, const struct proto_frame *f);
void proc_stdin(struct agent *a, const struct proto_frame *f);
void proc_signal(struct agent *a, const struct proto_frame *f);
void proc_resize(struct agent *a, const struct proto_frame *f);
void proc_reap(struct agent *a);
/* Read output from stream i (0: fd 1, 1: fd 2) of p; closes it at EOF.
 * ignore_cap: drain everything now (final drain before EXIT). */
void proc_read_output(struct agent *a, struct proc *p, int i, bool ignore_cap);
void proc_write_stdin(struct agent *a, struct proc *p);
/* Send EXIT and free processes that exited and whose output is done. */
void proc_finish(struct agent *a);
/* Milliseconds until the next linger deadline, or -1. */
int proc_next_timeout(const struct agent *a);
uint32_t proc_count_live(const struct agent *a);
/* CPU ms used by the sandbox's processes: reaped ones and live exec'd ones
 * (with their reaped children). Only compared between polls. */
uint64_t proc_cpu_ms(const struct agent *a);
void proc_kill_all(struct agent *a);
/* Drop deferred STDIN acks (they belong to a previous node's requests). */
void proc_forget_acks(struct agent *a);

/* agent-files.c */
void file_read(struct agent *a, const struct proto_frame *f);
void file_write(struct agent *a, const struct proto_frame *f);
void file_stat(struct agent *a, const struct proto_frame *f);
void file_list(struct agent *a, const struct proto_frame *f);
void file_mkdir(struct agent *a, const struct proto_frame *f);
void file_remove(struct agent *a, const struct proto_frame *f);
void file_rename(struct agent *a, const struct proto_frame *f);
/* Produce READ chunks while the channel has room. */
void file_pump_downloads(struct agent *a);
/* Drop transfers of a previous host connection. */
void file_reset_transfers(struct agent *a);

/* agent-ports.c */
void port_open(struct agent *a, const struct proto_frame *f);
/* PORT_DATA, PORT_CREDIT, PORT_SHUT, PORT_CLOSE from the host. */
void port_frame(struct agent *a, const struct proto_frame *f);
/* poll events the stream wants now (0: leave it out of this round). */
short port_events(const struct agent *a, const struct pstream *s);
void port_io(struct agent *a, struct pstream *s, short revents);
bool port_alive(const struct agent *a, const struct pstream *s);
/* Close every stream (the host that opened them is gone). */
void port_reset_all(struct agent *a);

/* agent-watch.c */
void watch_start(struct agent *a, const struct proto_frame *f);
void watch_stop(struct agent *a, const struct proto_frame *f);
/* The watch's inotify fd is readable: report what it says. */
void watch_io(struct agent *a, struct gwatch *w);
int watch_fd(const struct gwatch *w);
struct gwatch *watch_next(const struct gwatch *w);   /* the list of a->watches */
bool watch_alive(const struct agent *a, const struct gwatch *w);
/* Drop every watch (the host that started them is gone). */
void watch_reset_all(struct agent *a);

#endif
