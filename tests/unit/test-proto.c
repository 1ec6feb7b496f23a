/* test-proto: frame encode/decode round trips and every malformed-input class
 * (truncated, oversized, bad magic, bad version, field overrun, too many
 * arguments, bad strings), plus the stream receiver's resync. Exit 0 = pass. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../../src/guestproto/proto.h"
#include "../../src/lib/ident.h"
#include "check.h"


static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Parse exactly one frame that fills b. */
static int parse_one(const struct buf *b, struct proto_frame *f)
{
	size_t flen;
	int r = proto_parse((const uint8_t *)b->data, b->len, f, &flen);
	if (r == 0)
		CHECK(flen == b->len);
	return r;
}

static void test_header_roundtrip(void)
{
	struct buf b;
	struct proto_enc e;
	struct proto_frame f;
	uint32_t v32;
	uint64_t v64;
	int64_t i64;
	uint16_t v16;
	uint8_t v8;
	char *s = NULL;

	buf_init(&b);
	proto_enc_begin(&e, &b, PT_STATUS, PROTO_F_MORE, 0xdeadbeef);
	proto_enc_u8(&e, 100, 7);
	proto_enc_u16(&e, 101, 0xabcd);
	proto_enc_u32(&e, 102, 0x12345678);
	proto_enc_u64(&e, 103, 0x0102030405060708ull);
	proto_enc_i64(&e, 104, -5);
	proto_enc_str(&e, 105, "hello");
	proto_enc_bytes(&e, 106, NULL, 0);
	CHECK(proto_enc_end(&e) == 0);
	CHECK(memcmp(b.data, "ALCK", 4) == 0);
	CHECK(parse_one(&b, &f) == 0);
	CHECK(f.type == PT_STATUS && f.flags == PROTO_F_MORE && f.req_id == 0xdeadbeef);
	CHECK(proto_get_u8(f.payload, f.len, 100, &v8) == 0 && v8 == 7);
	CHECK(proto_get_u16(f.payload, f.len, 101, &v16) == 0 && v16 == 0xabcd);
	CHECK(proto_get_u32(f.payload, f.len, 102, &v32) == 0 && v32 == 0x12345678);
	CHECK(proto_get_u64(f.payload, f.len, 103, &v64) == 0 && v64 == 0x0102030405060708ull);
	CHECK(proto_get_i64(f.payload, f.len, 104, &i64) == 0 && i64 == -5);
	CHECK(proto_get_str(f.payload, f.len, 105, 100, &s) == 0 && !strcmp(s, "hello"));
	free(s);
	s = NULL;
	CHECK(proto_get_str(f.payload, f.len, 105, 3, &s) == -EBADMSG);   /* over max */
	CHECK(proto_get_str(f.payload, f.len, 106, 3, &s) == 0 && s[0] == '\0');
	free(s);
	/* wrong size for the type, absent tag */
	CHECK(proto_get_u32(f.payload, f.len, 100, &v32) == -EBADMSG);
	CHECK(proto_get_u32(f.payload, f.len, 999, &v32) == -ENOENT);
	CHECK(!proto_get_flag(f.payload, f.len, 999));
	CHECK(proto_get_flag(f.payload, f.len, 100));
	/* truncated at every length: never a frame, never a crash */
	for (size_t n = 0; n < b.len; n++) {
		size_t flen;
		CHECK(proto_parse((const uint8_t *)b.data, n, &f, &flen) == -EAGAIN);
	}
	buf_free(&b);
}

static void test_exec_roundtrip(void)
{
	char *argv[] = { "sh", "-c", "echo hi", NULL };
	char *env[] = { "A=1", "B=", NULL };
	struct proto_exec x = { .argv = argv, .env = env, .cwd = "/work", .uid = 1000,
				.gid = 1001, .pty = true, .rows = 40, .cols = 120,
				.stdin_open = true };
	struct proto_exec y;
	struct proto_frame f;
	struct buf b;

	buf_init(&b);
	CHECK(proto_enc_exec(&b, 9, &x) == 0);
	CHECK(parse_one(&b, &f) == 0);
	CHECK(f.type == PT_EXEC && f.req_id == 9);
	CHECK(proto_dec_exec(&f, &y) == 0);
	CHECK(y.argc == 3 && !strcmp(y.argv[2], "echo hi") && y.argv[3] == NULL);
	CHECK(y.envc == 2 && !strcmp(y.env[1], "B=") && y.env[2] == NULL);
	CHECK(y.cwd && !strcmp(y.cwd, "/work"));
	CHECK(y.uid == 1000 && y.gid == 1001 && y.pty && y.rows == 40 && y.cols == 120);
	CHECK(y.stdin_open);
	proto_exec_free(&y);

	/* no env: env stays NULL (guest default env) */
	x.env = NULL;
	x.pty = false;
	buf_reset(&b);
	CHECK(proto_enc_exec(&b, 10, &x) == 0);
	CHECK(parse_one(&b, &f) == 0);
	CHECK(proto_dec_exec(&f, &y) == 0);
	CHECK(y.env == NULL && y.envc == 0 && !y.pty);
	proto_exec_free(&y);

	/* empty argv refused on both sides */
	char *none[] = { NULL };
	x.argv = none;
	CHECK(proto_enc_exec(&b, 11, &x) == -EINVAL);
	struct proto_enc e;
	buf_reset(&b);
	proto_enc_begin(&e, &b, PT_EXEC, 0, 12);
	proto_enc_str(&e, PTAG_CWD, "/");
	CHECK(proto_enc_end(&e) == 0);
	CHECK(parse_one(&b, &f) == 0);
	CHECK(proto_dec_exec(&f, &y) == -EINVAL);
	buf_free(&b);
}

static void test_too_many_args(void)
{
	struct proto_enc e;
	struct proto_frame f;
	struct proto_exec y;
	struct buf b;

	buf_init(&b);
	proto_enc_begin(&e, &b, PT_EXEC, 0, 1);
	for (int i = 0; i < PROTO_MAX_ARGV + 1; i++)
		proto_enc_str(&e, PTAG_ARG, "x");
	CHECK(proto_enc_end(&e) == 0);
	CHECK(parse_one(&b, &f) == 0);
	CHECK(proto_dec_exec(&f, &y) == -E2BIG);

	buf_reset(&b);
	proto_enc_begin(&e, &b, PT_EXEC, 0, 1);
	proto_enc_str(&e, PTAG_ARG, "true");
	for (int i = 0; i < PROTO_MAX_ENV + 1; i++)
		proto_enc_str(&e, PTAG_ENV, "A=1");
	CHECK(proto_enc_end(&e) == 0);
	CHECK(parse_one(&b, &f) == 0);
	CHECK(proto_dec_exec(&f, &y) == -E2BIG);

	/* encoder refuses too: */
	char **argv = calloc(PROTO_MAX_ARGV + 2, sizeof(char *));
	for (int i = 0; i < PROTO_MAX_ARGV + 1; i++)
		argv[i] = "a";
	struct proto_exec x = { .argv = argv };
	CHECK(proto_enc_exec(&b, 1, &x) == -E2BIG);
	free(argv);

	/* an ARG with an embedded NUL */
	buf_reset(&b);
	proto_enc_begin(&e, &b, PT_EXEC, 0, 1);
	proto_enc_bytes(&e, PTAG_ARG, "a\0b", 3);
	CHECK(proto_enc_end(&e) == 0);
	CHECK(parse_one(&b, &f) == 0);
	CHECK(proto_dec_exec(&f, &y) == -EBADMSG);

	/* more fields than PROTO_MAX_FIELDS (empty fields, fits in a frame) */
	buf_reset(&b);
	proto_enc_begin(&e, &b, PT_EXEC, 0, 1);
	for (int i = 0; i < PROTO_MAX_FIELDS + 1; i++)
		proto_enc_bytes(&e, 999, NULL, 0);
	CHECK(proto_enc_end(&e) == 0);
	CHECK(parse_one(&b, &f) == -EBADMSG);
	buf_free(&b);
}

static void test_malformed(void)
{
	struct proto_enc e;
	struct proto_frame f;
	struct buf b;
	size_t flen;
	uint8_t *p;

	buf_init(&b);
	proto_enc_begin(&e, &b, PT_STAT, 0, 77);
	proto_enc_str(&e, PTAG_PATH, "/etc/passwd");
	CHECK(proto_enc_end(&e) == 0);
	p = (uint8_t *)b.data;

	/* bad magic */
	p[0] ^= 0xff;
	CHECK(proto_parse(p, b.len, &f, &flen) == -EPROTO && flen == 0);
	p[0] ^= 0xff;

	/* bad version: boundary known, id reported */
	p[4] = 2;
	CHECK(proto_parse(p, b.len, &f, &flen) == -EPROTONOSUPPORT);
	CHECK(flen == b.len && f.req_id == 77);
	p[4] = PROTO_VERSION;

	/* oversized declared length: refused from the header alone */
	put32(p + 12, PROTO_MAX_PAYLOAD + 1);
	CHECK(proto_parse(p, PROTO_HDR_LEN, &f, &flen) == -EMSGSIZE && flen == 0);
	CHECK(f.req_id == 77);
	put32(p + 12, 0xffffffffu);
	CHECK(proto_parse(p, b.len, &f, &flen) == -EMSGSIZE);

	/* field length overruns the payload */
	uint32_t plen = (uint32_t)(b.len - PROTO_HDR_LEN);
	put32(p + 12, plen);
	put32(p + PROTO_HDR_LEN + 2, plen);   /* field len > what is left */
	CHECK(proto_parse(p, b.len, &f, &flen) == -EBADMSG && flen == b.len);
	put32(p + PROTO_HDR_LEN + 2, 0xffffffffu);
	CHECK(proto_parse(p, b.len, &f, &flen) == -EBADMSG);

	/* a payload that ends inside a field header */
	buf_reset(&b);
	proto_enc_begin(&e, &b, PT_STATUS, 0, 5);
	CHECK(proto_enc_end(&e) == 0);
	buf_add(&b, "\x01\x00\x00", 3);
	p = (uint8_t *)b.data;
	put32(p + 12, 3);
	CHECK(proto_parse(p, b.len, &f, &flen) == -EBADMSG);

	/* frame too large for the encoder */
	buf_reset(&b);
	char *big = calloc(1, PROTO_MAX_FRAME);
	proto_enc_begin(&e, &b, PT_WRITE, 0, 1);
	proto_enc_bytes(&e, PTAG_DATA, big, PROTO_MAX_FRAME);
	CHECK(proto_enc_end(&e) == -EMSGSIZE);
	CHECK(b.len == 0);
	free(big);

	/* nested field that overruns its parent: iter notices */
	struct proto_iter it;
	struct proto_field fld;
	uint8_t nested[] = { 1, 0, 50, 0, 0, 0, 'x' };
	proto_iter_init(&it, nested, sizeof(nested));
	CHECK(proto_iter_next(&it, &fld) == -EBADMSG);
	CHECK(proto_find(nested, sizeof(nested), 1, &fld) == -EBADMSG);
	buf_free(&b);
}

static void test_typed(void)
{
	struct buf b;
	struct proto_frame f;
	size_t flen;

	buf_init(&b);
	struct proto_hello h = { .version = 1 }, h2;
	strcpy(h.boot_id, "abc123");
	CHECK(proto_enc_hello(&b, 0, &h) == 0);
	CHECK(parse_one(&b, &f) == 0 && f.type == PT_HELLO);
	CHECK(proto_dec_hello(&f, &h2) == 0 && h2.version == 1 && !strcmp(h2.boot_id, "abc123"));

	buf_reset(&b);
	CHECK(proto_enc_error(&b, 4, ENOENT, "no such\nthing") == 0);
	struct proto_error pe;
	CHECK(parse_one(&b, &f) == 0 && f.type == PT_ERROR && f.req_id == 4);
	CHECK(proto_dec_error(&f, &pe) == 0 && pe.err == ENOENT);
	CHECK(!strcmp(pe.msg, "no such?thing"));   /* control chars neutralised */

	buf_reset(&b);
	struct proto_output o = { .pid = 42, .fd = 2, .offset = 1000, .data = (const uint8_t *)"xyz",
				  .len = 3 }, o2;
	CHECK(proto_enc_output(&b, &o) == 0);
	CHECK(parse_one(&b, &f) == 0);
	CHECK(proto_dec_output(&f, &o2) == 0 && o2.pid == 42 && o2.fd == 2 && o2.offset == 1000);
	CHECK(o2.len == 3 && !memcmp(o2.data, "xyz", 3));
	/* bad fd number */
	buf_reset(&b);
	o.fd = 3;
	CHECK(proto_enc_output(&b, &o) == 0);
	CHECK(parse_one(&b, &f) == 0 && proto_dec_output(&f, &o2) == -EBADMSG);
	/* offset + len wraps */
	buf_reset(&b);
	o.fd = 1;
	o.offset = UINT64_MAX - 1;
	CHECK(proto_enc_output(&b, &o) == 0);
	CHECK(parse_one(&b, &f) == 0 && proto_dec_output(&f, &o2) == -EBADMSG);

	buf_reset(&b);
	struct proto_exit x = { .pid = 7, .code = 3 }, x2;
	CHECK(proto_enc_exit(&b, &x) == 0);
	CHECK(parse_one(&b, &f) == 0 && proto_dec_exit(&f, &x2) == 0);
	CHECK(x2.pid == 7 && x2.code == 3 && x2.signal == 0);
	buf_reset(&b);
	x = (struct proto_exit){ .pid = 8, .code = -1, .signal = 9 };
	CHECK(proto_enc_exit(&b, &x) == 0);
	CHECK(parse_one(&b, &f) == 0 && proto_dec_exit(&f, &x2) == 0);
	CHECK(x2.pid == 8 && x2.code == -1 && x2.signal == 9);

	buf_reset(&b);
	struct proto_status s = { .last_activity_ms = 1700000000000, .uptime_ms = 5, .n_procs = 2,
				  .cpu_ms = 1234 }, s2;
	CHECK(proto_enc_status(&b, 3, &s) == 0);
	CHECK(parse_one(&b, &f) == 0 && proto_dec_status(&f, &s2) == 0);
	CHECK(s2.last_activity_ms == s.last_activity_ms && s2.uptime_ms == 5 && s2.n_procs == 2);
	CHECK(s2.cpu_ms == 1234);
	/* An agent without CPU_MS (older) decodes with 0; a CPU_MS of the
	 * wrong size is malformed. */
	{
		struct proto_enc e2;
		buf_reset(&b);
		proto_enc_begin(&e2, &b, PT_STATUS_OK, 0, 4);
		proto_enc_i64(&e2, PTAG_LAST_ACTIVITY, 7);
		proto_enc_u64(&e2, PTAG_UPTIME, 8);
		proto_enc_u32(&e2, PTAG_NPROCS, 0);
		CHECK(proto_enc_end(&e2) == 0);
		CHECK(parse_one(&b, &f) == 0 && proto_dec_status(&f, &s2) == 0 && s2.cpu_ms == 0);
		buf_reset(&b);
		proto_enc_begin(&e2, &b, PT_STATUS_OK, 0, 4);
		proto_enc_i64(&e2, PTAG_LAST_ACTIVITY, 7);
		proto_enc_u64(&e2, PTAG_UPTIME, 8);
		proto_enc_u32(&e2, PTAG_NPROCS, 0);
		proto_enc_u32(&e2, PTAG_CPU_MS, 5);
		CHECK(proto_enc_end(&e2) == 0);
		CHECK(parse_one(&b, &f) == 0 && proto_dec_status(&f, &s2) == -EBADMSG);
	}

	/* stat in a nested dirent */
	buf_reset(&b);
	struct proto_enc e;
	struct proto_stat st = { .type = 'd', .size = 4096, .mode = 0755, .mtime_ms = -1,
				 .uid = 1, .gid = 2 }, st2;
	proto_enc_begin(&e, &b, PT_LIST_OK, 0, 1);
	size_t mark = proto_enc_nest_begin(&e, PTAG_DIRENT);
	proto_enc_str(&e, PTAG_NAME, "dir");
	proto_enc_stat_fields(&e, &st);
	proto_enc_nest_end(&e, mark);
	CHECK(proto_enc_end(&e) == 0);
	CHECK(proto_parse((const uint8_t *)b.data, b.len, &f, &flen) == 0);
	struct proto_field fld;
	CHECK(proto_find(f.payload, f.len, PTAG_DIRENT, &fld) == 0);
	CHECK(proto_dec_stat_fields(fld.val, fld.len, &st2) == 0);
	CHECK(st2.type == 'd' && st2.size == 4096 && st2.mode == 0755 && st2.mtime_ms == -1);
	char name[16];
	CHECK(proto_get_strbuf(fld.val, fld.len, PTAG_NAME, name, sizeof(name)) == 0);
	CHECK(!strcmp(name, "dir"));
	CHECK(proto_get_strbuf(fld.val, fld.len, PTAG_NAME, name, 3) == -EBADMSG);
	buf_free(&b);
}

/* RESET: round trip, the encoder's and the decoder's range checks, and
 * hand-made frames with fields the encoder would never write. */
static void reset_frame(struct buf *b, uint64_t wall, size_t ent_len, const char *host,
			const char *mid)
{
	struct proto_enc e;
	uint8_t ent[600];

	memset(ent, 0x5a, sizeof(ent));
	buf_reset(b);
	proto_enc_begin(&e, b, PT_RESET, 0, 9);
	proto_enc_u64(&e, PTAG_WALLCLOCK, wall);
	proto_enc_bytes(&e, PTAG_ENTROPY, ent, ent_len);
	if (host)
		proto_enc_str(&e, PTAG_HOSTNAME, host);
	if (mid)
		proto_enc_str(&e, PTAG_MACHINE_ID, mid);
	CHECK(proto_enc_end(&e) == 0);
}

static void test_reset(void)
{
	const char *mid = "0123456789abcdef0123456789abcdef";
	const uint64_t now_ns = 1764000000ull * 1000000000ull + 123456789;
	struct proto_reset x = { .wall_ns = now_ns, .entropy_len = 48 }, y;
	struct proto_frame f;
	struct buf b;

	buf_init(&b);
	for (size_t i = 0; i < x.entropy_len; i++)
		x.entropy[i] = (uint8_t)i;
	strcpy(x.hostname, "sb-1.example");
	strcpy(x.machine_id, mid);
	CHECK(proto_enc_reset(&b, 7, &x) == 0);
	CHECK(parse_one(&b, &f) == 0 && f.type == PT_RESET && f.req_id == 7);
	CHECK(!strcmp(proto_type_name(PT_RESET), "RESET"));
	CHECK(proto_dec_reset(&f, &y) == 0);
	CHECK(y.wall_ns == now_ns && y.entropy_len == 48 && !memcmp(y.entropy, x.entropy, 48));
	CHECK(!strcmp(y.hostname, "sb-1.example") && !strcmp(y.machine_id, mid));

	/* wall clock 0 = leave the guest's clock alone */
	x.wall_ns = 0;
	buf_reset(&b);
	CHECK(proto_enc_reset(&b, 7, &x) == 0);
	CHECK(parse_one(&b, &f) == 0 && proto_dec_reset(&f, &y) == 0 && y.wall_ns == 0);

	/* The network (vm): round trip; absent stays 0. */
	CHECK(y.net_addr == 0 && y.net_prefix == 0);
	x.net_addr = 0x0afe0007;      /* 10.254.0.7/31 via .6, resolver .6 */
	x.net_prefix = 31;
	x.net_gateway = x.net_dns = 0x0afe0006;
	buf_reset(&b);
	CHECK(proto_enc_reset(&b, 7, &x) == 0);
	CHECK(parse_one(&b, &f) == 0 && proto_dec_reset(&f, &y) == 0);
	CHECK(y.net_addr == 0x0afe0007 && y.net_prefix == 31 && y.net_gateway == 0x0afe0006 &&
	      y.net_dns == 0x0afe0006);

	/* The encoder refuses what the decoder would. */
	struct proto_reset bad;
	size_t before = b.len;
#define ENC_BAD(mut)                                                             	do {                                                                     		bad = x;                                                         		mut;                                                             		CHECK(proto_enc_reset(&b, 1, &bad) == -EINVAL && b.len == before); 	} while (0)
	ENC_BAD(bad.entropy_len = 31);
	ENC_BAD(bad.entropy_len = PROTO_RESET_ENTROPY_MAX + 1);
	ENC_BAD(bad.wall_ns = 1000);                       /* 1970 */
	ENC_BAD(bad.wall_ns = UINT64_MAX);                 /* year 2554 */
	ENC_BAD(strcpy(bad.hostname, ""));
	ENC_BAD(strcpy(bad.hostname, "has space"));
	ENC_BAD(strcpy(bad.hostname, "-lead"));
	ENC_BAD(strcpy(bad.hostname, "semi;colon"));
	ENC_BAD(strcpy(bad.machine_id, "0123456789ABCDEF0123456789abcdef"));
	ENC_BAD(strcpy(bad.machine_id, "0123"));
	ENC_BAD(strcpy(bad.machine_id, "00000000000000000000000000000000"));
	ENC_BAD(bad.net_prefix = 0);
	ENC_BAD(bad.net_prefix = 33);
	ENC_BAD(bad.net_gateway = 0x0afe0009);             /* outside the /31 */
	ENC_BAD(bad.net_gateway = bad.net_addr);
	ENC_BAD(bad.net_dns = 0);
	ENC_BAD(bad.net_addr = 0x7f000001);                /* loopback */
	ENC_BAD(bad.net_addr = 0xe0000001);                /* multicast */
	ENC_BAD((bad.net_addr = 0x0a000000, bad.net_gateway = 0x0a000001,
		 bad.net_prefix = 24));                    /* the network address */
	ENC_BAD((bad.net_addr = 0, bad.net_prefix = 31));  /* no address, other fields */
#undef ENC_BAD
	char h64[65];
	memset(h64, 'a', 64);
	h64[64] = '\0';
	CHECK(ident_hostname_ok(h64));
	CHECK(proto_machine_id_ok(mid));

	/* Hand-made frames. */
	reset_frame(&b, now_ns, 32, "a", mid);
	CHECK(parse_one(&b, &f) == 0 && proto_dec_reset(&f, &y) == 0 && y.entropy_len == 32);
	reset_frame(&b, now_ns, 512, "a", mid);
	CHECK(parse_one(&b, &f) == 0 && proto_dec_reset(&f, &y) == 0 && y.entropy_len == 512);
	reset_frame(&b, now_ns, 31, "a", mid);
	CHECK(parse_one(&b, &f) == 0 && proto_dec_reset(&f, &y) == -EINVAL);
	reset_frame(&b, now_ns, 513, "a", mid);
	CHECK(parse_one(&b, &f) == 0 && proto_dec_reset(&f, &y) == -EINVAL);
	reset_frame(&b, now_ns, 64, NULL, mid);
	CHECK(parse_one(&b, &f) == 0 && proto_dec_reset(&f, &y) == -EBADMSG);
	reset_frame(&b, now_ns, 64, "a", NULL);
	CHECK(parse_one(&b, &f) == 0 && proto_dec_reset(&f, &y) == -EBADMSG);
	reset_frame(&b, now_ns, 64, "a b", mid);
	CHECK(parse_one(&b, &f) == 0 && proto_dec_reset(&f, &y) == -EINVAL);
	reset_frame(&b, now_ns, 64, "a", "0123456789abcdef0123456789abcdef0");  /* 33 */
	CHECK(parse_one(&b, &f) == 0 && proto_dec_reset(&f, &y) == -EBADMSG);
	char h65[66];
	memset(h65, 'a', 65);
	h65[65] = '\0';
	reset_frame(&b, now_ns, 64, h65, mid);
	CHECK(parse_one(&b, &f) == 0 && proto_dec_reset(&f, &y) == -EBADMSG);
	reset_frame(&b, 5, 64, "a", mid);
	CHECK(parse_one(&b, &f) == 0 && proto_dec_reset(&f, &y) == -EINVAL);
	/* an address without the other network fields, and one of 0 */
	for (int k = 0; k < 2; k++) {
		struct proto_enc e;
		uint8_t ent[64] = { 0 };
		buf_reset(&b);
		proto_enc_begin(&e, &b, PT_RESET, 0, 9);
		proto_enc_u64(&e, PTAG_WALLCLOCK, now_ns);
		proto_enc_bytes(&e, PTAG_ENTROPY, ent, sizeof(ent));
		proto_enc_str(&e, PTAG_HOSTNAME, "a");
		proto_enc_str(&e, PTAG_MACHINE_ID, mid);
		proto_enc_u32(&e, PTAG_NET_ADDR, k ? 0 : 0x0afe0007);
		if (k) {
			proto_enc_u8(&e, PTAG_NET_PREFIX, 31);
			proto_enc_u32(&e, PTAG_NET_GATEWAY, 0x0afe0006);
			proto_enc_u32(&e, PTAG_NET_DNS, 0x0afe0006);
		}
		CHECK(proto_enc_end(&e) == 0);
		CHECK(parse_one(&b, &f) == 0 &&
		      proto_dec_reset(&f, &y) == (k ? -EINVAL : -EBADMSG));
	}
	/* a NUL inside the hostname */
	{
		struct proto_enc e;
		uint8_t ent[64] = { 0 };
		buf_reset(&b);
		proto_enc_begin(&e, &b, PT_RESET, 0, 9);
		proto_enc_u64(&e, PTAG_WALLCLOCK, now_ns);
		proto_enc_bytes(&e, PTAG_ENTROPY, ent, sizeof(ent));
		proto_enc_bytes(&e, PTAG_HOSTNAME, "ab\0c", 4);
		proto_enc_str(&e, PTAG_MACHINE_ID, mid);
		CHECK(proto_enc_end(&e) == 0);
		CHECK(parse_one(&b, &f) == 0 && proto_dec_reset(&f, &y) == -EBADMSG);
	}
	/* wall clock of the wrong width */
	{
		struct proto_enc e;
		uint8_t ent[64] = { 0 };
		buf_reset(&b);
		proto_enc_begin(&e, &b, PT_RESET, 0, 9);
		proto_enc_u32(&e, PTAG_WALLCLOCK, 5);
		proto_enc_bytes(&e, PTAG_ENTROPY, ent, sizeof(ent));
		proto_enc_str(&e, PTAG_HOSTNAME, "a");
		proto_enc_str(&e, PTAG_MACHINE_ID, mid);
		CHECK(proto_enc_end(&e) == 0);
		CHECK(parse_one(&b, &f) == 0 && proto_dec_reset(&f, &y) == -EBADMSG);
	}
	buf_free(&b);
}

static void test_rx_resync(void)
{
	struct proto_rx rx;
	struct proto_frame f;
	struct buf good;
	struct proto_enc e;
	uint8_t hdr[PROTO_HDR_LEN];

	buf_init(&good);
	proto_enc_begin(&e, &good, PT_STATUS, 0, 1);
	CHECK(proto_enc_end(&e) == 0);
	proto_rx_init(&rx);

	/* garbage, then a good frame fed one byte at a time */
	proto_rx_feed(&rx, "garbage-garbage-garbage", 23);
	CHECK(proto_rx_next(&rx, &f) == -EPROTO);
	CHECK(proto_rx_next(&rx, &f) == 0);    /* scanning, no more errors */
	for (size_t i = 0; i < good.len; i++) {
		proto_rx_feed(&rx, good.data + i, 1);
		int r = proto_rx_next(&rx, &f);
		CHECK(r == (i + 1 == good.len ? 1 : 0));
	}
	CHECK(f.type == PT_STATUS && f.req_id == 1);

	/* an oversized header, then a good frame */
	memcpy(hdr, good.data, PROTO_HDR_LEN);
	hdr[8] = 9;
	put32(hdr + 12, 0x7fffffff);
	proto_rx_feed(&rx, hdr, sizeof(hdr));
	CHECK(proto_rx_next(&rx, &f) == -EMSGSIZE && f.req_id == 9);
	proto_rx_feed(&rx, good.data, good.len);
	CHECK(proto_rx_next(&rx, &f) == 1 && f.req_id == 1);

	/* a frame with bad fields is skipped alone */
	uint8_t bad[PROTO_HDR_LEN + 3];
	memcpy(bad, good.data, PROTO_HDR_LEN);
	bad[8] = 5;
	put32(bad + 12, 3);
	memset(bad + PROTO_HDR_LEN, 0xee, 3);
	proto_rx_feed(&rx, bad, sizeof(bad));
	proto_rx_feed(&rx, good.data, good.len);
	CHECK(proto_rx_next(&rx, &f) == -EBADMSG && f.req_id == 5);
	CHECK(proto_rx_next(&rx, &f) == 1 && f.req_id == 1);
	CHECK(proto_rx_next(&rx, &f) == 0);
	CHECK(proto_rx_pending(&rx) == 0);

	/* a magic split across feeds while resyncing */
	proto_rx_feed(&rx, "xxxxxxxxxxxxxxxxxxAL", 20);
	CHECK(proto_rx_next(&rx, &f) == -EPROTO);
	CHECK(proto_rx_next(&rx, &f) == 0);
	proto_rx_feed(&rx, good.data + 2, good.len - 2);
	CHECK(proto_rx_next(&rx, &f) == 1 && f.type == PT_STATUS);

	proto_rx_free(&rx);
	buf_free(&good);
}

static void test_port(void)
{
	struct proto_port m = { .type = PT_PORT_OPEN, .stream = 9, .port = 8080 }, y;
	struct proto_frame f;
	struct buf b;
	uint8_t data[3] = { 'a', 0, 'z' };

	buf_init(&b);
	CHECK(proto_enc_port(&b, 5, &m) == 0);
	CHECK(parse_one(&b, &f) == 0 && f.type == PT_PORT_OPEN && f.req_id == 5);
	CHECK(!strcmp(proto_type_name(PT_PORT_OPEN), "PORT_OPEN"));
	CHECK(proto_dec_port(&f, &y) == 0 && y.stream == 9 && y.port == 8080);

	/* Stream frames other than OPEN are unsolicited: request id 0. */
	buf_reset(&b);
	m = (struct proto_port){ .type = PT_PORT_DATA, .stream = 9, .data = data, .len = 3 };
	CHECK(proto_enc_port(&b, 5, &m) == 0);
	CHECK(parse_one(&b, &f) == 0 && f.req_id == 0);
	CHECK(proto_dec_port(&f, &y) == 0 && y.type == PT_PORT_DATA && y.len == 3 &&
	      !memcmp(y.data, data, 3));

	buf_reset(&b);
	m = (struct proto_port){ .type = PT_PORT_CREDIT, .stream = 1, .credit = 4096 };
	CHECK(proto_enc_port(&b, 0, &m) == 0);
	CHECK(parse_one(&b, &f) == 0 && proto_dec_port(&f, &y) == 0 && y.credit == 4096);

	buf_reset(&b);
	m = (struct proto_port){ .type = PT_PORT_CLOSE, .stream = 1, .err = ECONNRESET };
	CHECK(proto_enc_port(&b, 0, &m) == 0);
	CHECK(parse_one(&b, &f) == 0 && proto_dec_port(&f, &y) == 0 && y.err == ECONNRESET);

	buf_reset(&b);
	m = (struct proto_port){ .type = PT_PORT_SHUT, .stream = 77 };
	CHECK(proto_enc_port(&b, 0, &m) == 0);
	CHECK(parse_one(&b, &f) == 0 && proto_dec_port(&f, &y) == 0 && y.stream == 77);

	/* The encoder refuses what the decoder refuses, and leaves nothing. */
	size_t before = b.len;
	m = (struct proto_port){ .type = PT_PORT_OPEN, .stream = 1, .port = 0 };
	CHECK(proto_enc_port(&b, 1, &m) == -EINVAL && b.len == before);
	m = (struct proto_port){ .type = PT_PORT_DATA, .stream = 1, .data = data, .len = 0 };
	CHECK(proto_enc_port(&b, 0, &m) == -EINVAL && b.len == before);
	m = (struct proto_port){ .type = PT_PORT_CREDIT, .stream = 1,
				 .credit = PROTO_PORT_WINDOW + 1 };
	CHECK(proto_enc_port(&b, 0, &m) == -EINVAL && b.len == before);
	m = (struct proto_port){ .type = PT_EXEC, .stream = 1 };
	CHECK(proto_enc_port(&b, 0, &m) == -EINVAL && b.len == before);

	/* Hand-made bad frames: a zero credit, no stream id, a wrong type. */
	struct proto_enc e;
	buf_reset(&b);
	proto_enc_begin(&e, &b, PT_PORT_CREDIT, 0, 0);
	proto_enc_u32(&e, PTAG_STREAM, 1);
	proto_enc_u32(&e, PTAG_CREDIT, 0);
	CHECK(proto_enc_end(&e) == 0);
	CHECK(parse_one(&b, &f) == 0 && proto_dec_port(&f, &y) == -EBADMSG);
	buf_reset(&b);
	proto_enc_begin(&e, &b, PT_PORT_SHUT, 0, 0);
	CHECK(proto_enc_end(&e) == 0);
	CHECK(parse_one(&b, &f) == 0 && proto_dec_port(&f, &y) == -EBADMSG);
	buf_reset(&b);
	proto_enc_begin(&e, &b, PT_OK, 0, 0);
	proto_enc_u32(&e, PTAG_STREAM, 1);
	CHECK(proto_enc_end(&e) == 0);
	CHECK(parse_one(&b, &f) == 0 && proto_dec_port(&f, &y) == -EBADMSG);
	/* CLOSE with an errno out of range decodes as EIO. */
	buf_reset(&b);
	proto_enc_begin(&e, &b, PT_PORT_CLOSE, 0, 0);
	proto_enc_u32(&e, PTAG_STREAM, 1);
	proto_enc_u32(&e, PTAG_ERRNO, 999999);
	CHECK(proto_enc_end(&e) == 0);
	CHECK(parse_one(&b, &f) == 0 && proto_dec_port(&f, &y) == 0 && y.err == EIO);
	buf_free(&b);
}

int main(void)
{
	test_header_roundtrip();
	test_exec_roundtrip();
	test_too_many_args();
	test_malformed();
	test_typed();
	test_reset();
	test_port();
	test_rx_resync();
	return check_done("test-proto");
}
