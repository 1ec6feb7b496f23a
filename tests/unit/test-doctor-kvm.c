/* test-doctor-kvm.c - the doctor's KVM probe (src/doctor/kvm-probe.c) runs a
 * real test guest, says why when it cannot, and never hangs.
 *
 * On a host with /dev/kvm the probe runs for real; where this host is
 * PVM-only (kvm_pvm without kvm_intel/kvm_amd, as the project's build
 * machines are) the verdict must be "not usable for stock kernels", naming
 * PVM. A missing device is given as a path of its own. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../src/doctor/doctor.h"
#include "check.h"

static bool exists(const char *p)
{
	return access(p, F_OK) == 0;
}

int main(void)
{
	char why[400];
	uint64_t t0;

	/* A device that is not there: absent, and the reason names it. */
	t0 = now_ms();
	CHECK(doctor_kvm_check("/nonexistent/kvm", why, sizeof(why)) == DOCTOR_KVM_ABSENT);
	CHECK(strstr(why, "/nonexistent/kvm") && strstr(why, strerror(ENOENT)));
	CHECK(doctor_kvm_probe("/nonexistent/kvm", 1000, why, sizeof(why)) == -ENOENT);
	CHECK(strstr(why, "/nonexistent/kvm") != NULL);
	/* A device that opens but is no KVM: the test guest cannot even be
	 * made, and the reason says which call refused. */
	CHECK(doctor_kvm_check("/dev/null", why, sizeof(why)) == DOCTOR_KVM_BROKEN);
	CHECK(strstr(why, "KVM cannot run a guest") && strstr(why, "KVM_GET_API_VERSION"));
	CHECK(now_ms() - t0 < 3000);

	int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "test-doctor-kvm: no /dev/kvm here (%s); the live cases skipped\n",
			strerror(errno));
		return failures ? check_done("test-doctor-kvm") : 77;
	}
	close(fd);

	/* The tiny guest, as the probe runs it: IO 0x42 on port 0x10, then
	 * HLT, in milliseconds. */
	t0 = now_ms();
	int r = doctor_kvm_probe("/dev/kvm", DOCTOR_KVM_PROBE_MS, why, sizeof(why));
	uint64_t took = now_ms() - t0;
	fprintf(stderr, "probe: %d, %s (%llu ms)\n", r, why, (unsigned long long)took);
	CHECK(r == 0);
	CHECK(strstr(why, "a test guest ran under KVM") != NULL);

	/* Bounded: a guest that never exits (jmp $) is killed at the timeout. */
	static const unsigned char spin[] = { 0xeb, 0xfe };
	t0 = now_ms();
	r = doctor_kvm_run_code("/dev/kvm", spin, sizeof(spin), 300, why, sizeof(why));
	took = now_ms() - t0;
	CHECK(r == -ETIMEDOUT);
	CHECK(strstr(why, "did not finish within 300 ms") != NULL);
	CHECK(took >= 300 && took < 2000);

	/* The probe checks what the guest did, not only that it exited:
	 * another value, and an hlt with no IO first, are failures. */
	static const unsigned char wrong[] = { 0xb0, 0x41, 0xe6, 0x10, 0xf4 };
	CHECK(doctor_kvm_run_code("/dev/kvm", wrong, sizeof(wrong), 2000, why, sizeof(why)) == -EIO);
	CHECK(strstr(why, "0x10=0x41") != NULL);
	static const unsigned char hlt[] = { 0xf4 };
	CHECK(doctor_kvm_run_code("/dev/kvm", hlt, sizeof(hlt), 2000, why, sizeof(why)) == -EIO);
	CHECK(strstr(why, "first exit was HLT") != NULL);

	/* This host's verdict. */
	enum doctor_kvm k = doctor_kvm_state(why, sizeof(why));
	fprintf(stderr, "doctor_kvm_state: %d, %s\n", (int)k, why);
	if (exists("/sys/module/kvm_pvm") && !exists("/sys/module/kvm_intel") &&
	    !exists("/sys/module/kvm_amd")) {
		/* PVM runs the real-mode guest but not a stock kernel */
		CHECK(k == DOCTOR_KVM_PVM_ONLY);
		CHECK(strstr(why, "PVM") && strstr(why, "stock kernels hang"));
	} else {
		CHECK(k == DOCTOR_KVM_USABLE);
	}
	/* The doctor's report says the same, in its one format. */
	struct buf b;
	buf_init(&b);
	struct doctor_opts o = { .data_dir = "/nonexistent", .vm_dir = "/nonexistent",
				 .vm_accel = "auto", .default_backend = "ns" };
	doctor_run(&o, &b);
	CHECK(b.data && strstr(b.data, "\"name\":\"kvm\""));
	if (k == DOCTOR_KVM_PVM_ONLY)
		CHECK(b.data && strstr(b.data, "\"accel\":\"tcg\"") && strstr(b.data, "kvm_pvm only"));
	buf_free(&b);
	return check_done("test-doctor-kvm");
}
