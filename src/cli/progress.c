/* progress.c - one line of progress on stderr while a long call runs, when
 * stderr is a terminal (nothing otherwise: logs and pipes get no carriage
 * returns). Where the server tells how far it is, the line is a bar with
 * the fraction done: a suspend's or restore's bytes and a fork's children
 * (polled from the sandbox's "progress" while the call runs), a template
 * build's numbered steps (from its stream). Otherwise it is what it can
 * honestly show: a spinner, the time so far, and the last thing the server
 * said (a build's output line), cut to the terminal's width. A thread
 * redraws it four times a second. A call that failed erases the line; one
 * that succeeded leaves it at 100%, so what the command prints after it
 * starts on a clean line either way. One at a time (the process's), so an
 * error printed in the middle of it (cli_fail) can end it first. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>

#include "cli.h"

#define TICK_MS 250
#define POLL_MS 200
#define BAR_WIDTH 24

struct cli_progress {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;
	bool keep;       /* leave the last line (at 100%) instead of erasing it */
	char *what;      /* "building debian" */
	char *note;      /* the last message; NULL: none yet */
	uint64_t start_ms;
	unsigned tick;
	/* how far, when the server says: done of total (0: not known) */
	uint64_t done, total;
	char unit[16];   /* "bytes": shown in MiB; else a count of it */
	char phase[24];
	/* cli_progress_follow: a second thread polling the sandbox */
	struct cli *cli;
	char *follow_target, *follow_op;
	pthread_t poller;
	bool polling;
};

static int term_width(void)
{
	struct winsize ws;

	if (ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
		return ws.ws_col;
	return 80;
}

static void add_amount(struct buf *line, const char *unit, uint64_t v)
{
	if (!strcmp(unit, "bytes"))
		buf_printf(line, "%.1f", v / 1048576.0);
	else
		buf_printf(line, "%llu", (unsigned long long)v);
}

/* Under p->mu. */
static void draw(struct cli_progress *p)
{
	static const char spin[] = "|/-\\";
	uint64_t ms = now_ms() - p->start_ms;
	struct buf line;
	int width = term_width() - 1;   /* the last column would wrap on some terminals */

	buf_init(&line);
	if (p->total) {
		uint64_t done = p->done < p->total ? p->done : p->total;
		unsigned pct = (unsigned)(done * 100 / p->total);
		unsigned fill = (unsigned)(done * BAR_WIDTH / p->total);

		buf_printf(&line, "%s [", p->what);
		for (unsigned i = 0; i < BAR_WIDTH; i++)
			buf_addc(&line, i < fill ? '#' : '-');
		buf_printf(&line, "] %3u%%", pct);
		/* no unit: a fraction of mixed parts (a build's layers within its steps) */
		if (p->unit[0]) {
			buf_addc(&line, ' ');
			add_amount(&line, p->unit, done);
			buf_addc(&line, '/');
			add_amount(&line, p->unit, p->total);
			buf_printf(&line, " %s", !strcmp(p->unit, "bytes") ? "MiB" : p->unit);
		}
	} else {
		buf_printf(&line, "%c %s", p->keep ? ' ' : spin[p->tick % 4], p->what);
		if (p->done && p->unit[0]) {
			buf_addc(&line, ' ');
			add_amount(&line, p->unit, p->done);
			buf_printf(&line, " %s", !strcmp(p->unit, "bytes") ? "MiB" : p->unit);
		}
	}
	p->tick++;
	buf_printf(&line, "  %llu.%llus", (unsigned long long)(ms / 1000),
		   (unsigned long long)(ms % 1000 / 100));
	if (p->phase[0])
		buf_printf(&line, "  %s", p->phase);
	if (p->note && *p->note)
		buf_printf(&line, "  %s", p->note);
	/* printable bytes only: a build's output may hold escapes of its own */
	for (size_t i = 0; i < line.len; i++)
		if ((unsigned char)line.data[i] < 0x20 || line.data[i] == 0x7f)
			line.data[i] = ' ';
	fprintf(stderr, "\r\033[K%.*s", (int)(line.len < (size_t)width ? line.len : (size_t)width),
		line.data);
	fflush(stderr);
	buf_free(&line);
}

static void *tick_main(void *arg)
{
	struct cli_progress *p = arg;

	pthread_mutex_lock(&p->mu);
	while (!p->stop) {
		struct timespec ts;

		/* not at once: a call that ends within a tick draws nothing */
		if (p->tick || now_ms() - p->start_ms >= TICK_MS)
			draw(p);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += TICK_MS * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&p->cv, &p->mu, &ts);
	}
	if (p->keep) {
		draw(p);   /* the last figures, then the line stays */
		fputc('\n', stderr);
		fflush(stderr);
	} else if (p->tick) {
		fputs("\r\033[K", stderr);   /* erase it */
		fflush(stderr);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

static pthread_mutex_t active_mu = PTHREAD_MUTEX_INITIALIZER;
static struct cli_progress *active;   /* under active_mu */

void cli_progress_start(const char *fmt, ...)
{
	struct cli_progress *p;
	va_list ap;

	if (!isatty(2) || getenv("AIRLOCK_NO_PROGRESS"))
		return;
	cli_progress_end();
	p = xcalloc(1, sizeof(*p));
	va_start(ap, fmt);
	if (vasprintf(&p->what, fmt, ap) < 0)
		p->what = NULL;
	va_end(ap);
	if (!p->what) {
		free(p);
		return;
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->start_ms = now_ms();
	if (pthread_create(&p->thread, NULL, tick_main, p) != 0) {
		free(p->what);
		free(p);
		return;
	}
	pthread_mutex_lock(&active_mu);
	active = p;
	pthread_mutex_unlock(&active_mu);
}

void cli_progress_note(const char *msg)
{
	struct cli_progress *p;

	pthread_mutex_lock(&active_mu);
	p = active;
	if (p) {
		pthread_mutex_lock(&p->mu);
		free(p->note);
		p->note = xstrdup(msg);
		draw(p);
		pthread_mutex_unlock(&p->mu);
	}
	pthread_mutex_unlock(&active_mu);
}

/* Under p->mu: a figure from the server. */
static void set_locked(struct cli_progress *p, uint64_t done, uint64_t total, const char *unit,
		       const char *phase)
{
	p->done = done;
	p->total = total;
	snprintf(p->unit, sizeof(p->unit), "%s", unit ? unit : "");
	snprintf(p->phase, sizeof(p->phase), "%s", phase ? phase : "");
}

void cli_progress_set(uint64_t done, uint64_t total, const char *unit, const char *phase)
{
	pthread_mutex_lock(&active_mu);
	if (active) {
		pthread_mutex_lock(&active->mu);
		set_locked(active, done, total, unit, phase);
		draw(active);
		pthread_mutex_unlock(&active->mu);
	}
	pthread_mutex_unlock(&active_mu);
}

/* One GET of the followed sandbox; its "progress" when it is of our op. */
static void poll_once(struct cli_progress *p, const char *hdr)
{
	struct http_resp resp;
	err_t err = { 0 };
	json *j = NULL;
	const json *pr;

	if (http_request_timeout(p->cli->url, "GET", p->follow_target, hdr, NULL, 0, 2000, &resp,
				 &err) < 0)
		return;   /* the call itself reports a server that went away */
	if (resp.status == 200 && resp.body.len)
		j = json_parse(resp.body.data, resp.body.len, &err);
	pr = j ? json_get(j, "progress") : NULL;
	if (pr && pr->type == JSON_OBJ) {
		const char *op = json_get_str(pr, "op");
		bool bad = false;
		int64_t done = json_get_int(pr, "done", 0, &bad);
		const json *t = json_get(pr, "total");
		int64_t total = t && t->type == JSON_NUM && t->is_int ? t->i : 0;

		if (op && !strcmp(op, p->follow_op) && !bad && done >= 0 && total >= 0) {
			pthread_mutex_lock(&p->mu);
			/* A phase with no figure while the bar has a total:
			 * before the transfer (a restore's manifest, its
			 * total known from the GET before the call) the bar
			 * stays as it is; after it (the restore's start) the
			 * transfer is done and the bar full. */
			if (!total && p->total) {
				total = (int64_t)p->total;
				done = p->done ? total : 0;
			}
			/* never backwards: a late answer may be older than the last */
			if (!p->stop && ((uint64_t)total != p->total || (uint64_t)done >= p->done)) {
				set_locked(p, (uint64_t)done, (uint64_t)total,
					   json_get_str(pr, "unit"), json_get_str(pr, "phase"));
				draw(p);
			}
			pthread_mutex_unlock(&p->mu);
		}
	}
	json_free(j);
	http_resp_free(&resp);
}

static void *poll_main(void *arg)
{
	struct cli_progress *p = arg;
	_cleanup_free_ char *hdr = cli_headers(p->cli, NULL);

	pthread_mutex_lock(&p->mu);
	while (!p->stop) {
		struct timespec ts;

		pthread_mutex_unlock(&p->mu);
		poll_once(p, hdr);
		pthread_mutex_lock(&p->mu);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += POLL_MS * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		if (!p->stop)
			pthread_cond_timedwait(&p->cv, &p->mu, &ts);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

void cli_progress_follow(struct cli *cli, const char *sandbox_id, const char *op)
{
	struct cli_progress *p;

	pthread_mutex_lock(&active_mu);
	p = active;
	/* the caller loaded the config (cli_load may print an error, which
	 * ends the progress: not under active_mu) */
	if (p && !p->polling && cli->loaded) {
		_cleanup_free_ char *id = cli_escape(sandbox_id);

		p->cli = cli;
		p->follow_target = xasprintf("/v1/sandboxes/%s", id);
		p->follow_op = xstrdup(op);
		p->polling = pthread_create(&p->poller, NULL, poll_main, p) == 0;
	}
	pthread_mutex_unlock(&active_mu);
}

void cli_progress_done(uint64_t total, const char *unit)
{
	pthread_mutex_lock(&active_mu);
	if (active) {
		pthread_mutex_lock(&active->mu);
		/* the total from the answer: also when no poll saw a figure
		 * (a call quicker than a poll), so the unit comes with it */
		if (total) {
			active->total = total;
			snprintf(active->unit, sizeof(active->unit), "%s", unit ? unit : "");
		}
		/* no figure ever came (a call quicker than a poll): nothing to
		 * leave at 100%, the line is erased as on failure */
		active->keep = active->total != 0;
		active->done = active->total;
		active->phase[0] = '\0';
		pthread_mutex_unlock(&active->mu);
	}
	pthread_mutex_unlock(&active_mu);
	cli_progress_end();
}

void cli_progress_end(void)
{
	struct cli_progress *p;

	pthread_mutex_lock(&active_mu);
	p = active;
	active = NULL;
	pthread_mutex_unlock(&active_mu);
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	if (p->polling)
		pthread_join(p->poller, NULL);
	pthread_join(p->thread, NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	free(p->what);
	free(p->note);
	free(p->follow_target);
	free(p->follow_op);
	free(p);
}
