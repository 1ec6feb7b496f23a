/* fuzz-proto-guest: the guest agent's receive loop (src/guest/agent.c
 * chan_read) on arbitrary bytes from its channel: proto_rx_fill reading a
 * non-blocking pipe in the pieces the kernel gives, proto_rx_next, and for
 * each frame the field accessors and typed decoders the agent's handlers use
 * (src/guest/proc.c, agent-files.c, agent-ports.c, agent-watch.c, reset.c),
 * whatever the frame's type claims. The handlers' side effects (processes,
 * files) are not run: everything they act on comes out of these calls.
 * fuzz-proto covers the same decoders as the node meets them. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/guestproto/proto.h"

static void touch(const uint8_t *p, size_t n)
{
	if (n) {
		volatile uint8_t sink = p[0] ^ p[n - 1];
		(void)sink;
	}
}

static void agent_decode(const struct proto_frame *f)
{
	const uint8_t *data;
	size_t len;
	uint64_t u64;
	uint32_t u32;
	uint16_t rows, cols;
	char *path = NULL;
	struct proto_exec x;
	struct proto_reset rs;
	struct proto_port pp;
	struct proto_watch pw;

	/* proc.c */
	if (proto_dec_exec(f, &x) == 0) {
		if (x.argc < 1 || x.argv[x.argc])
			abort();
		for (size_t i = 0; i < x.argc; i++)
			if (!x.argv[i])
				abort();
		proto_exec_free(&x);
	}
	if (proto_get_bytes(f->payload, f->len, PTAG_DATA, &data, &len) == 0) {
		if (len > f->len)
			abort();
		touch(data, len);
	}
	(void)proto_get_flag(f->payload, f->len, PTAG_EOF);
	(void)proto_get_u32(f->payload, f->len, PTAG_PID, &u32);
	(void)proto_get_u32(f->payload, f->len, PTAG_SIGNAL, &u32);
	(void)proto_get_u16(f->payload, f->len, PTAG_ROWS, &rows);
	(void)proto_get_u16(f->payload, f->len, PTAG_COLS, &cols);
	/* agent-files.c */
	(void)proto_get_u32(f->payload, f->len, PTAG_MODE, &u32);
	(void)proto_get_u64(f->payload, f->len, PTAG_MAX, &u64);
	(void)proto_get_u64(f->payload, f->len, PTAG_OFFSET, &u64);
	(void)proto_get_flag(f->payload, f->len, PTAG_PARENTS);
	(void)proto_get_flag(f->payload, f->len, PTAG_RECURSIVE);
	if (proto_get_str(f->payload, f->len, PTAG_PATH, PROTO_MAX_PATH, &path) == 0) {
		if (strlen(path) > PROTO_MAX_PATH)
			abort();
		free(path);
	}
	/* reset.c, agent-ports.c, agent-watch.c */
	(void)proto_dec_reset(f, &rs);
	if (proto_dec_port(f, &pp) == 0 && pp.type == PT_PORT_DATA)
		touch(pp.data, pp.len);
	if (proto_dec_watch(f, &pw) == 0 && pw.type == PT_WATCH_START && !pw.path)
		abort();
	proto_watch_free(&pw);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* One receiver for the whole run, as the agent has one for its life
	 * (its 256 KiB buffer is allocated once), emptied for each input. */
	static struct proto_rx rx;
	static bool rx_ready;
	struct proto_frame f;
	size_t off = 0;
	int p[2], r, guard = 0;

	if (pipe2(p, O_NONBLOCK | O_CLOEXEC) < 0)
		abort();
	if (!rx_ready) {
		proto_rx_init(&rx);
		rx_ready = true;
	}
	rx.b.len = 0;
	rx.off = 0;
	rx.resync = false;
	/* Written in pieces of up to 512 bytes, each drained as the agent's
	 * loop drains a readable channel: frames cross the pieces' edges. */
	while (off < size) {
		size_t n = size - off < 512 ? size - off : 512;
		ssize_t w = write(p[1], data + off, n);
		if (w <= 0)
			abort();
		off += (size_t)w;
		while (proto_rx_fill(&rx, p[0]) > 0)
			while ((r = proto_rx_next(&rx, &f)) != 0 && guard++ < 100000)
				if (r > 0)
					agent_decode(&f);
	}
	close(p[1]);
	if (proto_rx_fill(&rx, p[0]) != 0)
		abort();   /* the writer is gone: EOF */
	close(p[0]);
	return 0;
}
