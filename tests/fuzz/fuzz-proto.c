/* fuzz-proto: the channel protocol decoder, as the node meets it: arbitrary
 * bytes from a sandbox go through the stream receiver (fed in two pieces, so
 * reassembly and resync are covered) and every frame through every typed
 * decoder, whatever its type claims. Nothing may crash, leak or read out of
 * bounds; the seed corpus holds valid frames made by the encoder. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "../../src/guestproto/proto.h"

static void decode_all(const struct proto_frame *f)
{
	struct proto_exec x;
	struct proto_hello h;
	struct proto_error e;
	struct proto_output o;
	struct proto_exit ex;
	struct proto_status s;
	struct proto_stat st;
	struct proto_reset rs;
	struct proto_port pp;
	struct proto_watch pw;
	struct proto_iter it;
	struct proto_field fld;
	char *str = NULL;
	uint64_t u64;
	int r;

	if (proto_dec_exec(f, &x) == 0)
		proto_exec_free(&x);
	(void)proto_dec_hello(f, &h);
	(void)proto_dec_error(f, &e);
	if (proto_dec_output(f, &o) == 0 && o.len) {
		/* touch the borrowed bytes: they must lie inside the frame */
		volatile uint8_t sink = o.data[0] ^ o.data[o.len - 1];
		(void)sink;
	}
	(void)proto_dec_exit(f, &ex);
	(void)proto_dec_status(f, &s);
	if (proto_dec_reset(f, &rs) == 0 && (rs.entropy_len < PROTO_RESET_ENTROPY_MIN ||
					     rs.entropy_len > PROTO_RESET_ENTROPY_MAX ||
					     (rs.net_addr && (rs.net_prefix < 1 || rs.net_prefix > 32 ||
							      !rs.net_gateway || !rs.net_dns))))
		abort();
	if (proto_dec_port(f, &pp) == 0 && pp.type == PT_PORT_DATA) {
		if (pp.len == 0 || pp.len > PROTO_CHUNK)
			abort();
		volatile uint8_t sink = pp.data[0] ^ pp.data[pp.len - 1];
		(void)sink;
	}
	/* Watch events: a decoded one has a kind and, but for an overflow, a
	 * relative path; a rename has its second path too. */
	if (proto_dec_watch(f, &pw) == 0 && pw.type == PT_WATCH_EVENT &&
	    (pw.kind < PW_CREATE || pw.kind > PW_OVERFLOW ||
	     (pw.kind != PW_OVERFLOW && (!pw.path || pw.path[0] == '/')) ||
	     (pw.kind == PW_RENAME && (!pw.path2 || pw.path2[0] == '/'))))
		abort();
	proto_watch_free(&pw);
	(void)proto_dec_stat_fields(f->payload, f->len, &st);
	(void)proto_get_u64(f->payload, f->len, PTAG_OFFSET, &u64);
	if (proto_get_str(f->payload, f->len, PTAG_PATH, PROTO_MAX_PATH, &str) == 0)
		free(str);
	/* Nested sequences (directory entries) are not validated by parse. */
	proto_iter_init(&it, f->payload, f->len);
	while ((r = proto_iter_next(&it, &fld)) > 0) {
		if (fld.tag != PTAG_DIRENT)
			continue;
		(void)proto_dec_stat_fields(fld.val, fld.len, &st);
		str = NULL;
		if (proto_get_str(fld.val, fld.len, PTAG_NAME, 255, &str) == 0)
			free(str);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct proto_rx rx;
	struct proto_frame f;
	size_t flen, split;
	int r, guard = 0;

	/* One-shot parse of the buffer as it is. */
	if (proto_parse(data, size, &f, &flen) == 0)
		decode_all(&f);

	/* Stream: the first byte picks where the input is split in two. */
	split = size ? data[0] % (size + 1) : 0;
	proto_rx_init(&rx);
	proto_rx_feed(&rx, data, split);
	while ((r = proto_rx_next(&rx, &f)) != 0 && guard++ < 100000)
		if (r > 0)
			decode_all(&f);
	proto_rx_feed(&rx, data + split, size - split);
	while ((r = proto_rx_next(&rx, &f)) != 0 && guard++ < 100000)
		if (r > 0)
			decode_all(&f);
	proto_rx_free(&rx);
	return 0;
}
