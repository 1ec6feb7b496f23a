#include "phases.h"

#include <stdio.h>
#include <string.h>

#include "util.h"

void phases_start(struct phases *ph)
{
	memset(ph, 0, sizeof(*ph));
	ph->last = now_us();
}

void phases_add(struct phases *ph, const char *name, uint64_t us)
{
	for (int i = 0; i < ph->n; i++)
		if (!strcmp(ph->p[i].name, name)) {
			ph->p[i].us += us;
			return;
		}
	if (ph->n == PHASES_MAX)
		return;
	ph->p[ph->n].name = name;
	ph->p[ph->n].us = us;
	ph->n++;
}

void phases_mark(struct phases *ph, const char *name)
{
	uint64_t now = now_us();

	phases_add(ph, name, now - ph->last);
	ph->last = now;
}

uint64_t phases_get(const struct phases *ph, const char *name)
{
	for (int i = 0; i < ph->n; i++)
		if (!strcmp(ph->p[i].name, name))
			return ph->p[i].us;
	return 0;
}

void phases_max(struct phases *dst, const struct phases *src)
{
	for (int i = 0; i < src->n; i++) {
		uint64_t have = phases_get(dst, src->p[i].name);
		if (src->p[i].us > have)
			phases_add(dst, src->p[i].name, src->p[i].us - have);
		else if (!have)
			phases_add(dst, src->p[i].name, 0);
	}
}

static void render(const struct phases *ph, char *out, size_t cap, const char *fmt)
{
	size_t off = 0;

	if (!cap)
		return;
	out[0] = '\0';
	for (int i = 0; i < ph->n && off < cap; i++) {
		int w = snprintf(out + off, cap - off, fmt, i ? ", " : "", ph->p[i].name,
				 ph->p[i].us / 1000.0);
		if (w < 0)
			break;
		off += (size_t)w;
	}
}

void phases_text(const struct phases *ph, char *out, size_t cap)
{
	render(ph, out, cap, "%s%s %.2f ms");
}

void phases_server_timing(const struct phases *ph, char *out, size_t cap)
{
	render(ph, out, cap, "%s%s;dur=%.2f");
}
