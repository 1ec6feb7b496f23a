/* console-log.c - GET /v1/sandboxes/{id}/console: the tail of a sandbox's serial
 * console log, as text/plain.
 *
 * Only the vm backend has a console (nodemgr copies the guest's ttyS0 from
 * QEMU into DATA/run/vm/<id>/console.log, at most console_log_max bytes,
 * the newest: nodemgr/vm/vm-console.c); ns answers 501 not_supported.
 *
 * Why an fd from nodemgr and not a group-readable file: the log lives in
 * the QEMU jail's run dir, owned by the jail's uid (0700) under
 * DATA/run/vm (root, 0700). Making it readable by the node's group would
 * mean opening both directories and every log to that group for the
 * sandbox's whole life, and the file sits in a directory QEMU owns,
 * which we do not trust to keep modes. Instead the node asks nodemgr (verb NM_VM_CONSOLE)
 * for a read-only fd on demand: nodemgr checks that the jail exists and
 * that the name is the jail's own regular file (no link, FIFO or device),
 * and the node gets read access to that one file, for one request. The
 * bytes are guest output and are passed through unparsed.
 */
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../lib/http.h"
#include "../lib/util.h"
#include "node-internal.h"

#define CONSOLE_TAIL (64u << 10)

void handle_console(struct node *n, struct sandbox *sb, struct http_conn *c)
{
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *data = NULL;
	err_t err = { 0 };
	struct stat st;
	ssize_t got = 0;

	if (!sb->be || !sb->be->console) {
		http_respond_error(c, 501, "not_supported",
				   "the %s backend has no console log", sb->backend_name);
		return;
	}
	if (sb->be->console(&n->bctx, sb->id, &fd, &err) < 0) {
		node_respond_err(c, &err);
		return;
	}
	if (fstat(fd, &st) < 0) {
		err_sys(&err, "console log");
		node_respond_err(c, &err);
		return;
	}
	/* The last 64 KiB (nodemgr may be appending, or moving the newest
	 * half of the bound to the start, meanwhile: whatever pread returns
	 * up to our size snapshot is fine). */
	off_t off = st.st_size > (off_t)CONSOLE_TAIL ? st.st_size - CONSOLE_TAIL : 0;
	size_t want = (size_t)(st.st_size - off);
	data = xmalloc(want ? want : 1);
	while ((size_t)got < want) {
		ssize_t r = pread(fd, data + got, want - (size_t)got, off + got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += r;
	}
	http_respond(c, 200, "text/plain; charset=utf-8", data, (size_t)got, NULL);
}
