/* phases.h - where one request's time went: the steps of a fork (or any
 * multi-step verb), each timed with now_us(), rendered for a log line
 * ("capture 12.30 ms, take 4.10 ms") or an HTTP Server-Timing header
 * ("capture;dur=12.30, take;dur=4.10"). Names are the caller's string
 * literals ([a-z_-], never client input). Not thread-safe: one per thread,
 * merged afterwards with phases_max. */
#ifndef AIRLOCK_PHASES_H
#define AIRLOCK_PHASES_H

#include <stddef.h>
#include <stdint.h>

#define PHASES_MAX 24

struct phases {
	uint64_t last;   /* now_us() at the last mark */
	int n;
	struct {
		const char *name;
		uint64_t us;
	} p[PHASES_MAX];
};

/* Start timing: the next mark measures from now. */
void phases_start(struct phases *ph);
/* The step name ended now: the time since the previous mark (or start) is
 * added to it (a name marked twice sums). Past PHASES_MAX names: dropped. */
void phases_mark(struct phases *ph, const char *name);
/* Add us to step name without moving the mark. */
void phases_add(struct phases *ph, const char *name, uint64_t us);
/* The time of step name, 0 when it has none. */
uint64_t phases_get(const struct phases *ph, const char *name);
/* Every step of src into dst, each the larger of the two (children that
 * ran side by side: the slowest one's step). */
void phases_max(struct phases *dst, const struct phases *src);
/* "name 1.23 ms, ..." into out (always terminated). */
void phases_text(const struct phases *ph, char *out, size_t cap);
/* "name;dur=1.23, ..." into out (always terminated). */
void phases_server_timing(const struct phases *ph, char *out, size_t cap);

#endif
