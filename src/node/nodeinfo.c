/* nodeinfo.c - GET /v1/node (admin): the node's size as the node manager
 * reports it (asked once and kept: node_info_get, also create's capacity
 * check), its backends and their capabilities, and how many sandboxes are in
 * each state. GET /v1/node/doctor: nodemgr's host checks (src/doctor).
 */
#include "node-internal.h"

int node_info_get(struct node *n, struct nm_node_info *out, err_t *err)
{
	int r = 0;

	/* The node's size does not change while it runs: ask once, keep it. */
	pthread_mutex_lock(&n->info_mu);
	if (!n->have_info) {
		r = nm_node_info(n->cfg->nm_sock, &n->info, err);
		if (r == 0)
			n->have_info = true;
	}
	if (r == 0)
		*out = n->info;
	pthread_mutex_unlock(&n->info_mu);
	return r;
}

void handle_node(struct node *n, struct http_conn *c)
{
	static const char *const names[] = { "ns", "vm" };
	struct nm_node_info info;
	size_t counts[SB__COUNT] = { 0 }, live = 0;
	err_t err = { 0 };
	struct buf b;
	struct jw w;

	if (node_info_get(n, &info, &err) < 0) {
		err_wrap(&err, "node manager");
		node_respond_err(c, &err);
		return;
	}
	sandbox_counts(n, counts);
	for (int s = 0; s < SB__COUNT; s++)
		if (state_is_live((enum sb_state)s))
			live += counts[s];
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "cpus");
	jw_uint(&w, info.cpus);
	jw_key(&w, "memory_mb");
	jw_uint(&w, info.mem_total_mb);
	jw_key(&w, "pool");
	jw_obj(&w);
	jw_key(&w, "free_mb");
	jw_uint(&w, info.pool_free_mb);
	jw_key(&w, "total_mb");
	jw_uint(&w, info.pool_total_mb);
	jw_end(&w);
	jw_key(&w, "cgroup_mode");
	jw_str(&w, info.cgroup_mode);
	/* The vm backend's acceleration, as nodemgr decided it (vm-accel.c). */
	jw_key(&w, "vm");
	jw_obj(&w);
	jw_key(&w, "accel");
	jw_str(&w, info.vm_accel[0] ? info.vm_accel : NULL);
	jw_key(&w, "reason");
	jw_str(&w, info.vm_reason);
	jw_end(&w);
	jw_key(&w, "default_backend");
	jw_str(&w, n->cfg->default_backend);
	jw_key(&w, "default_template");
	jw_str(&w, n->cfg->default_template);
	jw_key(&w, "backends");
	jw_arr(&w);
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		const struct backend_ops *be = backend_find(names[i]);
		if (!be)
			continue;
		jw_obj(&w);
		jw_key(&w, "name");
		jw_str(&w, be->name);
		jw_key(&w, "caps");
		jw_obj(&w);
		jw_key(&w, "pause");
		jw_bool(&w, backend_can(be, BACKEND_CAP_PAUSE));
		jw_key(&w, "disk_snapshot");
		jw_bool(&w, backend_can(be, BACKEND_CAP_DISK_SNAPSHOT));
		jw_key(&w, "full_snapshot");
		jw_bool(&w, backend_can(be, BACKEND_CAP_FULL_SNAPSHOT));
		jw_key(&w, "memory_fork");
		jw_bool(&w, backend_can(be, BACKEND_CAP_MEMORY_FORK));
		/* "memory", "disk" or null: what a suspend keeps (docs/API.md) */
		jw_key(&w, "suspend");
		jw_str(&w, backend_suspend_kind(be));
		/* Both backends get the same sandbox network (an ns jail's veth,
		 * a vm guest's NIC routed to one); it is off node-wide or on. */
		jw_key(&w, "network");
		jw_bool(&w, n->cfg->gateway_sock != NULL);
		jw_end(&w);
		jw_end(&w);
	}
	jw_end(&w);
	jw_key(&w, "sandboxes");
	jw_obj(&w);
	jw_key(&w, "live");
	jw_uint(&w, live);
	jw_key(&w, "max");
	jw_uint(&w, n->cfg->max_sandboxes);
	for (int s = 0; s < SB__COUNT; s++) {
		if (s == SB_DELETED)
			continue;
		jw_key(&w, state_name((enum sb_state)s));
		jw_uint(&w, counts[s]);
	}
	jw_end(&w);
	jw_end(&w);
	http_respond_json(c, 200, b.data);
	buf_free(&b);
}

void handle_node_doctor(struct node *n, struct http_conn *c)
{
	_cleanup_free_ char *report = NULL;
	err_t err = { 0 };

	/* The checks run in nodemgr: it is root, so it can open /dev/kvm and
	 * list nftables, which this unprivileged daemon cannot. */
	if (nm_doctor(n->cfg->nm_sock, n->cfg->default_backend ? n->cfg->default_backend : "ns",
		      &report, &err) < 0) {
		err_wrap(&err, "node manager");
		node_respond_err(c, &err);
		return;
	}
	/* and the node's own: how the tenants' key services are reached */
	{
		_cleanup_free_ char *full = byok_doctor_amend(n, report);
		http_respond_json(c, 200, full);
	}
}
