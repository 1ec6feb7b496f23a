/* vm-files.c - what every file of the vm room builds on: a guest's shape
 * from its spec, the paths of a template's VM cache and of a sandbox's run
 * directory, and the copies and removals of those files. It calls no other
 * file of the room, so they all may call it.
 *
 * Files (all paths built from validated ids and template names):
 *
 *   pool/templates/<name>/<ver>/rootfs.ext4      the template's disk (read-only subvolume)
 *   pool/templates/<name>/<ver>.vm/              writable subvolume: the template's VM cache
 *       m<MB>-c<N>/rootfs.ext4                   the disk as the saved VM last saw it
 *       m<MB>-c<N>/mem                           guest RAM (memory-backend-file, share=on;
 *                                                root's, 0640, once saved)
 *       m<MB>-c<N>/vmstate                       device state (x-ignore-shared stream)
 *       m<MB>-c<N>/ready                         written last: the snapshot is complete
 *   pool/sandboxes/<id>/rootfs.ext4              the sandbox's disk (CoW)
 *   run/vm/<id>/console.log                      the guest's serial console
 *
 * The template subvolume is read-only (a finished template never changes),
 * and a memory snapshot is made later, on the first vm use of a template and
 * per RAM/vCPU shape, so it lives beside it in <ver>.vm (tmpl_delete
 * removes both).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "../../lib/log.h"
#include "../../lib/util.h"
#include "vm-internal.h"

/* Part of a template's memory snapshot dir name: change it whenever the
 * QEMU device set or the guest's boot changes, so a snapshot saved by an
 * older build is not loaded into a machine it does not match (n1: the
 * virtio-net NIC; n2: microvm ioapic2=off, the guest's root mounted
 * without ext4's lazyinit; n3: root noatime, /etc/machine-id and
 * /etc/resolv.conf in memory; n4: eth0 has the fixed vm network; n5: the
 * guest boots with lsm=landlock,yama; n6: the guest stops the PIT; n7:
 * its RECLAIM zeroes only what could be stale since the last one). */
#define VM_CACHE_TAG "n7"

void vm_shape_of(const struct nm_sandbox_spec *spec, struct vm_shape *sh)
{
	uint32_t cpu = spec->limits.cpu_millis ? spec->limits.cpu_millis : 1000;

	sh->mem_mb = spec->limits.memory_mb ? spec->limits.memory_mb : 512;
	sh->cpus = (cpu + 999) / 1000;
	if (sh->cpus < 1)
		sh->cpus = 1;
}

int vm_rm_rf_at(int dfd, const char *name)
{
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (fd >= 0) {
		DIR *d = fdopendir(fd);
		struct dirent *de;
		while (d && (de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
				vm_rm_rf_at(dirfd(d), de->d_name);
		if (d)
			closedir(d);
		else
			close(fd);
		return unlinkat(dfd, name, AT_REMOVEDIR);
	}
	return unlinkat(dfd, name, 0);
}

void vm_cleanup_run(struct nm_server *s, const char *id)
{
	int dfd;

	if (!s->vm)
		return;
	dfd = open(s->vm->run, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return;
	if (vm_rm_rf_at(dfd, id) < 0 && errno != ENOENT)
		log_warn("remove run/vm/%s: %s", id, strerror(errno));
	close(dfd);
}

/* dst = CoW copy of src (one FICLONE ioctl: extents are shared). */
int vm_reflink(const char *src, const char *dst, err_t *err)
{
	_cleanup_close_ int in = open(src, O_RDONLY | O_CLOEXEC);
	_cleanup_free_ char *tmp = xasprintf("%s.tmp", dst);
	_cleanup_close_ int out = -1;

	if (in < 0)
		return err_sys(err, "open %s", src);
	unlink(tmp);
	out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (out < 0)
		return err_sys(err, "create %s", tmp);
	if (ioctl(out, FICLONE, in) < 0) {
		int r = err_sys(err, "reflink %s", src);
		unlink(tmp);
		return r;
	}
	if (rename(tmp, dst) < 0) {
		int r = err_sys(err, "rename %s", tmp);
		unlink(tmp);
		return r;
	}
	return 0;
}

char *vm_cache_dir(struct nm_server *s, const struct nm_sandbox_spec *spec,
		   const struct vm_shape *sh)
{
	return xasprintf("%s/templates/%s/%u.vm/m%" PRIu32 "-c%" PRIu32 "-" VM_CACHE_TAG, s->pool,
			 spec->template_name, spec->template_version, sh->mem_mb, sh->cpus);
}

/* The jail id of a template boot: not a sandbox id the node would make
 * ("sbx-..."), and stable per template and shape. */
void vm_template_jail_id(const struct nm_sandbox_spec *spec, const struct vm_shape *sh,
			 char *out, size_t cap)
{
	char key[160];
	uint64_t h = 1469598103934665603ull;

	snprintf(key, sizeof(key), "%s/%u/%" PRIu32 "/%" PRIu32, spec->template_name,
		 spec->template_version, sh->mem_mb, sh->cpus);
	for (const char *c = key; *c; c++)
		h = (h ^ (unsigned char)*c) * 1099511628211ull;
	snprintf(out, cap, "tmpl-%016" PRIx64, h);
}
