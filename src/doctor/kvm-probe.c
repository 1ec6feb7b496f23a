/* kvm-probe.c - does KVM run a guest here? Asked by running one.
 *
 * A flag or a loaded module says little: inside a TCG guest that shows SVM,
 * /dev/kvm opens and kvm_amd loads, yet KVM cannot start a guest. So the
 * probe runs a few bytes of 16-bit real-mode code through the KVM API
 * (KVM_CREATE_VM, one 4 KiB memory slot, KVM_CREATE_VCPU, KVM_RUN) and
 * expects the port write it makes, then its hlt. No kernel image, a few ms.
 *
 * The KVM calls run in a child process that writes what it saw to a pipe;
 * the parent waits at most timeout_ms and then SIGKILLs it, so a KVM_RUN
 * that never returns cannot hang the doctor or nodemgr. Between fork and
 * _exit the child calls only open, ioctl, mmap and write (async-signal-safe:
 * nodemgr, which runs the doctor too, has threads).
 */
#include "doctor.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/kvm.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../lib/json.h"

/* mov al, 0x42; out 0x10, al; hlt */
static const unsigned char probe_code[] = { 0xb0, 0x42, 0xe6, 0x10, 0xf4 };
#define PROBE_PORT  0x10
#define PROBE_VALUE 0x42
#define PROBE_GPA   0x1000

/* How far the child got, sent whole over the pipe. */
enum stage { S_OPEN, S_VERSION, S_VM, S_MEM, S_VCPU, S_MMAP, S_REGS, S_RUN, S_EXIT, S_DONE };
static const char *const stage_names[] = {
	"open", "KVM_GET_API_VERSION", "KVM_CREATE_VM", "KVM_SET_USER_MEMORY_REGION",
	"KVM_CREATE_VCPU", "mmap of the vcpu", "KVM_SET_SREGS/KVM_SET_REGS", "KVM_RUN",
	"guest exit", "done",
};
struct outcome {
	int32_t stage;   /* enum stage reached; S_DONE: IO then HLT seen */
	int32_t err;     /* errno of the failed call, 0 when none */
	uint32_t exit1;  /* first KVM exit reason seen */
	uint32_t exit2;  /* second (after the IO) */
	uint32_t port, value;
};

/* The child's whole job. Only async-signal-safe calls. */
static void probe_child(const char *dev, const unsigned char *code, size_t len, int out)
{
	struct outcome o = { .stage = S_OPEN };
	struct kvm_sregs sregs;
	struct kvm_regs regs;
	struct kvm_run *run;
	unsigned char *mem;
	int kvm, vm, vcpu, sz;

#define FAIL(st) do { o.stage = (st); o.err = errno; goto out; } while (0)
	if ((kvm = open(dev, O_RDWR | O_CLOEXEC)) < 0)
		FAIL(S_OPEN);
	if (ioctl(kvm, KVM_GET_API_VERSION, 0) != KVM_API_VERSION)
		FAIL(S_VERSION);
	if ((vm = ioctl(kvm, KVM_CREATE_VM, 0)) < 0)
		FAIL(S_VM);
	mem = mmap(NULL, 0x1000, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		FAIL(S_MEM);
	for (size_t i = 0; i < len && i < 0x1000; i++)
		mem[i] = code[i];
	struct kvm_userspace_memory_region reg = {
		.slot = 0, .guest_phys_addr = PROBE_GPA, .memory_size = 0x1000,
		.userspace_addr = (uint64_t)(uintptr_t)mem,
	};
	if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &reg) < 0)
		FAIL(S_MEM);
	if ((vcpu = ioctl(vm, KVM_CREATE_VCPU, 0)) < 0)
		FAIL(S_VCPU);
	if ((sz = ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE, 0)) <= 0 ||
	    (run = mmap(NULL, (size_t)sz, PROT_READ | PROT_WRITE, MAP_SHARED, vcpu, 0)) == MAP_FAILED)
		FAIL(S_MMAP);
	/* Real mode from the reset state, code segment at 0, ip at the code. */
	if (ioctl(vcpu, KVM_GET_SREGS, &sregs) < 0)
		FAIL(S_REGS);
	sregs.cs.base = 0;
	sregs.cs.selector = 0;
	if (ioctl(vcpu, KVM_SET_SREGS, &sregs) < 0)
		FAIL(S_REGS);
	memset(&regs, 0, sizeof(regs));
	regs.rip = PROBE_GPA;
	regs.rflags = 2;  /* bit 1 is always set */
	if (ioctl(vcpu, KVM_SET_REGS, &regs) < 0)
		FAIL(S_REGS);
	if (ioctl(vcpu, KVM_RUN, 0) < 0)
		FAIL(S_RUN);
	o.exit1 = run->exit_reason;
	if (run->exit_reason != KVM_EXIT_IO || run->io.direction != KVM_EXIT_IO_OUT ||
	    run->io.size != 1) {
		o.stage = S_EXIT;
		goto out;
	}
	o.port = run->io.port;
	o.value = *((unsigned char *)run + run->io.data_offset);
	if (ioctl(vcpu, KVM_RUN, 0) < 0)
		FAIL(S_RUN);
	o.exit2 = run->exit_reason;
	o.stage = o.port == PROBE_PORT && o.value == PROBE_VALUE && o.exit2 == KVM_EXIT_HLT
			  ? S_DONE : S_EXIT;
#undef FAIL
out:
	if (write(out, &o, sizeof(o)) < 0)
		_exit(2);
	_exit(0);
}

static const char *exit_name(uint32_t r)
{
	switch (r) {
	case KVM_EXIT_IO: return "IO";
	case KVM_EXIT_HLT: return "HLT";
	case KVM_EXIT_SHUTDOWN: return "SHUTDOWN (triple fault)";
	case KVM_EXIT_FAIL_ENTRY: return "FAIL_ENTRY";
	case KVM_EXIT_INTERNAL_ERROR: return "INTERNAL_ERROR";
	case KVM_EXIT_MMIO: return "MMIO";
	case KVM_EXIT_UNKNOWN: return "UNKNOWN";
	default: return "another exit";
	}
}

int doctor_kvm_run_code(const char *dev, const unsigned char *code, size_t len, int timeout_ms,
			char *why, size_t cap)
{
	struct outcome o;
	size_t got = 0;
	uint64_t t0 = now_ms(), dl = t0 + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
	int p[2];
	pid_t c;

	if (pipe2(p, O_CLOEXEC) < 0) {
		snprintf(why, cap, "probe: pipe: %s", strerror(errno));
		return -errno;
	}
	c = fork();
	if (c < 0) {
		int e = errno;
		snprintf(why, cap, "probe: fork: %s", strerror(e));
		close(p[0]);
		close(p[1]);
		return -e;
	}
	if (c == 0) {
		close(p[0]);
		probe_child(dev, code, len, p[1]);
	}
	close(p[1]);
	while (got < sizeof(o)) {
		uint64_t now = now_ms();
		struct pollfd pfd = { .fd = p[0], .events = POLLIN };
		ssize_t n;

		if (now >= dl)
			break;
		int pr = poll(&pfd, 1, (int)(dl - now));
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			break;
		n = read(p[0], (char *)&o + got, sizeof(o) - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(p[0]);
	/* Killed only when it did not answer in time (an answering child
	 * exits at once); nodemgr's reaper may collect it first, and the pipe
	 * said what counts. */
	if (got < sizeof(o))
		kill(c, SIGKILL);
	waitpid(c, NULL, 0);
	if (got < sizeof(o)) {
		snprintf(why, cap, "a test guest under KVM did not finish within %d ms (KVM_RUN hangs)",
			 timeout_ms);
		return -ETIMEDOUT;
	}
	if (o.stage == S_OPEN) {
		snprintf(why, cap, "%s: %s", dev, strerror(o.err));
		return -(o.err ? o.err : ENODEV);
	}
	if (o.stage == S_DONE) {
		snprintf(why, cap, "a test guest ran under KVM in %llu ms",
			 (unsigned long long)(now_ms() - t0));
		return 0;
	}
	if (o.stage == S_EXIT) {
		if (o.exit1 != KVM_EXIT_IO)
			snprintf(why, cap, "%s opens but KVM cannot run a guest: its first exit was %s, "
				 "not IO", dev, exit_name(o.exit1));
		else
			snprintf(why, cap, "%s opens but KVM runs a guest wrongly: IO 0x%x=0x%x then %s "
				 "(want 0x%x=0x%x then HLT)", dev, o.port, o.value, exit_name(o.exit2),
				 PROBE_PORT, PROBE_VALUE);
		return -EIO;
	}
	snprintf(why, cap, "%s opens but KVM cannot run a guest: %s: %s", dev,
		 stage_names[o.stage < S_DONE && o.stage >= 0 ? o.stage : S_EXIT],
		 o.err ? strerror(o.err) : "unexpected answer");
	return -(o.err ? o.err : EIO);
}

int doctor_kvm_probe(const char *dev, int timeout_ms, char *why, size_t cap)
{
	return doctor_kvm_run_code(dev, probe_code, sizeof(probe_code), timeout_ms, why, cap);
}

static bool exists(const char *p)
{
	return access(p, F_OK) == 0;
}

enum doctor_kvm doctor_kvm_check(const char *dev, char *why, size_t cap)
{
	char pwhy[200];
	int fd = open(dev, O_RDWR | O_CLOEXEC);

	if (fd < 0) {
		snprintf(why, cap, "%s: %s", dev, strerror(errno));
		return DOCTOR_KVM_ABSENT;
	}
	close(fd);
	if (doctor_kvm_probe(dev, DOCTOR_KVM_PROBE_MS, pwhy, sizeof(pwhy)) < 0) {
		snprintf(why, cap, "%s", pwhy);
		return DOCTOR_KVM_BROKEN;
	}
	/* PVM runs a real-mode test guest (measured), but only PVM-enabled
	 * guest kernels: a stock kernel hangs after "Probing EDD". The module
	 * rule stays for that. */
	if (exists("/sys/module/kvm_pvm") && !exists("/sys/module/kvm_intel") &&
	    !exists("/sys/module/kvm_amd")) {
		snprintf(why, cap, "kvm_pvm only (no kvm_intel/kvm_amd): a test guest runs, but PVM "
			 "runs only PVM-enabled guest kernels; stock kernels hang");
		return DOCTOR_KVM_PVM_ONLY;
	}
	snprintf(why, cap, "%s (%s)", pwhy,
		 exists("/sys/module/kvm_intel") ? "kvm_intel"
		 : exists("/sys/module/kvm_amd") ? "kvm_amd" : "kvm");
	return DOCTOR_KVM_USABLE;
}

enum doctor_kvm doctor_kvm_state(char *why, size_t cap)
{
	return doctor_kvm_check("/dev/kvm", why, cap);
}

char *doctor_accel_key(const char *vm_dir)
{
	_cleanup_free_ char *kernel = xasprintf("%s/vmlinuz", vm_dir);
	struct stat st;

	if (stat(kernel, &st) < 0)
		return NULL;
	return xasprintf("%" PRIu64 "-%" PRId64, (uint64_t)st.st_size, (int64_t)st.st_mtime);
}

bool doctor_accel_remembered(const char *data_dir, const char *vm_dir, char *accel, size_t acap,
			     char *reason, size_t rcap)
{
	_cleanup_free_ char *cache = xasprintf("%s/run/accel.json", data_dir);
	_cleanup_free_ char *key = vm_dir ? doctor_accel_key(vm_dir) : NULL;
	bool found = false;
	struct buf b;

	if (!key)
		return false;
	buf_init(&b);
	if (read_file(cache, 65536, &b) == 0 && b.data) {
		err_t e = { 0 };
		json *j = json_parse(b.data, b.len, &e);
		const char *a = json_get_str(j, "accel"), *r = json_get_str(j, "reason"),
			   *k = json_get_str(j, "kernel");
		if (a && r && k && !strcmp(k, key) && (!strcmp(a, "kvm") || !strcmp(a, "tcg"))) {
			snprintf(accel, acap, "%s", a);
			snprintf(reason, rcap, "%s (remembered)", r);
			found = true;
		}
		json_free(j);
	}
	buf_free(&b);
	return found;
}
