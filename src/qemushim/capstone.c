/* capstone.c - a stand-in for libcapstone.so.4 inside the vm jail.
 *
 * Debian's qemu-system-x86_64 links Capstone, which QEMU only calls to
 * disassemble for -d in_asm/out_asm logging and the monitor's x/i; we use
 * neither. Loading the real library costs every QEMU 1.3 MiB of private
 * dirty memory (ld.so relocating its tables) plus ~0.6 MiB of shared pages,
 * i.e. ~3% of an idle clone's PSS. nodemgr binds this file into the jail
 * and points LD_LIBRARY_PATH at it (vm-qemu.c, child_main). Every entry point
 * fails the way Capstone fails for an architecture it was built without,
 * so a disassembly request falls back or prints nothing; nothing else in
 * QEMU calls it. Only the five functions QEMU 7.2 imports are here. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CS_ERR_ARCH 2  /* cs_err: unsupported architecture */

typedef size_t csh;

int cs_open(int arch, int mode, csh *handle);
int cs_option(csh handle, int type, size_t value);
void *cs_malloc(csh handle);
bool cs_disasm_iter(csh handle, const uint8_t **code, size_t *size, uint64_t *address,
		    void *insn);
int cs_close(csh *handle);

int cs_open(int arch, int mode, csh *handle)
{
	(void)arch;
	(void)mode;
	if (handle)
		*handle = 0;
	return CS_ERR_ARCH;
}

int cs_option(csh handle, int type, size_t value)
{
	(void)handle;
	(void)type;
	(void)value;
	return CS_ERR_ARCH;
}

void *cs_malloc(csh handle)
{
	(void)handle;
	return NULL;
}

bool cs_disasm_iter(csh handle, const uint8_t **code, size_t *size, uint64_t *address,
		    void *insn)
{
	(void)handle;
	(void)code;
	(void)size;
	(void)address;
	(void)insn;
	return false;
}

int cs_close(csh *handle)
{
	if (handle)
		*handle = 0;
	return 0;
}
