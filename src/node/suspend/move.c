/* move.c - a suspended sandbox taken over from another node of the
 * cluster (README "Cluster", docs/DESIGN.md "Moving a suspended sandbox"):
 * the row's node is swapped with a compare-and-set, so of two nodes asked
 * at once one takes it; it is then loaded here, suspended, and the request
 * that brought it (a restore, or one that restores it) goes on.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/log.h"
#include "suspend.h"

struct sandbox *suspend_claim(struct node *n, const char *id, const char *tenant, err_t *err)
{
	_cleanup_free_ char *old = NULL;
	struct db_rows rows;
	struct sandbox *sb;
	char why[200];
	int r;

	if (!n->os) {
		err_set(err, EOPNOTSUPP, "no object store on this node");
		return NULL;
	}
	if ((sb = sandbox_find(n, id, tenant)))
		return sb;   /* taken over meanwhile by another request here */
	if ((tenant ? db_query(n->db, &rows, err,
			       "SELECT " SANDBOX_COLS " FROM sandboxes WHERE id=? AND"
			       " observed='suspended' AND tenant_id=?", "ss", id, tenant)
		    : db_query(n->db, &rows, err,
			       "SELECT " SANDBOX_COLS " FROM sandboxes WHERE id=? AND"
			       " observed='suspended'", "s", id)) < 0)
		return NULL;
	if (rows.n_rows != 1 || !db_cell(&rows, 0, 12)) {
		db_rows_free(&rows);
		err_set(err, ENOENT, "no suspended sandbox `%s`", id);
		return NULL;
	}
	old = xstrdup(db_cell(&rows, 0, 12));
	sb = sandbox_from_row(n, &rows, 0);
	db_rows_free(&rows);
	if (!sb) {
		err_set(err, ENOENT, "no suspended sandbox `%s`", id);
		return NULL;
	}
	/* Any backend moves (a vm's memory base travels by content:
	 * tmplstore.c); this node must be able to run it, or it would take
	 * over a sandbox it cannot restore. */
	if (!sb->be || !sb->be->fork || !sandbox_suspend_kind(sb)) {
		err_set(err, EOPNOTSUPP, "sandbox %s is a %s sandbox and node %s cannot restore "
			"one; it stays on node %s", id, sb->backend_name, node_me(n), old);
		sandbox_unref(sb);
		return NULL;
	}
	/* Compare-and-set: of two nodes asked at once, one takes it. Only
	 * while this process's epoch stands (model/state.h): a node marked
	 * lost or superseded takes over nothing. */
	struct state_fence f = state_fence();
	r = db_exec(n->db, err,
		    "UPDATE sandboxes SET node=? WHERE id=? AND observed='suspended' AND node=?"
		    " AND " STATE_FENCE_SELF_SQL,
		    "sss" STATE_FENCE_SELF_TYPES, node_me(n), id, old, STATE_FENCE_SELF_ARGS(f));
	if (r <= 0) {
		sandbox_unref(sb);
		if (r == 0)
			err_set(err, EBUSY, "sandbox %s was taken over by another node", id);
		return NULL;
	}
	free(sb->home);
	sb->home = NULL;
	suspend_load(n, sb);
	{
		/* Two requests here at once both swapped (the second from this
		 * node to itself): the first one's sandbox stays. */
		struct sandbox *other = sandbox_map_insert_unique(n, sb);
		if (other) {
			sandbox_unref(sb);
			return other;
		}
	}
	sandbox_ref(sb);            /* the caller's; the map keeps the first */
	if (strcmp(old, node_me(n)) != 0) {
		snprintf(why, sizeof(why), "moved from node %s to node %s", old, node_me(n));
		if (state_event(n->db, id, SB_SUSPENDED, why, err) < 0)
			log_warn("sandbox %s: %s", id, err->msg);
		log_info("sandbox %s: %s (suspended)", id, why);
	}
	return sb;
}
