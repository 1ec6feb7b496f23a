/* desktop.c - the desktop endpoints: start the desktop when it is not up,
 * then a screenshot (scrot), mouse and keyboard (xdotool), or the stream
 * (x11vnc + websockify serving noVNC).
 *
 * Each step is a process started through the guest agent, exactly as an
 * exec of the owner's would be (it shows in the process list), waited for
 * here with a deadline (killed past it). The desktop is started on the
 * first desktop call, not with the sandbox: a sandbox of the template that
 * never uses it pays nothing, and @e2b/desktop, which starts its own Xvfb
 * and xfce4 at create with the resolution it was given, finds the display
 * free. A desktop the SDK started is used as it is (the start script
 * checks display :0 first). docs/DESIGN.md, "Desktop", says more.
 *
 * What comes back from the sandbox is bounded: the screenshot is read
 * with a size limit (DESKTOP_PNG_MAX) and must start with PNG's signature;
 * of a process only its exit status is used.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../../lib/log.h"
#include "../http/handler.h"
#include "../proc/proc.h"
#include "../wake/wake.h"
#include "desktop.h"

#define STEP_TIMEOUT_MS 10000       /* a screenshot, a click, typing */
#define START_TIMEOUT_MS 90000      /* Xvfb + xfce4 (TCG guests are slow) */

/* Start Xvfb on :0 and xfce4 unless they run, under a lock so that two
 * first calls start one desktop. Fixed text: $1 and $2 are numbers the
 * node prints. Exit 69: not a desktop template. */
static const char start_script[] =
	"command -v Xvfb >/dev/null && command -v startxfce4 >/dev/null || exit 69\n"
	"exec 9>/tmp/.airlock-desktop.lock && flock 9 || exit 70\n"
	"if ! xdpyinfo -display :0 >/dev/null 2>&1; then\n"
	"  setsid Xvfb :0 -ac -screen 0 \"$1x$2x24\" -retro -dpi 96 -nolisten tcp"
	" </dev/null >/tmp/.airlock-xvfb.log 2>&1 9>&- &\n"
	"  i=0; until xdpyinfo -display :0 >/dev/null 2>&1; do\n"
	"    i=$((i+1)); [ $i -gt 400 ] && exit 71; sleep 0.05; done\n"
	"fi\n"
	"if ! pgrep -x xfwm4 >/dev/null; then\n"
	"  DISPLAY=:0 setsid startxfce4 </dev/null >/tmp/.airlock-xfce4.log 2>&1 9>&- &\n"
	"fi\n"
	"i=0; until pgrep -x xfwm4 >/dev/null && pgrep -x xfdesktop >/dev/null; do\n"
	"  i=$((i+1)); [ $i -gt 1200 ] && exit 72; sleep 0.05; done\n";

/* x11vnc and websockify (serving noVNC's page), both on the sandbox's
 * loopback only: the node reaches them through the guest's port streams
 * (ports.c), nothing else can. No VNC password: the port token is the
 * credential. */
static const char stream_script[] =
	"command -v x11vnc >/dev/null && command -v websockify >/dev/null || exit 69\n"
	"exec 9>/tmp/.airlock-desktop.lock && flock 9 || exit 70\n"
	"if ! pgrep -x x11vnc >/dev/null; then\n"
	"  x11vnc -bg -quiet -display :0 -forever -shared -localhost -rfbport 5900 -nopw"
	" -o /tmp/.airlock-x11vnc.log </dev/null >/dev/null 2>&1 9>&- || exit 73\n"
	"fi\n"
	"if ! netstat -tln 2>/dev/null | grep -q ':6080 '; then\n"
	"  setsid websockify --web /usr/share/novnc 127.0.0.1:6080 127.0.0.1:5900"
	" </dev/null >/tmp/.airlock-websockify.log 2>&1 9>&- &\n"
	"  i=0; until netstat -tln 2>/dev/null | grep -q ':6080 '; do\n"
	"    i=$((i+1)); [ $i -gt 400 ] && exit 74; sleep 0.05; done\n"
	"fi\n";

/* Run argv in sb and wait for it (timeout_ms at most; then it is killed).
 * 0 and *status (the exit code, or 128 + signal) when it ended; -errno
 * with err otherwise (-ETIMEDOUT, or the exec's error). */
static int desktop_run(struct node *n, struct sandbox *sb, char **argv, int timeout_ms,
		       int *status, err_t *err)
{
	static char *env[] = { "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			       "HOME=/root", "DISPLAY=" DESKTOP_DISPLAY, "LANG=C.UTF-8", NULL };
	struct exec_spec spec = { .argv = argv, .env = env, .cwd = "/" };
	struct guestconn *gc;
	struct proc *p;
	uint32_t pid;
	struct timespec dl;
	bool done;
	int r;

	gc = sandbox_gc_use(n, sb, "resumed for the desktop", err);
	if (!gc)
		return -(err->code ? err->code : EIO);
	r = guestconn_exec(gc, &spec, &pid, err);
	sandbox_gc_put(sb);
	if (r < 0)
		return err_wrap(err, "desktop: exec %s", argv[0]);

	/* Registered as exec registers (exec.c), so the process table holds
	 * its exit; the argv shown is the tool's. */
	pthread_mutex_lock(&sb->mu);
	p = proc_claim_locked(sb, pid);
	p->argv = xcalloc(2, sizeof(char *));
	p->argv[0] = xstrdup(argv[0]);
	p->refs++;
	if ((sb->state != SB_RUNNING && sb->state != SB_PAUSED) || sb->deleting) {
		p->lost = "the sandbox went away";
		proc_mark_exited_locked(sb, p, -1, SIGKILL);
	}
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += timeout_ms / 1000;
	dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	while (p->running && !sb->deleting)
		if (pthread_cond_timedwait(&p->cv, &sb->mu, &dl) == ETIMEDOUT)
			break;
	done = !p->running;
	*status = p->signal > 0 ? 128 + p->signal : p->exit_code;
	if (p->lost)
		done = false;
	proc_unref_locked(p);
	pthread_mutex_unlock(&sb->mu);
	if (done)
		return 0;
	if ((gc = sandbox_gc_get(sb))) {
		err_t e2 = { 0 };
		(void)guestconn_signal(gc, pid, SIGKILL, &e2);
		sandbox_gc_put(sb);
	}
	return err_set(err, ETIMEDOUT, "desktop: `%s` did not finish in %d ms", argv[0],
		       timeout_ms);
}

/* Answer a run that failed or exited non-zero; true when it did (and the
 * answer is sent). */
static bool run_failed(struct http_conn *c, struct sandbox *sb, int r, int status,
		       const char *what, err_t *err)
{
	if (r == -ETIMEDOUT) {
		http_respond_error(c, 504, "timeout", "%s", err->msg);
		return true;
	}
	if (r == -ENOENT) {
		http_respond_error(c, 409, "desktop_unavailable",
				   "the sandbox has no desktop tools (%s): create it from the"
				   " `desktop` template", err->msg);
		return true;
	}
	if (r < 0) {
		sandbox_respond_err(c, sb, err);
		return true;
	}
	if (status == 69 || status == 127) {
		http_respond_error(c, 409, "desktop_unavailable",
				   "the sandbox has no desktop tools: create it from the"
				   " `desktop` template");
		return true;
	}
	if (status != 0) {
		http_respond_error(c, 502, "desktop_failed", "%s failed in the sandbox (exit %d)",
				   what, status);
		return true;
	}
	return false;
}

/* The desktop up (started when it is not); false when answered. */
static bool desktop_ensure(struct node *n, struct sandbox *sb, struct http_conn *c)
{
	char w[12], h[12];
	char *argv[] = { "/bin/sh", "-c", (char *)start_script, "airlock-desktop", w, h, NULL };
	err_t err = { 0 };
	int status = 0, r;

	snprintf(w, sizeof(w), "%d", DESKTOP_WIDTH);
	snprintf(h, sizeof(h), "%d", DESKTOP_HEIGHT);
	r = desktop_run(n, sb, argv, START_TIMEOUT_MS, &status, &err);
	return !run_failed(c, sb, r, status, "starting the desktop (Xvfb, xfce4)", &err);
}

static void desktop_screenshot(struct node *n, struct sandbox *sb, struct http_conn *c)
{
	static const unsigned char sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
	_cleanup_free_ char *rnd = random_id("", 12);
	_cleanup_free_ char *path = xasprintf("/tmp/.airlock-screenshot-%s.png", rnd);
	char *argv[] = { "scrot", "--overwrite", "--pointer", path, NULL };
	struct guestconn *gc;
	err_t err = { 0 };
	struct buf png;
	int status = 0, r;

	r = desktop_run(n, sb, argv, STEP_TIMEOUT_MS, &status, &err);
	if (run_failed(c, sb, r, status, "scrot", &err))
		return;
	gc = sandbox_gc_use(n, sb, "resumed for the desktop", &err);
	if (!gc) {
		sandbox_respond_err(c, sb, &err);
		return;
	}
	buf_init(&png);
	/* The file is the sandbox's: read with a limit, checked for PNG's
	 * signature, never parsed further here. */
	r = guestconn_file_read(gc, path, DESKTOP_PNG_MAX, &png, &err);
	{
		err_t e2 = { 0 };
		(void)guestconn_remove(gc, path, false, &e2);
	}
	sandbox_gc_put(sb);
	if (r == -EFBIG)
		http_respond_error(c, 502, "desktop_failed",
				   "the screenshot is larger than %u bytes", DESKTOP_PNG_MAX);
	else if (r < 0)
		http_respond_error(c, 502, "desktop_failed", "cannot read the screenshot: %s",
				   err.msg);
	else if (png.len < sizeof(sig) || memcmp(png.data, sig, sizeof(sig)) != 0)
		http_respond_error(c, 502, "desktop_failed", "the screenshot is not a PNG");
	else
		http_respond(c, 200, "image/png", png.data, png.len, "Cache-Control: no-store\r\n");
	buf_free(&png);
}

/* Mouse and keyboard: the checked body as xdotool's argv, run. */
static void desktop_input(struct node *n, struct sandbox *sb, bool mouse, struct http_req *req,
			  struct http_conn *c)
{
	static const char *const mouse_keys[] = { "action", "x",	 "y",	   "button", "to_x",
						  "to_y",   "direction", "amount", NULL };
	static const char *const kbd_keys[] = { "type", "keys", "delay_ms", NULL };
	const char *words[40];
	char *argv[41];
	char buf[512], msg[256];
	const char *code;
	err_t err = { 0 };
	int status = 0, r;
	json *body;

	body = node_body_object(req, c, mouse ? mouse_keys : kbd_keys);
	if (!body)
		return;
	code = mouse ? desktop_mouse_argv(body, words, 40, buf, sizeof(buf), msg, sizeof(msg))
		     : desktop_keyboard_argv(body, words, 40, buf, sizeof(buf), msg, sizeof(msg));
	if (code) {
		http_respond_error(c, strcmp(code, "internal") ? 400 : 500, code, "%s", msg);
		goto out;
	}
	if (!desktop_ensure(n, sb, c))
		goto out;
	argv[0] = "xdotool";
	for (size_t i = 0; i < 40; i++)
		if (!(argv[i + 1] = (char *)words[i]))
			break;
	r = desktop_run(n, sb, argv, STEP_TIMEOUT_MS, &status, &err);
	if (!run_failed(c, sb, r, status, "xdotool", &err))
		http_respond(c, 204, NULL, NULL, 0, NULL);
out:
	json_free(body);
}

static void desktop_stream(struct node *n, struct sandbox *sb, struct http_conn *c)
{
	char *argv[] = { "/bin/sh", "-c", (char *)stream_script, "airlock-desktop-stream", NULL };
	err_t err = { 0 };
	int status = 0, r;
	char out[160];

	r = desktop_run(n, sb, argv, START_TIMEOUT_MS, &status, &err);
	if (run_failed(c, sb, r, status, "starting x11vnc and websockify", &err))
		return;
	snprintf(out, sizeof(out), "{\"port\":%d,\"vnc_port\":%d,\"path\":\"/vnc.html\"}",
		 DESKTOP_NOVNC_PORT, DESKTOP_VNC_PORT);
	http_respond_json(c, 200, out);
}

void handle_desktop(struct node *n, struct sandbox *sb, const char *rest, struct http_req *req,
		    struct http_conn *c)
{
	bool get = strcmp(req->method, "GET") == 0;

	if (strcmp(rest, "stream") == 0 ? !get : get) {
		http_respond_error(c, 405, "method_not_allowed", "use %s",
				   strcmp(rest, "stream") == 0 ? "GET" : "POST");
		return;
	}
	if (strcmp(rest, "screenshot") == 0) {
		/* No fields; an empty body or {} */
		if (req->body_len) {
			json *body = node_body_object(req, c, (const char *const[]){ NULL });
			if (!body)
				return;
			json_free(body);
		}
		if (desktop_ensure(n, sb, c))
			desktop_screenshot(n, sb, c);
	} else if (strcmp(rest, "mouse") == 0 || strcmp(rest, "keyboard") == 0) {
		desktop_input(n, sb, rest[0] == 'm', req, c);
	} else if (strcmp(rest, "stream") == 0) {
		if (desktop_ensure(n, sb, c))
			desktop_stream(n, sb, c);
	} else {
		http_respond_error(c, 404, "not_found", "no desktop call `%s`", rest);
	}
}
