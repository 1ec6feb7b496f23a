/* Unit test for src/node/proc/ring.c: absolute offsets, wrap-around, growth,
 * dropped ranges, gaps and duplicates from the producer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/node/proc/ring.h"
#include "check.h"


/* The byte the reference stream has at offset o. */
static char ref(uint64_t o)
{
	return (char)('a' + (o * 7 + o / 13) % 26);
}

static void fill(char *p, uint64_t off, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = ref(off + i);
}

static int check_range(const struct ring *r, uint64_t from, size_t n)
{
	char *buf = malloc(n + 1);
	uint64_t off = from;
	size_t got = ring_read(r, &off, buf, n);
	int ok = off == from && got == n;

	for (size_t i = 0; ok && i < n; i++)
		ok = buf[i] == ref(from + i);
	free(buf);
	return ok;
}

static void test_basic(void)
{
	struct ring r;
	char buf[64];
	uint64_t off = 0;

	ring_init(&r, 16);
	CHECK(r.start == 0 && r.end == 0);
	CHECK(ring_read(&r, &off, buf, sizeof(buf)) == 0 && off == 0);
	ring_write(&r, "hello", 5);
	CHECK(r.start == 0 && r.end == 5);
	off = 0;
	CHECK(ring_read(&r, &off, buf, sizeof(buf)) == 5 && off == 0);
	CHECK(memcmp(buf, "hello", 5) == 0);
	off = 2;
	CHECK(ring_read(&r, &off, buf, 2) == 2 && off == 2 && memcmp(buf, "ll", 2) == 0);
	off = 99;   /* beyond end: clamped, nothing */
	CHECK(ring_read(&r, &off, buf, sizeof(buf)) == 0 && off == 5);
	ring_write(&r, NULL, 0);
	CHECK(r.end == 5);
	ring_free(&r);
}

static void test_wrap_and_drop(void)
{
	struct ring r;
	char data[100], buf[64];
	uint64_t off;

	ring_init(&r, 16);
	fill(data, 0, 10);
	ring_write(&r, data, 10);
	fill(data, 10, 10);
	ring_write(&r, data, 10);     /* 20 bytes seen, the last 16 kept */
	CHECK(r.end == 20 && r.start == 4);
	CHECK(check_range(&r, 4, 16));
	/* Reading from a dropped offset starts at the buffer start. */
	off = 0;
	CHECK(ring_read(&r, &off, buf, sizeof(buf)) == 16 && off == 4);
	CHECK(buf[0] == ref(4) && buf[15] == ref(19));
	/* Many small writes wrap many times. */
	for (uint64_t o = 20; o < 1000; o += 3) {
		fill(data, o, 3);
		ring_write(&r, data, 3);
	}
	CHECK(r.end == 1001);
	CHECK(r.end - r.start == 16);
	CHECK(check_range(&r, r.start, 16));
	CHECK(check_range(&r, r.end - 5, 5));
	ring_free(&r);
}

static void test_big_write(void)
{
	struct ring r;
	char *data = malloc(100000);

	ring_init(&r, 1000);
	fill(data, 0, 100000);
	ring_write(&r, data, 100000);  /* larger than cap: only the tail stays */
	CHECK(r.end == 100000 && r.start == 99000);
	CHECK(check_range(&r, 99000, 1000));
	fill(data, 100000, 10);
	ring_write(&r, data, 10);
	CHECK(r.end == 100010 && r.start == 99010);
	CHECK(check_range(&r, 99010, 1000));
	ring_free(&r);
	free(data);
}

static void test_growth(void)
{
	struct ring r;
	char *data = malloc(1 << 20);
	uint64_t o = 0;

	/* Growing re-lays out wrapped data: write odd sizes so positions wrap
	 * before each growth. */
	ring_init(&r, 1 << 20);
	for (size_t step = 1; o < (3u << 20); step = step * 3 % 40000 + 1) {
		fill(data, o, step);
		ring_write(&r, data, step);
		o += step;
		CHECK(r.end == o);
		size_t kept = (size_t)(r.end - r.start);
		CHECK(kept == (o < (1u << 20) ? o : (1u << 20)));
		if (failures)
			break;
	}
	CHECK(check_range(&r, r.start, (size_t)(r.end - r.start)));
	ring_free(&r);
	free(data);
}

static void test_write_at(void)
{
	struct ring r;
	char data[64];

	ring_init(&r, 32);
	fill(data, 0, 10);
	CHECK(ring_write_at(&r, 0, data, 10) == 10);
	/* Duplicate: fully seen. */
	CHECK(ring_write_at(&r, 0, data, 10) == 0 && r.end == 10);
	/* Overlap: only the new tail is appended. */
	fill(data, 5, 10);
	CHECK(ring_write_at(&r, 5, data, 10) == 5 && r.end == 15);
	CHECK(check_range(&r, 0, 15));
	/* Gap: bytes [15, 40) were lost upstream. */
	fill(data, 40, 8);
	CHECK(ring_write_at(&r, 40, data, 8) == 8);
	CHECK(r.start == 40 && r.end == 48);
	CHECK(check_range(&r, 40, 8));
	uint64_t off = 15;
	char buf[64];
	CHECK(ring_read(&r, &off, buf, sizeof(buf)) == 8 && off == 40);
	ring_free(&r);
}

int main(void)
{
	test_basic();
	test_wrap_and_drop();
	test_big_write();
	test_growth();
	test_write_at();
	if (failures) {
		fprintf(stderr, "test-node-ring: %d failures\n", failures);
		return 1;
	}
	printf("test-node-ring: ok\n");
	return 0;
}
