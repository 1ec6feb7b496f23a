/* progress.c - one line of progress on stderr while a long call runs, when
 * stderr is a terminal (nothing otherwise: logs and pipes get no carriage
 * returns). The server tells no fraction done for builds, suspend, restore
 * or fork, so the line is what it can honestly show: a spinner, the time
 * so far, and the last thing the server said (a build's output line), cut
 * to the terminal's width. A thread redraws it four times a second; the
 * line is erased when the call ends, so what the command prints after it
 * starts on a clean line. One at a time (the process's), so an error
 * printed in the middle of it (cli_fail) can end it first. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>

#include "cli.h"

#define TICK_MS 250

struct cli_progress {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;
	char *what;      /* "building debian" */
	char *note;      /* the last message; NULL: none yet */
	uint64_t start_ms;
	unsigned tick;
};

static int term_width(void)
{
	struct winsize ws;

	if (ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
		return ws.ws_col;
	return 80;
}

/* Under p->mu. */
static void draw(struct cli_progress *p)
{
	static const char spin[] = "|/-\\";
	uint64_t ms = now_ms() - p->start_ms;
	struct buf line;
	int width = term_width() - 1;   /* the last column would wrap on some terminals */

	buf_init(&line);
	buf_printf(&line, "%c %s %llu.%llus", spin[p->tick++ % 4], p->what,
		   (unsigned long long)(ms / 1000), (unsigned long long)(ms % 1000 / 100));
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
	if (p->tick) {
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
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
	pthread_join(p->thread, NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	free(p->what);
	free(p->note);
	free(p);
}
