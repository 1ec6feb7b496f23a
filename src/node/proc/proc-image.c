/* proc-image.c - the process table across a full snapshot: the running
 * processes as JSON (pid, argv, pty, start, stream offsets), taken with a
 * full snapshot (snapshots.c) or a memory fork (fork.c) and kept with it;
 * and back into the table after a rollback, recovery or fork from it, as
 * running records whose output goes on from those offsets. The image is
 * the node's own text, read back defensively all the same.
 */
#include <string.h>

#include "../../lib/log.h"
#include "proc.h"

char *procs_image(struct sandbox *sb)
{
	struct buf b;
	struct jw w;

	buf_init(&b);
	jw_init(&w, &b);
	jw_arr(&w);
	pthread_mutex_lock(&sb->mu);
	for (struct proc *p = sb->procs; p; p = p->next) {
		if (!p->running || !p->claimed)
			continue;
		jw_obj(&w);
		jw_key(&w, "pid");
		jw_uint(&w, p->pid);
		jw_key(&w, "argv");
		jw_arr(&w);
		for (char **a = p->argv; a && *a; a++)
			jw_str(&w, *a);
		jw_end(&w);
		jw_key(&w, "pty");
		jw_bool(&w, p->pty);
		jw_key(&w, "started_at");
		jw_int(&w, p->started_at);
		jw_key(&w, "stdout");
		jw_uint(&w, p->out[0].end);
		jw_key(&w, "stderr");
		jw_uint(&w, p->out[1].end);
		jw_end(&w);
	}
	pthread_mutex_unlock(&sb->mu);
	jw_end(&w);
	return buf_steal(&b);
}

void procs_restore_locked(struct sandbox *sb, const char *image)
{
	err_t err = { 0 };
	json *j = image ? json_parse(image, strlen(image), &err) : NULL;
	size_t n = 0;

	if (!j || j->type != JSON_ARR) {
		if (image)
			log_warn("sandbox %s: unreadable process table of a snapshot: %s", sb->id,
				 err.msg);
		json_free(j);
		return;
	}
	for (size_t i = 0; i < j->n && n < NODE_PROC_KEEP; i++) {
		const json *e = j->items[i], *argv = json_get(e, "argv");
		bool bad = false;
		int64_t pid = json_get_int(e, "pid", 0, &bad);
		int64_t out = json_get_int(e, "stdout", 0, &bad);
		int64_t errb = json_get_int(e, "stderr", 0, &bad);
		struct proc *p;

		if (bad || pid <= 0 || pid > UINT32_MAX || out < 0 || errb < 0 || !argv ||
		    argv->type != JSON_ARR || !argv->n)
			continue;
		p = proc_new_locked(sb, (uint32_t)pid);
		p->claimed = true;
		p->argv = xcalloc(argv->n + 1, sizeof(char *));
		for (size_t k = 0; k < argv->n; k++)
			p->argv[k] = xstrdup(argv->items[k]->type == JSON_STR ? argv->items[k]->str
									 : "");
		p->pty = json_get_bool(e, "pty", false, &bad);
		p->started_at = json_get_int(e, "started_at", p->started_at, &bad);
		/* Empty rings that start where the snapshot's streams stood: the
		 * restored guest goes on from those offsets. */
		ring_write_at(&p->out[0], (uint64_t)out, "", 0);
		ring_write_at(&p->out[1], (uint64_t)errb, "", 0);
		n++;
	}
	json_free(j);
}
