/* vm-delta.h - the memory of a process whose RAM is a private map of a
 * file, saved as a reflink of that file plus the pages it wrote, or (the
 * fork form) as those pages alone, and put back into another process that
 * maps the same file (see vm-delta.c). Split from vm_save_delta so it can be tested on any
 * process, without QEMU. */
#ifndef AIRLOCK_NODEMGR_VM_DELTA_H
#define AIRLOCK_NODEMGR_VM_DELTA_H

#include <stdint.h>
#include <sys/types.h>

#include "../../lib/err.h"

/* Process pid (stopped, so only save may move its memory) maps a file
 * MAP_PRIVATE, read-write, at offset 0, exactly size bytes long, and no
 * other mapping fits that. Make mem (new; mode 0640, owner root, group
 * gid: readable, never writable, by the QEMUs that map it) = that file with every page pid wrote since written over it, call
 * save(arg) (which saves whatever must go with the memory at the same
 * point), and check the pages did not move meanwhile; when they did, all
 * again (three tries, then -EAGAIN). *bytes: the pages written. -ENOTSUP
 * when no mapping fits. On failure mem is gone. */
int vm_ram_delta_save(pid_t pid, uint64_t size, const char *mem, gid_t gid,
		      int (*save)(void *arg, err_t *err), void *arg, uint64_t *bytes, err_t *err);

/* The same, for a fork: when the file pid maps is base (the template's RAM
 * file, which the child's QEMU maps too), delta (new, sparse, size bytes)
 * holds only the pages pid wrote, at their offsets, and holes elsewhere.
 * -ENOTSUP when pid maps another file (nothing made). */
struct stat;
int vm_ram_delta_save_sparse(pid_t pid, uint64_t size, const struct stat *base, const char *delta,
			     gid_t gid, int (*save)(void *arg, err_t *err), void *arg,
			     uint64_t *bytes, err_t *err);

/* Write the data of delta (from vm_ram_delta_save_sparse) over the same
 * offsets of process pid's RAM mapping (as above): pid then holds the
 * delta's pages as its own copies and reads every other page from its
 * file. pid must not run meanwhile (a QEMU in -incoming). *bytes: the
 * bytes written. */
int vm_ram_delta_apply(pid_t pid, uint64_t size, const char *delta, uint64_t *bytes, err_t *err);

/* The runs of pages written that vm_ram_delta_save and vm_ram_delta_save_sparse
 * list on the file they make (pairs of u32: first page, page count; *n
 * numbers), checked against a file of size bytes; NULL when the file has
 * none (a list too long for an xattr is left out) or a bad one. */
#define RAM_RUNS_XATTR "user.airlock.delta_runs"
uint32_t *vm_ram_delta_runs(int fd, uint64_t size, size_t *n);

/* How many pages of that mapping pid has written (its own copies, not
 * the file's): 0 means every page it reads comes from the file as the
 * file is at that moment. -ENOTSUP when no mapping fits. */
int vm_ram_written(pid_t pid, uint64_t size, uint64_t *pages, err_t *err);

#endif
