/* verbs.c - the fixed list of privileged verbs, a table (verbs[] below) of
 * each verb's check, handler and why it is safe. One request per connection.
 *
 * The request is a fixed-size struct from the unprivileged node (peer
 * credentials already checked: root or the configured client uid). Every
 * string field is checked for termination and against its pattern before it
 * becomes part of any path, and every path is built under DATA/pool. Nothing
 * here reads bytes produced inside a sandbox: the guest channel is only
 * dup'ed, never read. The exceptions are the btrfs send streams given back
 * to `btrfs receive`: a suspended sandbox's disk (SUSPEND_IMPORT,
 * snapshot/export.c) and a template from another node (TEMPLATE_IMPORT,
 * templates/template-xfer.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "../doctor/doctor.h"
#include "../lib/log.h"
#include "../lib/util.h"
#include "../pool/pool.h"
#include "core/nodemgr-internal.h"
#include "jail/ns.h"
#include "net/net.h"
#include "snapshot/snapshot.h"
#include "templates/templates.h"
#include "vm/vm.h"
#include "mgr.h"

static void resp_init(struct nm_resp *r, uint32_t type)
{
	memset(r, 0, sizeof(*r));
	r->magic = NM_WIRE_MAGIC;
	r->version = NM_WIRE_VERSION;
	r->type = type;
}

static int send_text(int fd, uint32_t type, const char *text)
{
	struct nm_resp r;

	resp_init(&r, type);
	snprintf(r.text, sizeof(r.text), "%s", text);
	return wire_send(fd, &r, sizeof(r), -1);
}

/* What a RESULT carries besides the common fields: whether a create was
 * served by a warm pool, a sandbox's stats. */
struct result_extra {
	uint32_t from_pool;
	struct nm_sandbox_stats stats;
	char sha256[65];
	uint64_t base_size;
};

static void send_result(int fd, int rc, const err_t *err, pid_t pid, int pass_fd, int64_t size,
			const char *addr, const char *uuid, uint32_t version,
			const struct result_extra *x)
{
	struct nm_resp r;

	resp_init(&r, NM_MSG_RESULT);
	r.size = size;
	if (x) {
		r.from_pool = x->from_pool;
		r.stats = x->stats;
		snprintf(r.sha256, sizeof(r.sha256), "%s", x->sha256);
		r.base_size = x->base_size;
	}
	snprintf(r.addr, sizeof(r.addr), "%s", addr);
	snprintf(r.uuid, sizeof(r.uuid), "%s", uuid);
	r.tmpl_version = version;
	if (rc < 0) {
		r.code = err->code > 0 ? err->code : EIO;
		snprintf(r.text, sizeof(r.text), "%s", err->msg);
		pass_fd = -1;
	}
	r.pid = pid;
	r.has_fd = pass_fd >= 0;
	if (wire_send(fd, &r, sizeof(r), pass_fd) < 0)
		log_debug("reply: client went away");
}

static void send_items(int fd, char **items)
{
	for (size_t i = 0; items[i]; i++) {
		send_text(fd, NM_MSG_ITEM, items[i]);
		free(items[i]);
	}
	free(items);
}

static int progress_to_client(void *arg, const char *line)
{
	return send_text(*(int *)arg, NM_MSG_PROGRESS, line);
}

static void node_info(struct nm_server *s, struct nm_node_info *out)
{
	struct sysinfo si;
	uint64_t total = 0, fr = 0;
	err_t e = { 0 };

	memset(out, 0, sizeof(*out));
	if (sysinfo(&si) == 0)
		out->mem_total_mb = (uint64_t)si.totalram * si.mem_unit >> 20;
	out->cpus = (uint32_t)sysconf(_SC_NPROCESSORS_ONLN);
	if (pool_usage(s->pool, &total, &fr, &e) == 0) {
		out->pool_total_mb = total >> 20;
		out->pool_free_mb = fr >> 20;
	}
	snprintf(out->cgroup_mode, sizeof(out->cgroup_mode), "%s", cgroup_mode(&s->cg));
	vm_node_info(s, out);
}

/* The address the reply of a verb that started (or adopted) sandbox id
 * carries; "" when the sandbox network is off. Safe: it follows from the
 * slot of the jail nodemgr holds for this pattern-checked id. */
static void reply_addr(struct nm_server *s, const char *id, char addr[16])
{
	err_t e = { 0 };

	if (nmnet_addr(s, id, addr, &e) < 0)
		addr[0] = '\0';
}

/* Did a warm pool serve the create of id (its jail is still this verb's)? */
static uint32_t reply_from_pool(struct nm_server *s, const char *id)
{
	struct jail *j;
	uint32_t yes;

	pthread_mutex_lock(&s->lock);
	j = mgr_jail_find_locked(s, id);
	yes = j && j->from_pool;
	pthread_mutex_unlock(&s->lock);
	return yes;
}

/* The warm pools' levels: per key, the parked jails a create (or fork)
 * could take now, as "<kind> <template>/<version>[/<shape>] <n>". Keys
 * are ours (nswarm.c ns_key, vm-pool.c warm_key and standby_key). */
static char **pool_levels(struct nm_server *s)
{
	struct lvl {
		char key[96];
		unsigned n;
		int target;   /* the size the pool aims at (warmsize.h), -1: fixed */
	} *l = NULL;
	size_t n = 0;
	char **out;

	pthread_mutex_lock(&s->lock);
	for (struct jail *j = s->jails; j; j = j->next) {
		size_t i;
		if (!j->hidden || !j->alive || j->busy || !j->warm_key[0])
			continue;
		for (i = 0; i < n && strcmp(l[i].key, j->warm_key); i++)
			;
		if (i == n) {
			l = xrealloc(l, (n + 1) * sizeof(*l));
			snprintf(l[n].key, sizeof(l[n].key), "%s", j->warm_key);
			l[n++].n = 0;
		}
		l[i].n++;
	}
	/* An ns pool that is empty now (a burst took all of it) is still one. */
	for (size_t k = 0; k < NSWARM_KEYS; k++) {
		char key[96];
		size_t i;
		if (!s->ns_keys[k].used)
			continue;
		snprintf(key, sizeof(key), "ns:%s/%u", s->ns_keys[k].name, s->ns_keys[k].version);
		for (i = 0; i < n && strcmp(l[i].key, key); i++)
			;
		if (i == n) {
			l = xrealloc(l, (n + 1) * sizeof(*l));
			snprintf(l[n].key, sizeof(l[n].key), "%s", key);
			l[n++].n = 0;
		}
	}
	for (size_t i = 0; i < n; i++) {
		char name[96];
		unsigned ver;
		l[i].target = -1;
		if (!strncmp(l[i].key, "ns:", 3)) {
			if (sscanf(l[i].key + 3, "%95[^/]/%u", name, &ver) == 2)
				l[i].target = jail_nswarm_target_locked(s, name, ver);
		} else if (strncmp(l[i].key, "fork:", 5)) {
			l[i].target = vm_warm_target_locked(s, l[i].key);
		}
	}
	pthread_mutex_unlock(&s->lock);
	out = xcalloc(n + 1, sizeof(*out));
	for (size_t i = 0; i < n; i++) {
		const char *k = l[i].key, *kind = "vm";
		if (!strncmp(k, "ns:", 3))
			kind = "ns", k += 3;
		else if (!strncmp(k, "fork:", 5))
			kind = "vm_fork", k += 5;
		out[i] = l[i].target >= 0 ? xasprintf("%s %s %u %d", kind, k, l[i].n, l[i].target)
					  : xasprintf("%s %s %u", kind, k, l[i].n);
	}
	free(l);
	return out;
}

/* A live sandbox's use: its cgroup's counters and the file data written
 * into its subvolume since it was made (a tree search whose cost grows with
 * what the sandbox wrote: at most once per STATS_DISK_EVERY_MS a sandbox and
 * one at a time, however often its owner asks; meanwhile the last value). */
#define STATS_DISK_EVERY_MS 2000
/* The scan sandbox_stats started is over: remember what it found (ok). */
static void disk_scan_done(struct nm_server *s, const char *id, bool ok, uint64_t bytes)
{
	struct jail *j;

	pthread_mutex_lock(&s->lock);
	if ((j = mgr_jail_find_locked(s, id))) {
		j->disk_scanning = false;
		if (ok) {
			j->disk_bytes = bytes;
			j->disk_at_ms = now_ms();
		}
	}
	pthread_mutex_unlock(&s->lock);
}

static int sandbox_stats(struct nm_server *s, const char *id, struct nm_sandbox_stats *out,
			 err_t *err)
{
	_cleanup_free_ char *sbx = xasprintf("%s/sandboxes/%s", s->pool, id);
	struct cgroup_stats cs;
	struct jail *j;
	uint64_t since = 0, bytes = 0;
	uint64_t now = now_ms(), cached = 0;
	bool live, fresh = false;
	err_t e2 = { 0 };

	pthread_mutex_lock(&s->lock);
	j = mgr_jail_find_locked(s, id);
	live = j && !j->hidden && j->alive;
	if (live && ((j->disk_at_ms && now - j->disk_at_ms < STATS_DISK_EVERY_MS) ||
		     j->disk_scanning)) {
		fresh = true;
		cached = j->disk_bytes;
	} else if (live) {
		j->disk_scanning = true;
	}
	pthread_mutex_unlock(&s->lock);
	if (!live)
		return err_set(err, ENOENT, "no live sandbox %s", id);
	memset(out, 0, sizeof(*out));
	if (cgroup_stats(&s->cg, id, &cs, err) < 0) {
		if (!fresh)
			disk_scan_done(s, id, false, 0);
		return -err->code;
	}
	out->cpu_ns = cs.cpu_ns;
	out->mem_bytes = cs.mem_bytes;
	out->mem_peak_bytes = cs.mem_peak_bytes;
	out->mem_peak_known = cs.mem_peak_known;
	if (fresh) {
		out->disk_bytes = cached;
		return 0;
	}
	/* what a snapshot would call changed since the subvolume was made;
	 * its cost follows what the sandbox wrote, so it is remembered */
	if (pool_subvol_otransid(sbx, &since, &e2) == 0 &&
	    pool_changed_bytes(sbx, since, &bytes, &e2) == 0) {
		out->disk_bytes = bytes;
		disk_scan_done(s, id, true, bytes);
	} else {
		log_debug("sandbox %s: disk use: %s", id, e2.msg);
		disk_scan_done(s, id, false, 0);
	}
	return 0;
}

/* The sandbox spec of a create, rollback, fork or vm verb: id (when the
 * verb names a sandbox), template name and optional hostname by pattern, so
 * every path built from them stays under the pool. */
static bool valid_spec(const struct nm_sandbox_spec *sp, bool need_id)
{
	return (!need_id || mgr_valid_sandbox_id(sp->id, sizeof(sp->id))) &&
	       mgr_valid_template_name(sp->template_name, sizeof(sp->template_name)) &&
	       (!sp->hostname[0] || mgr_valid_hostname(sp->hostname, sizeof(sp->hostname)));
}

/* One request being served: what it carried and what its RESULT will. */
struct call {
	struct nm_server *s;
	struct nm_req *q;
	int fd;          /* the connection: progress lines and items go here */
	uid_t peer_uid;
	int in_fd;       /* the fd passed with the request; -1 when none */
	err_t err;
	int chan;        /* the fd the reply passes back; -1 when none */
	pid_t pid;
	int64_t size;
	char addr[16], uuid[37];
	uint32_t version;
	struct result_extra extra;
	bool replied;    /* the handler sent its own reply (NODE_INFO) */
};

/* A text of any length as ITEMs, each a whole reply text long. */
static void send_chunks(int fd, const struct buf *b)
{
	char chunk[sizeof(((struct nm_resp *)0)->text)];

	for (size_t off = 0; off < b->len; off += sizeof(chunk) - 1) {
		size_t n = b->len - off < sizeof(chunk) - 1 ? b->len - off : sizeof(chunk) - 1;
		memcpy(chunk, b->data + off, n);
		chunk[n] = '\0';
		send_text(fd, NM_MSG_ITEM, chunk);
	}
}

/* ---- validators: 0, or the EINVAL the reply carries ---- */

static int check_sandbox_id(struct call *c)
{
	if (!mgr_valid_sandbox_id(c->q->u.sandbox.id, sizeof(c->q->u.sandbox.id)))
		return err_set(&c->err, EINVAL, "bad sandbox id");
	return 0;
}

static int check_create(struct call *c)
{
	if (!valid_spec(&c->q->u.create, true))
		return err_set(&c->err, EINVAL, "bad sandbox id, template name or hostname");
	return 0;
}

static int check_snapshot(struct call *c)
{
	const struct nm_req *q = c->q;
	bool create = q->verb == NM_SNAPSHOT_CREATE;

	if (!mgr_valid_sandbox_id(q->u.snap.spec.id, sizeof(q->u.snap.spec.id)) ||
	    !mgr_valid_sandbox_id(q->u.snap.snap, sizeof(q->u.snap.snap)) ||
	    (create && q->u.snap.prev[0] &&
	     !mgr_valid_sandbox_id(q->u.snap.prev, sizeof(q->u.snap.prev))))
		return err_set(&c->err, EINVAL, "bad sandbox or snapshot id");
	/* full 2: a fork's snapshot, the whole spec sent (checked as for a
	 * create) so the memory may be saved in the fork form */
	if (create && q->u.snap.full == 2 && !valid_spec(&q->u.snap.spec, true))
		return err_set(&c->err, EINVAL, "bad sandbox spec");
	if (create && q->u.snap.full > 3)
		return err_set(&c->err, EINVAL, "bad snapshot kind %u", q->u.snap.full);
	return 0;
}

static int check_rollback(struct call *c)
{
	const struct nm_req *q = c->q;

	if (!valid_spec(&q->u.snap.spec, true) ||
	    !mgr_valid_sandbox_id(q->u.snap.snap, sizeof(q->u.snap.snap)))
		return err_set(&c->err, EINVAL, "bad sandbox id, snapshot id or hostname");
	return 0;
}

static int check_fork(struct call *c)
{
	const struct nm_req *q = c->q;

	if (!valid_spec(&q->u.snap.spec, true) ||
	    !mgr_valid_sandbox_id(q->u.snap.snap, sizeof(q->u.snap.snap)) ||
	    !mgr_valid_sandbox_id(q->u.snap.prev, sizeof(q->u.snap.prev)))
		return err_set(&c->err, EINVAL, "bad sandbox id, snapshot id or hostname");
	return 0;
}

static int check_suspend(struct call *c)
{
	const struct nm_req *q = c->q;

	if (!valid_spec(&q->u.xfer.spec, true) ||
	    !mgr_valid_sandbox_id(q->u.xfer.snap, sizeof(q->u.xfer.snap)) ||
	    !memchr(q->u.xfer.base, '\0', sizeof(q->u.xfer.base)) ||
	    (q->u.xfer.base[0] && !vm_base_sha_ok(q->u.xfer.base)))
		return err_set(&c->err, EINVAL,
			       "bad sandbox id, template name, snapshot id or base");
	return 0;
}

static int check_vm_base(struct call *c)
{
	const struct nm_req *q = c->q;

	if (!memchr(q->u.vmbase.sha, '\0', sizeof(q->u.vmbase.sha)) ||
	    (q->u.vmbase.sha[0] && !vm_base_sha_ok(q->u.vmbase.sha)) ||
	    !valid_spec(&q->u.vmbase.spec, true))
		return err_set(&c->err, EINVAL, "bad template name or memory base digest");
	return 0;
}

static int check_template_export(struct call *c)
{
	const struct nm_req *q = c->q;

	if (!mgr_valid_template_name(q->u.txfer.name, sizeof(q->u.txfer.name)) ||
	    q->u.txfer.version < 1)
		return err_set(&c->err, EINVAL, "bad template name or version");
	return 0;
}

static int check_template_find(struct call *c)
{
	const struct nm_req *q = c->q;

	if (!mgr_valid_template_name(q->u.txfer.name, sizeof(q->u.txfer.name)) ||
	    !mgr_valid_uuid(q->u.txfer.uuid, sizeof(q->u.txfer.uuid)))
		return err_set(&c->err, EINVAL, "bad template name or uuid");
	return 0;
}

static int check_template_import(struct call *c)
{
	const struct nm_req *q = c->q;

	if (!mgr_valid_template_name(q->u.txfer.name, sizeof(q->u.txfer.name)) ||
	    !mgr_valid_uuid(q->u.txfer.uuid, sizeof(q->u.txfer.uuid)) || q->u.txfer.version < 1)
		return err_set(&c->err, EINVAL, "bad template name, uuid or version");
	return 0;
}

static int check_template_name(struct call *c)
{
	if (!mgr_valid_template_name(c->q->u.tmpl.name, sizeof(c->q->u.tmpl.name)))
		return err_set(&c->err, EINVAL, "bad template name");
	return 0;
}

static int check_vm(struct call *c)
{
	const struct nm_req *q = c->q;

	if (!valid_spec(&q->u.vm.spec, q->verb == NM_VM_CREATE && q->u.vm.mode != NM_VM_TEMPLATE))
		return err_set(&c->err, EINVAL, "bad sandbox id, template name or hostname");
	return 0;
}

/* ---- handlers ---- */

static int do_create(struct call *c)
{
	const struct nm_sandbox_spec *sp = &c->q->u.create;
	int r = mgr_sandbox_create(c->s, sp, &c->chan, &c->pid, &c->err);

	if (r == 0) {
		reply_addr(c->s, sp->id, c->addr);
		c->extra.from_pool = reply_from_pool(c->s, sp->id);
	}
	return r;
}

static int do_adopt(struct call *c)
{
	int r = mgr_sandbox_adopt(c->s, c->q->u.sandbox.id, &c->chan, &c->pid, &c->err);

	if (r == 0)
		reply_addr(c->s, c->q->u.sandbox.id, c->addr);
	return r;
}

static int do_destroy(struct call *c)
{
	return mgr_sandbox_destroy(c->s, c->q->u.sandbox.id, &c->err);
}

static int do_freeze(struct call *c)
{
	return mgr_sandbox_freeze(c->s, c->q->u.sandbox.id, c->q->verb == NM_SANDBOX_FREEZE,
				  &c->err);
}

static int do_snapshot_create(struct call *c)
{
	const struct nm_req *q = c->q;
	enum snap_kind kind = q->u.snap.full == 0   ? SNAP_DISK
			      : q->u.snap.full == 3 ? SNAP_MEMORY
						    : SNAP_FULL;

	return snap_create(c->s, q->u.snap.spec.id, q->u.snap.snap, q->u.snap.prev, kind,
			   q->u.snap.full == 2 ? &q->u.snap.spec : NULL, &c->size, &c->err);
}

static int do_snapshot_delete(struct call *c)
{
	return snap_delete(c->s, c->q->u.snap.spec.id, c->q->u.snap.snap, &c->err);
}

static int do_rollback(struct call *c)
{
	return mgr_sandbox_rollback(c->s, &c->q->u.snap.spec, c->q->u.snap.snap, &c->chan,
				    &c->pid, &c->err);
}

static int do_fork(struct call *c)
{
	const struct nm_req *q = c->q;
	int r = mgr_sandbox_fork(c->s, &q->u.snap.spec, q->u.snap.prev, q->u.snap.snap,
				 q->u.snap.vm != 0, &c->chan, &c->pid, &c->err);

	if (r == 0)
		reply_addr(c->s, q->u.snap.spec.id, c->addr);
	return r;
}

static int do_suspend_export(struct call *c)
{
	const struct nm_req *q = c->q;

	return snap_suspend_export(c->s, &q->u.xfer.spec, q->u.xfer.snap, q->u.xfer.artifact,
				   c->in_fd, &c->size, q->u.xfer.base, c->extra.sha256, &c->err);
}

static int do_suspend_import(struct call *c)
{
	const struct nm_req *q = c->q;

	return snap_suspend_import(c->s, &q->u.xfer.spec, q->u.xfer.snap, q->u.xfer.artifact,
				   c->in_fd, q->u.xfer.base, &c->err);
}

static int do_vm_base_find(struct call *c)
{
	return vm_base_find(c->s, &c->q->u.vmbase.spec, c->q->u.vmbase.sha, c->extra.sha256,
			    &c->extra.base_size, &c->err);
}

static int do_vm_base_export(struct call *c)
{
	int r = mgr_artifact_fd_check(c->in_fd, true, &c->err);

	if (r == 0)
		r = vm_base_export(c->s, &c->q->u.vmbase.spec, c->in_fd, c->extra.sha256,
				   &c->extra.base_size, &c->size, &c->err);
	return r;
}

static int do_vm_base_import(struct call *c)
{
	int r;

	if (!c->q->u.vmbase.sha[0])
		return err_set(&c->err, EINVAL, "no memory base digest");
	/* a file, or the download itself */
	if ((r = mgr_artifact_stream_check(c->in_fd, false, NULL, &c->err)) == 0)
		r = vm_base_import(c->s, &c->q->u.vmbase.spec, c->q->u.vmbase.sha, c->in_fd,
				   &c->err);
	return r;
}

static int do_template_export(struct call *c)
{
	return tmpl_export(c->s, c->q->u.txfer.name, c->q->u.txfer.version, c->in_fd, c->uuid,
			   &c->size, &c->err);
}

static int do_template_find(struct call *c)
{
	return tmpl_find(c->s, c->q->u.txfer.name, c->q->u.txfer.uuid, &c->version, &c->err);
}

static int do_template_import(struct call *c)
{
	const struct nm_req *q = c->q;

	return tmpl_import(c->s, q->u.txfer.name, q->u.txfer.uuid, q->u.txfer.version, c->in_fd,
			   &c->version, &c->err);
}

static int do_sandbox_list(struct call *c)
{
	send_items(c->fd, mgr_sandbox_list(c->s));
	return 0;
}

static int do_template_build(struct call *c)
{
	return tmpl_build(c->s, &c->q->u.build, c->peer_uid, c->fd, progress_to_client, &c->fd,
			  &c->err);
}

static int do_template_delete(struct call *c)
{
	return tmpl_delete(c->s, c->q->u.tmpl.name, c->q->u.tmpl.version, &c->err);
}

static int do_template_list(struct call *c)
{
	send_items(c->fd, tmpl_list(c->s));
	return 0;
}

static int do_doctor(struct call *c)
{
	struct nm_server *s = c->s;
	struct nm_node_info info;
	struct buf b;

	c->q->u.doctor.backend[sizeof(c->q->u.doctor.backend) - 1] = '\0';
	node_info(s, &info);
	struct doctor_opts o = {
		.data_dir = s->cfg->data_dir,
		.vm_dir = s->cfg->vm_dir ? s->cfg->vm_dir : "",
		.vm_accel = s->cfg->vm_accel,
		.default_backend = c->q->u.doctor.backend,
		.accel_decided = info.vm_accel[0] ? info.vm_accel : NULL,
		.accel_reason = info.vm_reason,
		.ports_domain = s->cfg->ports_domain,
		.api_url = s->cfg->api_url,
	};
	buf_init(&b);
	doctor_run(&o, &b);
	send_chunks(c->fd, &b);
	buf_free(&b);
	return 0;
}

static int do_template_config(struct call *c)
{
	struct buf b;
	int r;

	buf_init(&b);
	r = tmpl_config(c->s, c->q->u.tmpl.name, c->q->u.tmpl.version, &b, &c->err);
	if (r == 0)
		send_chunks(c->fd, &b);
	buf_free(&b);
	return r;
}

/* The one verb whose RESULT carries the host facts and nothing else. */
static int do_node_info(struct call *c)
{
	struct nm_resp res;

	resp_init(&res, NM_MSG_RESULT);
	node_info(c->s, &res.info);
	wire_send(c->fd, &res, sizeof(res), -1);
	c->replied = true;
	return 0;
}

static int do_vm_create(struct call *c)
{
	const struct nm_req *q = c->q;
	int r = vm_create(c->s, &q->u.vm.spec, q->u.vm.mode, &c->chan, &c->pid, &c->err);

	if (r == 0 && q->u.vm.mode != NM_VM_TEMPLATE) {
		reply_addr(c->s, q->u.vm.spec.id, c->addr);
		c->extra.from_pool = reply_from_pool(c->s, q->u.vm.spec.id);
	}
	return r;
}

static int do_vm_template_save(struct call *c)
{
	return vm_template_save(c->s, &c->q->u.vm.spec, c->q->u.vm.mode == 1, &c->err);
}

static int do_pool_levels(struct call *c)
{
	send_items(c->fd, pool_levels(c->s));
	return 0;
}

static int do_sandbox_stats(struct call *c)
{
	return sandbox_stats(c->s, c->q->u.sandbox.id, &c->extra.stats, &c->err);
}

static int check_limits(struct call *c)
{
	if (c->q->u.sandbox.id[0] == '\0')
		return 0;   /* every sandbox */
	return check_sandbox_id(c);
}

static int do_sandbox_limits(struct call *c)
{
	char **items;
	int r = mgr_sandbox_limits(c->s, c->q->u.sandbox.id, &items, &c->err);

	if (r == 0)
		send_items(c->fd, items);
	return r;
}

static int do_vm_console(struct call *c)
{
	return vm_console_open(c->s, c->q->u.sandbox.id, &c->chan, &c->err);
}

/* ---- the verbs ---- */

/* Every privileged verb: what checks its request (NULL: nothing in it
 * becomes a path or an argument), what serves it, and why that is safe
 * for a request from the unprivileged node. */
struct verb {
	uint32_t verb;
	int (*check)(struct call *c);
	int (*handle)(struct call *c);
	const char *safe;
};

/* The notes two verbs share. */
#define SAFE_FREEZE                                                                          \
	"acts only on a live jail nodemgr itself started for this pattern-checked id: its "   \
	"airlock/<id> freezer (ns), or its QEMU's QMP socket, whose replies go through the "  \
	"fuzzed src/qmp parser (vm). Nothing is killed and no path comes from the request."
#define SAFE_SNAPSHOT                                                                        \
	"sandbox and snapshot ids are pattern-checked (no '/', no leading '.'); the snapshot " \
	"is made from, or deleted at, snapshots/<id>/<snap> under the pool only. Reading the " \
	"snapshot's btrfs tree (tree search) parses metadata the kernel wrote, not bytes "     \
	"from inside the sandbox."
#define SAFE_SUSPEND                                                                         \
	"the spec is checked as for create and the snapshot id by pattern, so the only paths " \
	"are templates/<t>/<v>, snapshots/<id>/<snap> and sandboxes/<id> under the pool; the " \
	"node's file comes as an fd (a regular file, checked), never as a path. Import parses " \
	"a btrfs send stream from the object store with `btrfs receive --chroot` (see "         \
	"snapshot/export.c for why those bytes are the ones this node made)."
#define SAFE_VM_BASE                                                                         \
	"the spec is checked as for create and the digest is 64 hex digits, so the only paths " \
	"are the template's RAM file of a shape and pool/membase/<sha256>; the node's file "   \
	"comes as an fd (checked; an import's may be a pipe). Import decompresses bytes from " \
	"the object store into a temporary file of membase (bounded by the RAM of the spec's " \
	"shape), and keeps it only if their SHA-256 is the one asked for: what a restore "     \
	"reflinks from is exactly the base its suspend diffed against (vm-base.c)."
#define SAFE_VM                                                                              \
	"the same checks as sandbox create (id, template name and hostname pattern-checked, " \
	"paths only under the pool and DATA/run/vm). QEMU runs as the slot's own uid in an "   \
	"empty mount namespace (vm-qemu.c); its QMP replies are parsed by the size-limited, "  \
	"fuzzed src/qmp parser, and the guest channel is only passed on, never read."

static const struct verb verbs[] = {
	{ NM_SANDBOX_CREATE, check_create, do_create,
	  "id, template name and hostname are pattern-checked; the template must be a "
	  "finished subvolume under templates/; the new subvolume goes to sandboxes/<id>, "
	  "which must not exist. The jail gets a fresh uid range no other jail has." },
	{ NM_SANDBOX_ADOPT, check_sandbox_id, do_adopt,
	  "only dups a channel nodemgr already holds for that id." },
	{ NM_SANDBOX_DESTROY, check_sandbox_id, do_destroy,
	  "acts only on airlock/<id> cgroups and sandboxes/<id> with a pattern-checked id; "
	  "kills through a pidfd or a frozen cgroup, so no pid can be reused under us." },
	{ NM_SANDBOX_FREEZE, check_sandbox_id, do_freeze, SAFE_FREEZE },
	{ NM_SANDBOX_THAW, check_sandbox_id, do_freeze, SAFE_FREEZE },
	{ NM_SNAPSHOT_CREATE, check_snapshot, do_snapshot_create, SAFE_SNAPSHOT },
	{ NM_SNAPSHOT_DELETE, check_snapshot, do_snapshot_delete, SAFE_SNAPSHOT },
	{ NM_SANDBOX_ROLLBACK, check_rollback, do_rollback,
	  "the same checks as create for the spec, plus the snapshot id; acts only on a live "
	  "jail (ns or vm) nodemgr started for this id, reusing its uid range. The old "
	  "subvolume is replaced by rename within sandboxes/, and the new jail is spawned "
	  "exactly as a create would spawn it." },
	{ NM_SANDBOX_FORK, check_fork, do_fork,
	  "the child's spec is checked as for create; parent and snapshot ids are "
	  "pattern-checked, so the source is snapshots/<parent>/<snap> under the pool only, "
	  "and the child gets a new subvolume, slot and jail exactly as a create." },
	{ NM_SUSPEND_EXPORT, check_suspend, do_suspend_export, SAFE_SUSPEND },
	{ NM_SUSPEND_IMPORT, check_suspend, do_suspend_import, SAFE_SUSPEND },
	{ NM_VM_BASE_FIND, check_vm_base, do_vm_base_find, SAFE_VM_BASE },
	{ NM_VM_BASE_EXPORT, check_vm_base, do_vm_base_export, SAFE_VM_BASE },
	{ NM_VM_BASE_IMPORT, check_vm_base, do_vm_base_import, SAFE_VM_BASE },
	{ NM_TEMPLATE_EXPORT, check_template_export, do_template_export,
	  "the name is pattern-checked, so the only path is templates/<name>/<version> under "
	  "the pool, and only a finished (read-only) subvolume there is sent. The node's file "
	  "comes as an fd (a regular file open for writing, checked), never as a path; `btrfs "
	  "send` only reads the template. Giving the template a received uuid (if it has "
	  "none) changes no byte of it, only what its streams name it by." },
	{ NM_TEMPLATE_FIND, check_template_find, do_template_find,
	  "read-only; name and uuid are pattern-checked, and only numbered entries of "
	  "templates/<name>/ are looked at (their subvolume info, by ioctl)." },
	{ NM_TEMPLATE_IMPORT, check_template_import, do_template_import,
	  "name and uuid are pattern-checked, so everything is made under templates/<name>/; "
	  "the stream comes as an fd (a regular file open for reading, checked). It is "
	  "untrusted bytes (from the object store, checked by the node against its manifest): "
	  "`btrfs receive --chroot -m DIR` applies it inside a fresh DIR = "
	  "templates/<name>/.recv-XXXXXX only (no other subvolume can be written, snapshotted "
	  "or cloned from: pool_receive_new), stopping at its first error; what it made is "
	  "published (renamed to a new, unused version number) only if it is exactly one "
	  "read-only subvolume made from scratch with the identity the node expects, and "
	  "removed otherwise. Names starting with '.' are never listed or used meanwhile." },
	{ NM_SANDBOX_LIST, NULL, do_sandbox_list,
	  "read-only listing of names we validate before sending." },
	{ NM_TEMPLATE_BUILD, NULL, do_template_build,
	  "name/kind/suite/packages are pattern-checked (template.c, check_spec) and passed "
	  "as separate argv entries (no shell string); the output is a new subvolume under "
	  "templates/. Host sources for dir/tar are read with the requester's uid unless the "
	  "requester is root." },
	{ NM_TEMPLATE_DELETE, check_template_name, do_template_delete,
	  "deletes only templates/<valid name>/<number>." },
	{ NM_TEMPLATE_LIST, NULL, do_template_list, "read-only." },
	{ NM_DOCTOR, NULL, do_doctor,
	  "read-only checks (src/doctor): files under /sys, /proc and /dev, statfs, and two "
	  "fixed argvs (`qemu-system-x86_64 --version`, `nft list tables`). The one input, a "
	  "backend name, only picks which backend's result \"ok\" reports." },
	{ NM_TEMPLATE_CONFIG, check_template_name, do_template_config,
	  "read-only; the name is pattern-checked, so the only file is "
	  "templates/<name>/<number>/image.json, opened without following a link, sent as it "
	  "is (not parsed here)." },
	{ NM_NODE_INFO, NULL, do_node_info, "read-only host facts." },
	{ NM_VM_CREATE, check_vm, do_vm_create, SAFE_VM },
	{ NM_VM_TEMPLATE_SAVE, check_vm, do_vm_template_save, SAFE_VM },
	{ NM_POOL_LEVELS, NULL, do_pool_levels,
	  "read-only; counts of nodemgr's own hidden jails, by keys it made from "
	  "pattern-checked template names." },
	{ NM_SANDBOX_STATS, check_sandbox_id, do_sandbox_stats,
	  "read-only; kernel-written cgroup files of airlock/<id> and a tree search of "
	  "sandboxes/<id> (metadata the kernel wrote), for a live jail nodemgr holds under "
	  "this pattern-checked id." },
	{ NM_SANDBOX_LIMITS, check_limits, do_sandbox_limits,
	  "read-only; kernel-written counter files of airlock/<id> (memory.events or "
	  "memory.oom_control, pids.events) of the jails nodemgr holds, and how their inits "
	  "were reaped; the one input, an id, is empty or pattern-checked." },
	{ NM_VM_CONSOLE, check_sandbox_id, do_vm_console,
	  "a read-only fd on DATA/run/vm/<id>/console.log of a vm jail nodemgr holds for this "
	  "pattern-checked id. The file is QEMU's (its uid owns the run dir), so it is opened "
	  "without following links and must be a regular file of that uid with one link "
	  "(vm_console_open); its bytes are passed on, never read." },
};

static const struct verb *verb_of(uint32_t v)
{
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
		if (verbs[i].verb == v)
			return &verbs[i];
	return NULL;
}

void mgr_serve_conn(struct nm_server *s, int fd, uid_t peer_uid)
{
	struct nm_req q;
	struct call c = { .s = s, .q = &q, .fd = fd, .peer_uid = peer_uid, .in_fd = -1,
			  .chan = -1, .size = -1 };
	const struct verb *v;
	int r;

	if ((r = wire_recv(fd, &q, sizeof(q), &c.in_fd)) < 0 || q.magic != NM_WIRE_MAGIC ||
	    q.version != NM_WIRE_VERSION) {
		if (c.in_fd >= 0)
			close(c.in_fd);
		if (r != -EPIPE) {
			err_set(&c.err, EPROTO, "bad request");
			send_result(fd, -EPROTO, &c.err, 0, -1, -1, "", "", 0, NULL);
		}
		close(fd);
		return;
	}
	/* The node's request id for this verb's log lines (pattern-checked
	 * by log_set_request_id; else none). */
	q.request_id[sizeof(q.request_id) - 1] = '\0';
	log_set_request_id(q.request_id);
	if (!(v = verb_of(q.verb)))
		r = err_set(&c.err, EOPNOTSUPP, "unknown verb %u", q.verb);
	else if (!v->check || (r = v->check(&c)) == 0)
		r = v->handle(&c);
	if (!c.replied)
		send_result(fd, r, &c.err, c.pid, c.chan, c.size, c.addr, c.uuid, c.version,
			    &c.extra);
	if (c.chan >= 0)
		close(c.chan);
	if (c.in_fd >= 0)
		close(c.in_fd);
	close(fd);
}
