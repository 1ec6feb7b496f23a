/* romem.c - preloaded into a QEMU whose guest RAM is a private map of a
 * file (a clone of a template's memory snapshot, a warm or fork standby
 * QEMU, a restore from a full snapshot's .mem): turns QEMU's
 * open("/mem", O_RDWR) into O_RDONLY.
 *
 * That file is shared: every clone of a template maps the same RAM file,
 * and a snapshot's .mem may be mapped by several QEMUs. QEMU 7.2 opens a
 * memory-backend-file O_RDWR even with share=off, and its readonly=on maps
 * the guest RAM PROT_READ (the first guest write kills it); 8.2's rom=off
 * is what separates the two. A MAP_PRIVATE, PROT_WRITE map only needs an fd
 * open for reading, so with this QEMU runs unchanged on an O_RDONLY fd: its
 * writes go to its own anonymous pages, the file is never written. The
 * file itself is root's, mode 0640, and bound read-only into the jail
 * (vm-qemu.c), so the kernel refuses a write open whatever QEMU does; this
 * library only keeps QEMU from asking. Without it QEMU fails to start.
 *
 * QEMU 7.2 imports open64, __open64_2 (the fortified open) and openat64;
 * the others are here for another build. Each calls the openat syscall. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#undef _FORTIFY_SOURCE  /* this file defines open() itself */
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define RO_PATH "/mem"

static int ro_open(int dfd, const char *path, int flags, mode_t mode)
{
	if (path && !strcmp(path, RO_PATH) && (flags & O_ACCMODE) == O_RDWR && !(flags & O_CREAT))
		flags = (flags & ~O_ACCMODE) | O_RDONLY;
	return (int)syscall(SYS_openat, dfd, path, flags, mode);
}

static mode_t mode_arg(int flags, va_list ap)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...);
int open64(const char *path, int flags, ...);
int openat(int dfd, const char *path, int flags, ...);
int openat64(int dfd, const char *path, int flags, ...);
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dfd, const char *path, int flags);
int __openat64_2(int dfd, const char *path, int flags);

int open(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = mode_arg(flags, ap);
	va_end(ap);
	return ro_open(AT_FDCWD, path, flags, m);
}

int open64(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = mode_arg(flags, ap);
	va_end(ap);
	return ro_open(AT_FDCWD, path, flags, m);
}

int openat(int dfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = mode_arg(flags, ap);
	va_end(ap);
	return ro_open(dfd, path, flags, m);
}

int openat64(int dfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = mode_arg(flags, ap);
	va_end(ap);
	return ro_open(dfd, path, flags, m);
}

int __open_2(const char *path, int flags)
{
	return ro_open(AT_FDCWD, path, flags, 0);
}

int __open64_2(const char *path, int flags)
{
	return ro_open(AT_FDCWD, path, flags, 0);
}

int __openat_2(int dfd, const char *path, int flags)
{
	return ro_open(dfd, path, flags, 0);
}

int __openat64_2(int dfd, const char *path, int flags)
{
	return ro_open(dfd, path, flags, 0);
}
