/* verbs.c - the fixed list of privileged verbs. One request per connection.
 *
 * The request is a fixed-size struct from the unprivileged node (peer
 * credentials already checked: root or the configured client uid). Every
 * string field is checked for termination and against its pattern before it
 * becomes part of any path, and every path is built under DATA/pool. Nothing
 * here reads bytes produced inside a sandbox: the guest channel is only
 * dup'ed, never read. The exceptions are the btrfs send streams given back
 * to `btrfs receive`: a suspended sandbox's disk (SUSPEND_IMPORT,
 * suspend.c) and a template from another node (TEMPLATE_IMPORT,
 * template-xfer.c).
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

	if (net_addr(s, id, addr, &e) < 0)
		addr[0] = '\0';
}

/* Did a warm pool serve the create of id (its jail is still this verb's)? */
static uint32_t reply_from_pool(struct nm_server *s, const char *id)
{
	struct jail *j;
	uint32_t yes;

	pthread_mutex_lock(&s->lock);
	j = jail_find_locked(s, id);
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
				l[i].target = nswarm_target_locked(s, name, ver);
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
	if ((j = jail_find_locked(s, id))) {
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
	j = jail_find_locked(s, id);
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
	return (!need_id || valid_sandbox_id(sp->id, sizeof(sp->id))) &&
	       valid_template_name(sp->template_name, sizeof(sp->template_name)) &&
	       (!sp->hostname[0] || valid_hostname(sp->hostname, sizeof(sp->hostname)));
}

void nm_serve_conn(struct nm_server *s, int fd, uid_t peer_uid)
{
	struct nm_req q;
	err_t err = { 0 };
	int r, chan = -1, in_fd = -1;
	int64_t size = -1;
	pid_t pid = 0;
	char addr[16] = "", uuid[37] = "";
	uint32_t version = 0;
	struct result_extra extra = { 0 };

	if ((r = wire_recv(fd, &q, sizeof(q), &in_fd)) < 0 || q.magic != NM_WIRE_MAGIC ||
	    q.version != NM_WIRE_VERSION) {
		if (in_fd >= 0)
			close(in_fd);
		if (r != -EPIPE) {
			err_set(&err, EPROTO, "bad request");
			send_result(fd, -EPROTO, &err, 0, -1, -1, "", "", 0, NULL);
		}
		close(fd);
		return;
	}
	/* The node's request id for this verb's log lines (pattern-checked
	 * by log_set_request_id; else none). */
	q.request_id[sizeof(q.request_id) - 1] = '\0';
	log_set_request_id(q.request_id);
	switch (q.verb) {
	case NM_SANDBOX_CREATE:
		/* Safe: id, template name and hostname are pattern-checked; the
		 * template must be a finished subvolume under templates/; the new
		 * subvolume goes to sandboxes/<id>, which must not exist. The
		 * jail gets a fresh uid range no other jail has. */
		if (!valid_spec(&q.u.create, true)) {
			r = err_set(&err, EINVAL, "bad sandbox id, template name or hostname");
			break;
		}
		r = mgr_sandbox_create(s, &q.u.create, &chan, &pid, &err);
		if (r == 0) {
			reply_addr(s, q.u.create.id, addr);
			extra.from_pool = reply_from_pool(s, q.u.create.id);
		}
		break;
	case NM_SANDBOX_ADOPT:
		/* Safe: only dups a channel nodemgr already holds for that id. */
		if (!valid_sandbox_id(q.u.sandbox.id, sizeof(q.u.sandbox.id))) {
			r = err_set(&err, EINVAL, "bad sandbox id");
			break;
		}
		r = mgr_sandbox_adopt(s, q.u.sandbox.id, &chan, &pid, &err);
		if (r == 0)
			reply_addr(s, q.u.sandbox.id, addr);
		break;
	case NM_SANDBOX_DESTROY:
		/* Safe: acts only on airlock/<id> cgroups and sandboxes/<id>
		 * with a pattern-checked id; kills through a pidfd or a frozen
		 * cgroup, so no pid can be reused under us. */
		if (!valid_sandbox_id(q.u.sandbox.id, sizeof(q.u.sandbox.id))) {
			r = err_set(&err, EINVAL, "bad sandbox id");
			break;
		}
		r = mgr_sandbox_destroy(s, q.u.sandbox.id, &err);
		break;
	case NM_SANDBOX_FREEZE:
	case NM_SANDBOX_THAW:
		/* Safe: acts only on a live jail nodemgr itself started for this
		 * pattern-checked id: its airlock/<id> freezer (ns), or its QEMU's
		 * QMP socket, whose replies go through the fuzzed src/qmp parser
		 * (vm). Nothing is killed and no path comes from the request. */
		if (!valid_sandbox_id(q.u.sandbox.id, sizeof(q.u.sandbox.id))) {
			r = err_set(&err, EINVAL, "bad sandbox id");
			break;
		}
		r = mgr_sandbox_freeze(s, q.u.sandbox.id, q.verb == NM_SANDBOX_FREEZE, &err);
		break;
	case NM_SNAPSHOT_CREATE:
	case NM_SNAPSHOT_DELETE:
		/* Safe: sandbox and snapshot ids are pattern-checked (no '/', no
		 * leading '.'); the snapshot is made from, or deleted at,
		 * snapshots/<id>/<snap> under the pool only. Reading the
		 * snapshot's btrfs tree (tree search) parses metadata the kernel
		 * wrote, not bytes from inside the sandbox. */
		if (!valid_sandbox_id(q.u.snap.spec.id, sizeof(q.u.snap.spec.id)) ||
		    !valid_sandbox_id(q.u.snap.snap, sizeof(q.u.snap.snap)) ||
		    (q.verb == NM_SNAPSHOT_CREATE && q.u.snap.prev[0] &&
		     !valid_sandbox_id(q.u.snap.prev, sizeof(q.u.snap.prev)))) {
			r = err_set(&err, EINVAL, "bad sandbox or snapshot id");
			break;
		}
		/* full 2: a fork's snapshot, the whole spec sent (checked as
		 * for a create) so the memory may be saved in the fork form */
		if (q.verb == NM_SNAPSHOT_CREATE && q.u.snap.full == 2 &&
		    !valid_spec(&q.u.snap.spec, true)) {
			r = err_set(&err, EINVAL, "bad sandbox spec");
			break;
		}
		if (q.verb == NM_SNAPSHOT_CREATE && q.u.snap.full > 3) {
			r = err_set(&err, EINVAL, "bad snapshot kind %u", q.u.snap.full);
			break;
		}
		if (q.verb == NM_SNAPSHOT_CREATE)
			r = snapshot_create(s, q.u.snap.spec.id, q.u.snap.snap, q.u.snap.prev,
					    q.u.snap.full == 0   ? SNAP_DISK
					    : q.u.snap.full == 3 ? SNAP_MEMORY
								 : SNAP_FULL,
					    q.u.snap.full == 2 ? &q.u.snap.spec : NULL, &size, &err);
		else
			r = snapshot_delete(s, q.u.snap.spec.id, q.u.snap.snap, &err);
		break;
	case NM_SANDBOX_ROLLBACK:
		/* Safe: the same checks as create for the spec, plus the
		 * snapshot id; acts only on a live jail (ns or vm) nodemgr started for
		 * this id, reusing its uid range. The old subvolume is replaced
		 * by rename within sandboxes/, and the new jail is spawned
		 * exactly as a create would spawn it. */
		if (!valid_spec(&q.u.snap.spec, true) ||
		    !valid_sandbox_id(q.u.snap.snap, sizeof(q.u.snap.snap))) {
			r = err_set(&err, EINVAL, "bad sandbox id, snapshot id or hostname");
			break;
		}
		r = mgr_sandbox_rollback(s, &q.u.snap.spec, q.u.snap.snap, &chan, &pid, &err);
		break;
	case NM_SANDBOX_FORK:
		/* Safe: the child's spec is checked as for create; parent and
		 * snapshot ids are pattern-checked, so the source is
		 * snapshots/<parent>/<snap> under the pool only, and the child
		 * gets a new subvolume, slot and jail exactly as a create. */
		if (!valid_spec(&q.u.snap.spec, true) ||
		    !valid_sandbox_id(q.u.snap.snap, sizeof(q.u.snap.snap)) ||
		    !valid_sandbox_id(q.u.snap.prev, sizeof(q.u.snap.prev))) {
			r = err_set(&err, EINVAL, "bad sandbox id, snapshot id or hostname");
			break;
		}
		r = mgr_sandbox_fork(s, &q.u.snap.spec, q.u.snap.prev, q.u.snap.snap,
				     q.u.snap.vm != 0, &chan, &pid, &err);
		if (r == 0)
			reply_addr(s, q.u.snap.spec.id, addr);
		break;
	case NM_SUSPEND_EXPORT:
	case NM_SUSPEND_IMPORT:
		/* Safe: the spec is checked as for create and the snapshot id
		 * by pattern, so the only paths are templates/<t>/<v>,
		 * snapshots/<id>/<snap> and sandboxes/<id> under the pool; the
		 * node's file comes as an fd (a regular file, checked), never
		 * as a path. Import parses a btrfs send stream from the object
		 * store with `btrfs receive --chroot` (see suspend.c for why
		 * those bytes are the ones this node made). */
		if (!valid_spec(&q.u.xfer.spec, true) ||
		    !valid_sandbox_id(q.u.xfer.snap, sizeof(q.u.xfer.snap)) ||
		    !memchr(q.u.xfer.base, '\0', sizeof(q.u.xfer.base)) ||
		    (q.u.xfer.base[0] && !vm_base_sha_ok(q.u.xfer.base))) {
			r = err_set(&err, EINVAL, "bad sandbox id, template name, snapshot id or base");
			break;
		}
		if (q.verb == NM_SUSPEND_EXPORT)
			r = suspend_export(s, &q.u.xfer.spec, q.u.xfer.snap, q.u.xfer.artifact, in_fd,
					   &size, q.u.xfer.base, extra.sha256, &err);
		else
			r = suspend_import(s, &q.u.xfer.spec, q.u.xfer.snap, q.u.xfer.artifact, in_fd,
					   q.u.xfer.base, &err);
		break;
	case NM_VM_BASE_FIND:
	case NM_VM_BASE_EXPORT:
	case NM_VM_BASE_IMPORT:
		/* Safe: the spec is checked as for create and the digest is 64
		 * hex digits, so the only paths are the template's
		 * RAM file of a shape and pool/membase/<sha256>; the node's file
		 * comes as an fd (checked; an import's may be a pipe). Import decompresses bytes from the
		 * object store into a temporary file of membase (bounded by the
		 * RAM of the spec's shape), and
		 * keeps it only if their SHA-256 is the one asked for: what a
		 * restore reflinks from is exactly the base its suspend diffed
		 * against (vm-base.c). */
		if (!memchr(q.u.vmbase.sha, '\0', sizeof(q.u.vmbase.sha)) ||
		    (q.u.vmbase.sha[0] && !vm_base_sha_ok(q.u.vmbase.sha)) ||
		    !valid_spec(&q.u.vmbase.spec, true)) {
			r = err_set(&err, EINVAL, "bad template name or memory base digest");
			break;
		}
		if (q.verb == NM_VM_BASE_FIND) {
			r = vm_base_find(s, &q.u.vmbase.spec, q.u.vmbase.sha, extra.sha256,
					 &extra.base_size, &err);
		} else if (q.verb == NM_VM_BASE_EXPORT) {
			if ((r = artifact_fd_check(in_fd, true, &err)) == 0)
				r = vm_base_export(s, &q.u.vmbase.spec, in_fd, extra.sha256,
						   &extra.base_size, &size, &err);
		} else if (!q.u.vmbase.sha[0]) {
			r = err_set(&err, EINVAL, "no memory base digest");
		} else if ((r = artifact_stream_check(in_fd, false, NULL, &err)) == 0) {
			/* a file, or the download itself */
			r = vm_base_import(s, &q.u.vmbase.spec, q.u.vmbase.sha, in_fd, &err);
		}
		break;
	case NM_TEMPLATE_EXPORT:
		/* Safe: the name is pattern-checked, so the only path is
		 * templates/<name>/<version> under the pool, and only a finished
		 * (read-only) subvolume there is sent. The node's file comes as
		 * an fd (a regular file open for writing, checked), never as a
		 * path; `btrfs send` only reads the template. Giving the
		 * template a received uuid (if it has none) changes no byte of
		 * it, only what its streams name it by. */
		if (!valid_template_name(q.u.txfer.name, sizeof(q.u.txfer.name)) ||
		    q.u.txfer.version < 1) {
			r = err_set(&err, EINVAL, "bad template name or version");
			break;
		}
		r = template_export(s, q.u.txfer.name, q.u.txfer.version, in_fd, uuid, &size, &err);
		break;
	case NM_TEMPLATE_FIND:
		/* Safe: read-only; name and uuid are pattern-checked, and only
		 * numbered entries of templates/<name>/ are looked at (their
		 * subvolume info, by ioctl). */
		if (!valid_template_name(q.u.txfer.name, sizeof(q.u.txfer.name)) ||
		    !valid_uuid(q.u.txfer.uuid, sizeof(q.u.txfer.uuid))) {
			r = err_set(&err, EINVAL, "bad template name or uuid");
			break;
		}
		r = template_find(s, q.u.txfer.name, q.u.txfer.uuid, &version, &err);
		break;
	case NM_TEMPLATE_IMPORT:
		/* Safe: name and uuid are pattern-checked, so everything is
		 * made under templates/<name>/; the stream comes as an fd (a
		 * regular file open for reading, checked). It is untrusted
		 * bytes (from the object store, checked by the node against its
		 * manifest): `btrfs receive --chroot -m DIR` applies it inside
		 * a fresh DIR = templates/<name>/.recv-XXXXXX only (no other
		 * subvolume can be written, snapshotted or cloned from:
		 * pool_receive_new), stopping at its first error; what it made is published (renamed to a new, unused
		 * version number) only if it is exactly one read-only
		 * subvolume made from scratch with the identity the node
		 * expects, and removed otherwise. Names starting with '.' are
		 * never listed or used meanwhile. */
		if (!valid_template_name(q.u.txfer.name, sizeof(q.u.txfer.name)) ||
		    !valid_uuid(q.u.txfer.uuid, sizeof(q.u.txfer.uuid)) || q.u.txfer.version < 1) {
			r = err_set(&err, EINVAL, "bad template name, uuid or version");
			break;
		}
		r = template_import(s, q.u.txfer.name, q.u.txfer.uuid, q.u.txfer.version, in_fd,
				    &version, &err);
		break;
	case NM_SANDBOX_LIST:
		/* Safe: read-only listing of names we validate before sending. */
		send_items(fd, mgr_sandbox_list(s));
		r = 0;
		break;
	case NM_TEMPLATE_BUILD:
		/* Safe: name/kind/suite/packages are pattern-checked and passed
		 * as separate argv entries (no shell string); the output is a new
		 * subvolume under templates/. Host sources for dir/tar are read
		 * with the requester's uid unless the requester is root. */
		r = template_build(s, &q.u.build, peer_uid, fd, progress_to_client, &fd, &err);
		break;
	case NM_TEMPLATE_DELETE:
		/* Safe: deletes only templates/<valid name>/<number>. */
		if (!valid_template_name(q.u.tmpl.name, sizeof(q.u.tmpl.name))) {
			r = err_set(&err, EINVAL, "bad template name");
			break;
		}
		r = template_delete(s, q.u.tmpl.name, q.u.tmpl.version, &err);
		break;
	case NM_TEMPLATE_LIST:
		/* Safe: read-only. */
		send_items(fd, template_list(s));
		r = 0;
		break;
	case NM_DOCTOR: {
		/* Safe: read-only checks (src/doctor): files under /sys, /proc
		 * and /dev, statfs, and two fixed argvs (`qemu-system-x86_64
		 * --version`, `nft list tables`). The one input, a backend
		 * name, only picks which backend's result "ok" reports. */
		struct nm_node_info info;
		struct buf b;
		char chunk[sizeof(((struct nm_resp *)0)->text)];

		q.u.doctor.backend[sizeof(q.u.doctor.backend) - 1] = '\0';
		node_info(s, &info);
		struct doctor_opts o = {
			.data_dir = s->cfg->data_dir,
			.vm_dir = s->cfg->vm_dir ? s->cfg->vm_dir : "",
			.vm_accel = s->cfg->vm_accel,
			.default_backend = q.u.doctor.backend,
			.accel_decided = info.vm_accel[0] ? info.vm_accel : NULL,
			.accel_reason = info.vm_reason,
		};
		buf_init(&b);
		doctor_run(&o, &b);
		for (size_t off = 0; off < b.len; off += sizeof(chunk) - 1) {
			size_t n = b.len - off < sizeof(chunk) - 1 ? b.len - off : sizeof(chunk) - 1;
			memcpy(chunk, b.data + off, n);
			chunk[n] = '\0';
			send_text(fd, NM_MSG_ITEM, chunk);
		}
		buf_free(&b);
		r = 0;
		break;
	}
	case NM_TEMPLATE_CONFIG: {
		/* Safe: read-only; the name is pattern-checked, so the only
		 * file is templates/<name>/<number>/image.json, opened without
		 * following a link, sent as it is (not parsed here). */
		struct buf b;
		char chunk[sizeof(((struct nm_resp *)0)->text)];

		if (!valid_template_name(q.u.tmpl.name, sizeof(q.u.tmpl.name))) {
			r = err_set(&err, EINVAL, "bad template name");
			break;
		}
		buf_init(&b);
		r = template_config(s, q.u.tmpl.name, q.u.tmpl.version, &b, &err);
		for (size_t off = 0; r == 0 && off < b.len; off += sizeof(chunk) - 1) {
			size_t n = b.len - off < sizeof(chunk) - 1 ? b.len - off : sizeof(chunk) - 1;
			memcpy(chunk, b.data + off, n);
			chunk[n] = '\0';
			send_text(fd, NM_MSG_ITEM, chunk);
		}
		buf_free(&b);
		break;
	}
	case NM_NODE_INFO: {
		/* Safe: read-only host facts. */
		struct nm_resp res;
		resp_init(&res, NM_MSG_RESULT);
		node_info(s, &res.info);
		wire_send(fd, &res, sizeof(res), -1);
		if (in_fd >= 0)
			close(in_fd);
		close(fd);
		return;
	}
	case NM_VM_CREATE:
	case NM_VM_TEMPLATE_SAVE:
		/* Safe: the same checks as sandbox create (id, template name and
		 * hostname pattern-checked, paths only under the pool and
		 * DATA/run/vm). QEMU runs as the slot's own uid in an empty
		 * mount namespace (vm-qemu.c); its QMP replies are parsed by the
		 * size-limited, fuzzed src/qmp parser, and the guest channel is
		 * only passed on, never read. */
		if (!valid_spec(&q.u.vm.spec,
				q.verb == NM_VM_CREATE && q.u.vm.mode != NM_VM_TEMPLATE)) {
			r = err_set(&err, EINVAL, "bad sandbox id, template name or hostname");
			break;
		}
		if (q.verb == NM_VM_CREATE) {
			r = vm_create(s, &q.u.vm.spec, q.u.vm.mode, &chan, &pid, &err);
			if (r == 0 && q.u.vm.mode != NM_VM_TEMPLATE) {
				reply_addr(s, q.u.vm.spec.id, addr);
				extra.from_pool = reply_from_pool(s, q.u.vm.spec.id);
			}
		} else {
			r = vm_template_save(s, &q.u.vm.spec, q.u.vm.mode == 1, &err);
		}
		break;
	case NM_POOL_LEVELS:
		/* Safe: read-only; counts of nodemgr's own hidden jails, by
		 * keys it made from pattern-checked template names. */
		send_items(fd, pool_levels(s));
		r = 0;
		break;
	case NM_SANDBOX_STATS:
		/* Safe: read-only; kernel-written cgroup files of airlock/<id>
		 * and a tree search of sandboxes/<id> (metadata the kernel
		 * wrote), for a live jail nodemgr holds under this
		 * pattern-checked id. */
		if (!valid_sandbox_id(q.u.sandbox.id, sizeof(q.u.sandbox.id))) {
			r = err_set(&err, EINVAL, "bad sandbox id");
			break;
		}
		r = sandbox_stats(s, q.u.sandbox.id, &extra.stats, &err);
		break;
	case NM_VM_CONSOLE:
		/* Safe: a read-only fd on DATA/run/vm/<id>/console.log of a vm
		 * jail nodemgr holds for this pattern-checked id. The file is
		 * QEMU's (its uid owns the run dir), so it is opened without
		 * following links and must be a regular file of that uid with one
		 * link (vm_console_open); its bytes are passed on, never read. */
		if (!valid_sandbox_id(q.u.sandbox.id, sizeof(q.u.sandbox.id))) {
			r = err_set(&err, EINVAL, "bad sandbox id");
			break;
		}
		r = vm_console_open(s, q.u.sandbox.id, &chan, &err);
		break;
	default:
		r = err_set(&err, EOPNOTSUPP, "unknown verb %u", q.verb);
		break;
	}
	send_result(fd, r, &err, pid, chan, size, addr, uuid, version, &extra);
	if (chan >= 0)
		close(chan);
	if (in_fd >= 0)
		close(in_fd);
	close(fd);
}
