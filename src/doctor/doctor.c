/* doctor.c - the host checks behind `airlock doctor` and GET /v1/node/doctor.
 *
 * Each check adds one entry: a status (ok, warn, fail), what was seen and,
 * unless ok, the fix. The backends then say which failed checks stop them:
 * both need btrfs (native, or a loop file and /dev/loop-control), cgroups
 * and nftables; vm also needs QEMU and the guest kernel. KVM is never
 * required: without it (or with a PVM-only KVM) the vm backend runs on TCG.
 */
#include "doctor.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../lib/http-cookie.h"
#include "../lib/json.h"
#include "../lib/secret.h"

enum status { ST_OK, ST_WARN, ST_FAIL };
static const char *const status_names[] = { "ok", "warn", "fail" };

struct report {
	struct jw w;
	/* failed prerequisites, by backend */
	const char *ns_missing[8], *vm_missing[8];
	size_t n_ns, n_vm;
};

static void check(struct report *r, const char *name, enum status st, const char *fix,
		  const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void check(struct report *r, const char *name, enum status st, const char *fix,
		  const char *fmt, ...)
{
	char detail[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	jw_obj(&r->w);
	jw_key(&r->w, "name");
	jw_str(&r->w, name);
	jw_key(&r->w, "status");
	jw_str(&r->w, status_names[st]);
	jw_key(&r->w, "detail");
	jw_str(&r->w, detail);
	if (st != ST_OK && fix) {
		jw_key(&r->w, "fix");
		jw_str(&r->w, fix);
	}
	jw_end(&r->w);
}

/* A failed check that stops the ns backend stops vm too. */
static void needs(struct report *r, const char *name, bool ns, bool vm)
{
	if (ns && r->n_ns < ARRAY_SIZE(r->ns_missing))
		r->ns_missing[r->n_ns++] = name;
	if (vm && r->n_vm < ARRAY_SIZE(r->vm_missing))
		r->vm_missing[r->n_vm++] = name;
}

static bool exists(const char *p)
{
	return access(p, F_OK) == 0;
}

/* Run argv (a full path), stdin and stderr on /dev/null; its first output
 * line goes to line. Returns the exit status, or -1 when it could not run. */
static int run_first_line(char *const argv[], char *line, size_t cap)
{
	int p[2], st;
	pid_t pid;
	size_t n = 0;

	line[0] = '\0';
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		int dn = open("/dev/null", O_RDWR);
		dup2(dn, 0);
		dup2(p[1], 1);
		dup2(dn, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	for (;;) {
		ssize_t k = n + 1 < cap ? read(p[0], line + n, cap - 1 - n) : 0;
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	/* drain the rest, so the child never blocks on a full pipe */
	for (char sink[512]; read(p[0], sink, sizeof(sink)) > 0;)
		;
	close(p[0]);
	line[n] = '\0';
	line[strcspn(line, "\n")] = '\0';
	/* nodemgr's reaper may collect the child first: then the status is
	 * unknown, and the output decides */
	if (waitpid(pid, &st, 0) != pid)
		return n ? 0 : -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void check_kvm(struct report *r, const struct doctor_opts *o, const char **accel,
		      char *reason, size_t rcap)
{
	char why[320], abuf[8];
	enum doctor_kvm k = doctor_kvm_state(why, sizeof(why));
	const char *want = o->vm_accel && *o->vm_accel ? o->vm_accel : "auto";

	switch (k) {
	case DOCTOR_KVM_ABSENT:
		check(r, "kvm", ST_WARN,
		      "load kvm_intel or kvm_amd (modprobe) on a host with hardware virtualization "
		      "(nested: enable it for this VM); until then the vm backend runs on TCG, slower",
		      "absent: %s", why);
		break;
	case DOCTOR_KVM_BROKEN:
		check(r, "kvm", ST_WARN,
		      "KVM here cannot start a guest (nested virtualization missing or emulated); "
		      "enable hardware virtualization for this host, or set vm_accel = tcg; until "
		      "then the vm backend runs on TCG, slower",
		      "not usable: %s", why);
		break;
	case DOCTOR_KVM_PVM_ONLY:
		check(r, "kvm", ST_WARN,
		      "load kvm_intel or kvm_amd on a host with hardware virtualization; a PVM-only "
		      "KVM boots only PVM-enabled guest kernels, so the vm backend runs on TCG, slower",
		      "%s", why);
		break;
	case DOCTOR_KVM_USABLE:
		check(r, "kvm", ST_OK, NULL, "usable: %s", why);
		break;
	}
	/* Which acceleration the vm backend uses: nodemgr's decision when we
	 * have it, else the config, else what the KVM state implies. */
	if (o->accel_decided && *o->accel_decided) {
		*accel = !strcmp(o->accel_decided, "kvm") ? "kvm" : "tcg";
		snprintf(reason, rcap, "%s", o->accel_reason ? o->accel_reason : "");
	} else if (!strcmp(want, "kvm") || !strcmp(want, "tcg")) {
		*accel = !strcmp(want, "kvm") ? "kvm" : "tcg";
		snprintf(reason, rcap, "config: vm_accel = %s", want);
	} else if (k == DOCTOR_KVM_USABLE && o->data_dir &&
		   doctor_accel_remembered(o->data_dir, o->vm_dir, abuf, sizeof(abuf), reason, rcap)) {
		/* nodemgr's boot probe for this kernel (vm-accel.c): its word */
		*accel = !strcmp(abuf, "kvm") ? "kvm" : "tcg";
	} else if (k == DOCTOR_KVM_USABLE) {
		*accel = "kvm";
		snprintf(reason, rcap, "%s; a boot probe at start confirms it (else tcg)", why);
	} else {
		*accel = "tcg";
		snprintf(reason, rcap, "%s", why);
	}
	check(r, "vm_accel", ST_OK, NULL, "%s (%s)", *accel, reason);
}

static void check_qemu(struct report *r)
{
	char *argv[] = { "/usr/bin/qemu-system-x86_64", "--version", NULL };
	char line[256];

	if (!exists(argv[0]) || run_first_line(argv, line, sizeof(line)) != 0 || !line[0]) {
		check(r, "qemu", ST_FAIL, "apt-get install qemu-system-x86 (only the vm backend needs it)",
		      "%s does not run", argv[0]);
		needs(r, "qemu", false, true);
		return;
	}
	check(r, "qemu", ST_OK, NULL, "%s", line);
}

static void check_guest_kernel(struct report *r, const struct doctor_opts *o)
{
	_cleanup_free_ char *k = xasprintf("%s/vmlinuz", o->vm_dir);
	_cleanup_free_ char *i = xasprintf("%s/initramfs.cpio.gz", o->vm_dir);
	_cleanup_free_ char *vf = xasprintf("%s/kernel.version", o->vm_dir);
	_cleanup_free_ char *ro = xasprintf("%s/lib/libairlock-romem.so", o->vm_dir);
	struct buf v;

	if (!exists(k) || !exists(i)) {
		check(r, "guest_kernel", ST_FAIL,
		      "build the tree (its vm-kernel step, scripts/vm-kernel.sh, fetches Debian's cloud "
		      "kernel and packs the initramfs) or set vm_dir to a directory holding both",
		      "%s: %s missing", o->vm_dir, exists(k) ? "initramfs.cpio.gz" : "vmlinuz");
		needs(r, "guest_kernel", false, true);
		return;
	}
	/* nodemgr preloads it into QEMUs that map a shared RAM file (vm-qemu.c). */
	if (!exists(ro)) {
		check(r, "guest_kernel", ST_FAIL,
		      "build the tree (target airlock-romem) or copy its vm/lib into vm_dir",
		      "%s missing", ro);
		needs(r, "guest_kernel", false, true);
		return;
	}
	buf_init(&v);
	if (read_file(vf, 256, &v) == 0 && v.data)
		v.data[strcspn(v.data, "\n")] = '\0';
	check(r, "guest_kernel", ST_OK, NULL, "%s/vmlinuz%s%s", o->vm_dir, v.data ? " " : "",
	      v.data ? v.data : "");
	buf_free(&v);
}

static bool fs_is(const char *path, long magic)
{
	struct statfs sf;
	return statfs(path, &sf) == 0 && (long)sf.f_type == magic;
}

static bool proc_has(const char *file, const char *word)
{
	struct buf b;
	bool found = false;

	buf_init(&b);
	if (read_file(file, 1 << 20, &b) == 0 && b.data)
		found = strstr(b.data, word) != NULL;
	buf_free(&b);
	return found;
}

/* The nearest existing directory at or above path (for statfs/statvfs of a
 * data dir that is not made yet). Caller owns. */
static char *existing_dir(const char *path)
{
	char *p = xstrdup(path);

	while (!exists(p) && strcmp(p, "/") != 0) {
		char *slash = strrchr(p, '/');
		if (slash == p)
			p[1] = '\0';
		else if (slash)
			*slash = '\0';
		else
			break;
	}
	return p;
}

static void check_storage(struct report *r, const struct doctor_opts *o)
{
	_cleanup_free_ char *pool = xasprintf("%s/pool", o->data_dir);
	_cleanup_free_ char *img = xasprintf("%s/pool.img", o->data_dir);
	_cleanup_free_ char *base = existing_dir(o->data_dir);
	bool btrfs_fs = proc_has("/proc/filesystems", "btrfs") ||
			exists("/sys/module/btrfs");
	bool mkfs = exists("/usr/sbin/mkfs.btrfs") || exists("/sbin/mkfs.btrfs") ||
		    exists("/usr/bin/mkfs.btrfs");
	bool native = fs_is(base, BTRFS_SUPER_MAGIC) && !exists(img);
	bool loop_ctl = exists("/dev/loop-control");

	if (native) {
		check(r, "btrfs", ST_OK, NULL, "native: %s is on btrfs", base);
	} else if (exists(img) && fs_is(pool, BTRFS_SUPER_MAGIC)) {
		check(r, "btrfs", ST_OK, NULL, "loop: %s mounted on %s", img, pool);
	} else if (btrfs_fs && mkfs) {
		check(r, "btrfs", ST_OK, NULL,
		      "loop: %s is not on btrfs, so `up` formats and mounts a sparse %s", base, img);
	} else {
		check(r, "btrfs", ST_FAIL,
		      "apt-get install btrfs-progs, and modprobe btrfs (or put the data dir on btrfs)",
		      "%s is not on btrfs and %s", base,
		      !btrfs_fs ? "the kernel has no btrfs" : "mkfs.btrfs is not installed");
		needs(r, "btrfs", true, true);
	}
	if (native)
		check(r, "loop_devices", ST_OK, NULL, "not needed (native btrfs)%s",
		      loop_ctl ? "; /dev/loop-control present" : "");
	else if (loop_ctl)
		check(r, "loop_devices", ST_OK, NULL, "/dev/loop-control present");
	else {
		check(r, "loop_devices", ST_FAIL,
		      "modprobe loop (or, in a container, pass /dev/loop-control and /dev/loop*)",
		      "no /dev/loop-control, and the pool needs a loop device");
		needs(r, "loop_devices", true, true);
	}

	struct statvfs sv;
	if (statvfs(exists(pool) ? pool : base, &sv) == 0) {
		uint64_t free_mb = (uint64_t)sv.f_bavail * sv.f_frsize >> 20;
		uint64_t total_mb = (uint64_t)sv.f_blocks * sv.f_frsize >> 20;
		enum status st = free_mb < 1024 ? ST_FAIL : free_mb < 10240 ? ST_WARN : ST_OK;
		check(r, "disk", st,
		      "free space where the data dir lives (sandboxes and templates share it), or "
		      "point data_dir elsewhere",
		      "%" PRIu64 " MiB free of %" PRIu64 " MiB under %s", free_mb, total_mb,
		      exists(pool) ? pool : base);
		if (st == ST_FAIL)
			needs(r, "disk", true, true);
	}
}

static uint64_t meminfo_mb(const char *key)
{
	struct buf b;
	uint64_t kb = 0;

	buf_init(&b);
	if (read_file("/proc/meminfo", 1 << 16, &b) == 0 && b.data) {
		const char *p = strstr(b.data, key);
		if (p)
			sscanf(p + strlen(key), ": %" SCNu64, &kb);
	}
	buf_free(&b);
	return kb >> 10;
}

static void check_memory(struct report *r)
{
	uint64_t avail = meminfo_mb("MemAvailable"), total = meminfo_mb("MemTotal");
	enum status st = avail < 256 ? ST_FAIL : avail < 1024 ? ST_WARN : ST_OK;

	check(r, "memory", st, "free memory: every sandbox takes its memory limit (512 MiB by default)",
	      "%" PRIu64 " MiB available of %" PRIu64 " MiB", avail, total);
	if (st == ST_FAIL)
		needs(r, "memory", true, true);
}

/* As src/nodemgr/cgroup/cgroup.c decides: v2 when the root of /sys/fs/cgroup is
 * the unified hierarchy with the memory controller, else v1 with freezer,
 * memory, cpu and pids mounted. */
static void check_cgroup(struct report *r)
{
	struct buf b;

	buf_init(&b);
	if (fs_is("/sys/fs/cgroup", CGROUP2_SUPER_MAGIC) &&
	    read_file("/sys/fs/cgroup/cgroup.controllers", 4096, &b) == 0 && b.data &&
	    strstr(b.data, "memory")) {
		bool all = strstr(b.data, "cpu") && strstr(b.data, "pids");
		struct buf sub;
		buf_init(&sub);
		(void)read_file("/sys/fs/cgroup/cgroup.subtree_control", 4096, &sub);
		b.data[strcspn(b.data, "\n")] = '\0';
		if (sub.data)
			sub.data[strcspn(sub.data, "\n")] = '\0';
		/* nodemgr enables what it needs in subtree_control itself (it is
		 * root); a controller the root does not offer cannot be delegated */
		check(r, "cgroup", all ? ST_OK : ST_FAIL,
		      "boot with the cpu, memory and pids controllers on the unified hierarchy "
		      "(they are missing from /sys/fs/cgroup/cgroup.controllers)",
		      "v2; controllers: %s; delegated to children now: %s", b.data,
		      sub.data && sub.data[0] ? sub.data : "none (nodemgr enables them)");
		buf_free(&sub);
		if (!all)
			needs(r, "cgroup", true, true);
		buf_free(&b);
		return;
	}
	buf_free(&b);
	static const char *const ctrls[] = { "freezer", "memory", "cpu", "pids" };
	char missing[64] = "";
	for (size_t i = 0; i < ARRAY_SIZE(ctrls); i++) {
		_cleanup_free_ char *d = xasprintf("/sys/fs/cgroup/%s", ctrls[i]);
		if (!fs_is(d, CGROUP_SUPER_MAGIC))
			snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), "%s%s",
				 missing[0] ? "," : "", ctrls[i]);
	}
	if (missing[0]) {
		check(r, "cgroup", ST_FAIL,
		      "mount the cgroup v1 controllers (or boot with the unified v2 hierarchy)",
		      "neither v2 with memory at /sys/fs/cgroup nor v1 with %s mounted", missing);
		needs(r, "cgroup", true, true);
	} else {
		check(r, "cgroup", ST_OK, NULL, "v1 (freezer, memory, cpu, pids mounted)");
	}
}

static void check_nftables(struct report *r)
{
	char *argv[] = { "/usr/sbin/nft", "list", "tables", NULL };
	char line[256];

	if (!exists(argv[0])) {
		check(r, "nftables", ST_FAIL,
		      "apt-get install nftables (or set network = false: sandboxes then get only lo)",
		      "%s is not installed; the sandbox network needs it", argv[0]);
		needs(r, "nftables", true, true);
	} else if (geteuid() != 0) {
		check(r, "nftables", ST_WARN, "run the doctor as root to look", "%s present; not root, not tried",
		      argv[0]);
	} else if (run_first_line(argv, line, sizeof(line)) != 0) {
		check(r, "nftables", ST_FAIL,
		      "modprobe nf_tables (or, in a container, give it CAP_NET_ADMIN), or set "
		      "network = false",
		      "`nft list tables` failed: the kernel's nf_tables is not usable here");
		needs(r, "nftables", true, true);
	} else {
		check(r, "nftables", ST_OK, NULL, "`nft list tables` works");
	}
}

/* DATA/pool/templates/<name>/<ver>: the templates made so far, with the vm
 * memory snapshots (<ver>.vm/<shape>) creates clone from. */
static void check_templates(struct report *r, const struct doctor_opts *o)
{
	_cleanup_free_ char *dir = xasprintf("%s/pool/templates", o->data_dir);
	DIR *d = opendir(dir);
	struct dirent *de;
	struct buf list;
	unsigned n = 0;

	if (!d) {
		check(r, "templates", ST_WARN,
		      "`airlockd up` builds the `templates` of its config (busybox, debian) at start",
		      "none yet (%s: %s)", dir, strerror(errno));
		return;
	}
	buf_init(&list);
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		_cleanup_free_ char *sub = xasprintf("%s/%s", dir, de->d_name);
		DIR *sd = opendir(sub);
		unsigned vers = 0, vm = 0;
		struct dirent *ve;
		while (sd && (ve = readdir(sd))) {
			size_t l = strlen(ve->d_name);
			if (ve->d_name[0] == '.')
				continue;
			if (l > 3 && !strcmp(ve->d_name + l - 3, ".vm"))
				vm++;
			else
				vers++;
		}
		if (sd)
			closedir(sd);
		buf_printf(&list, "%s%s (%u version%s%s)", n ? ", " : "", de->d_name, vers,
			   vers == 1 ? "" : "s", vm ? ", vm snapshot cached" : "");
		n++;
	}
	closedir(d);
	if (n)
		check(r, "templates", ST_OK, NULL, "%s", list.data);
	else
		check(r, "templates", ST_WARN,
		      "`airlockd up` builds the `templates` of its config (busybox, debian) at start",
		      "none yet in %s", dir);
	buf_free(&list);
}

/* airlockd's config file: a secret in it (an S3 key, the database's
 * password) that others can read is one anyone on the host may take. */
static void check_config_secrets(struct report *r, const struct doctor_opts *o)
{
	char why[512];

	if (!o->config_path)
		return;
	if (secret_config_exposure(o->config_path, why, sizeof(why)) != SECRET_NOT_EXPOSED)
		check(r, "config", ST_WARN,
		      "keep secrets in s3_secret_key_file, db_password_file (root's 0600) or "
		      "systemd credentials (docs/CONFIGURATION.md \"Secrets\")",
		      "%s", why);
	else if (access(o->config_path, F_OK) == 0)
		check(r, "config", ST_OK, NULL, "%s: no secret in it that others can read",
		      o->config_path);
}

/* Host-routed port URLs ({port}-{id}.<ports_domain>) each serve a tenant's
 * service. Sharing a site with the API's host would let those services set
 * and receive the cookies of the API's domain, and each other's beyond
 * what the node's Set-Cookie rewrite stops (docs/API.md, "Same-site limits
 * of a shared ports domain"). Config, not host: only a warning. */
static void check_ports_domain(struct report *r, const struct doctor_opts *o)
{
	char host[256], why[512];

	if (!o->ports_domain)
		return;
	if (!*o->ports_domain) {
		check(r, "ports_domain", ST_OK, NULL, "off (no host-routed port URLs)");
		return;
	}
	http_url_host(o->api_url, host, sizeof(host));
	if (http_site_separate(o->ports_domain, host, why, sizeof(why)))
		check(r, "ports_domain", ST_OK, NULL, "`%s`, apart from the API's host `%s`",
		      o->ports_domain, *host ? host : "(unknown)");
	else
		check(r, "ports_domain", ST_WARN,
		      "give ports_domain a registrable domain of its own, not under the API's or "
		      "your company's domain (e.g. example-sbx.net for api.example.com), "
		      "ideally one on the Public Suffix List",
		      "%s", why);
}

/* Opens the backend's object; the caller adds to it and closes it. */
static void backend(struct jw *w, const char *name, bool can_run, const char *const *missing,
		    size_t n)
{
	jw_key(w, name);
	jw_obj(w);
	jw_key(w, "can_run");
	jw_bool(w, can_run);
	jw_key(w, "missing");
	jw_arr(w);
	for (size_t i = 0; i < n; i++)
		jw_str(w, missing[i]);
	jw_end(w);
}

bool doctor_run(const struct doctor_opts *o, struct buf *out)
{
	const char *def = o->default_backend && *o->default_backend ? o->default_backend : "ns";
	struct report r = { 0 };
	const char *accel = "tcg";
	char reason[384] = "";
	bool ok;

	jw_init(&r.w, out);
	jw_obj(&r.w);
	jw_key(&r.w, "checks");
	jw_arr(&r.w);
	if (geteuid() != 0)
		check(&r, "root", ST_WARN, "run `airlock doctor` as root",
		      "not root: /dev/kvm and nftables may read as unusable when they are not");
	check_kvm(&r, o, &accel, reason, sizeof(reason));
	check_qemu(&r);
	check_guest_kernel(&r, o);
	check_storage(&r, o);
	check_cgroup(&r);
	check_nftables(&r);
	check_memory(&r);
	check_templates(&r, o);
	check_config_secrets(&r, o);
	check_ports_domain(&r, o);
	jw_end(&r.w);

	bool ns_ok = r.n_ns == 0, vm_ok = r.n_vm == 0;
	ok = !strcmp(def, "vm") ? vm_ok : ns_ok;
	jw_key(&r.w, "backends");
	jw_obj(&r.w);
	backend(&r.w, "ns", ns_ok, r.ns_missing, r.n_ns);
	jw_end(&r.w);
	backend(&r.w, "vm", vm_ok, r.vm_missing, r.n_vm);
	jw_key(&r.w, "accel");
	jw_str(&r.w, accel);
	jw_key(&r.w, "accel_reason");
	jw_str(&r.w, reason);
	jw_end(&r.w);
	jw_end(&r.w);
	jw_key(&r.w, "default_backend");
	jw_str(&r.w, def);
	jw_key(&r.w, "ok");
	jw_bool(&r.w, ok);
	jw_end(&r.w);
	return ok;
}
