/* reply.c - how the node answers: errno values to HTTP statuses and error
 * codes, error answers, and the 409 that names a sandbox's state. Shared by
 * every handler, so it sits below them (the router in node.c only points
 * down at it).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "handler.h"

void node_errno_to_http(int code, int *status, const char **ecode)
{
	switch (code) {
	case ENOENT:
	case ESRCH:
		*status = 404, *ecode = "not_found";
		break;
	case EINVAL:
	case EISDIR:
	case ENOTDIR:
	case ENAMETOOLONG:
	case ELOOP:
		*status = 400, *ecode = "bad_request";
		break;
	case EEXIST:
	case ENOTEMPTY:
	case EBUSY:
		*status = 409, *ecode = "conflict";
		break;
	case EFBIG:
	case E2BIG:
		*status = 413, *ecode = "body_too_large";
		break;
	case EACCES:
	case EPERM:
	case EROFS:
		*status = 403, *ecode = "forbidden";
		break;
	case ETIMEDOUT:
		*status = 504, *ecode = "timeout";
		break;
	case EHOSTUNREACH:
		*status = 503, *ecode = "store_unavailable";
		break;
	case EBADMSG:
		*status = 502, *ecode = "bad_artifact";
		break;
	case EAGAIN:
	case ECONNREFUSED:
	case ECONNRESET:
	case ENOTCONN:
	case EPIPE:
	case ESHUTDOWN:
		*status = 503, *ecode = "unavailable";
		break;
	case EKEYREVOKED:   /* the tenant's key service refused its key (byok.c) */
		*status = 403, *ecode = "key_revoked";
		break;
	case ENOKEY:
		*status = 503, *ecode = "key_unavailable";
		break;
	case ENOSPC:   /* the pool (or the sandbox's disk) is full: retry once room is made */
		*status = 507, *ecode = "insufficient_storage";
		break;
	case EDQUOT:   /* a tenant quota or a per-sandbox maximum (quota.c) */
		*status = 422, *ecode = "quota_exceeded";
		break;
	case ENOSYS:
	case EOPNOTSUPP:
		*status = 501, *ecode = "not_supported";
		break;
	default:
		*status = 500, *ecode = "internal";
		break;
	}
}

void node_respond_err(struct http_conn *c, const err_t *e)
{
	int status;
	const char *code;

	node_errno_to_http(e->code, &status, &code);
	http_respond_error(c, status, code, "%s", e->msg[0] ? e->msg : "error");
}

void node_respond_conflict(struct http_conn *c, enum sb_state st, const char *fmt, ...)
{
	_cleanup_free_ char *msg = NULL;
	struct buf b;
	struct jw w;
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&msg, fmt, ap) < 0)
		msg = NULL;
	va_end(ap);
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	http_write_error(&w, "conflict", msg ? msg : "conflict");
	jw_key(&w, "state");
	jw_str(&w, state_name(st));
	jw_end(&w);
	http_respond_json(c, 409, b.data);
	buf_free(&b);
}

void sandbox_respond_err(struct http_conn *c, struct sandbox *sb, const err_t *e)
{
	enum sb_state st;

	if (e->code != EBUSY) {
		node_respond_err(c, e);
		return;
	}
	pthread_mutex_lock(&sb->mu);
	st = sb->state;
	pthread_mutex_unlock(&sb->mu);
	node_respond_conflict(c, st, "%s", e->msg);
}
