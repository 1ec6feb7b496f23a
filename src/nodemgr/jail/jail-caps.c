/* jail-caps.c - network loopback and privileges (runs in init B, before exec).
 *
 * Capabilities: root inside the jail is root of its own user namespace, so
 * its capabilities mean nothing outside it. We still keep only a docker-like
 * default set in the bounding set, so package managers work as root
 * (chown files, switch to their sandbox user, bind low ports) while the
 * kernel surfaces reachable from a user namespace through CAP_SYS_ADMIN,
 * CAP_NET_ADMIN, CAP_NET_RAW, CAP_SYS_PTRACE and friends stay closed:
 *
 *   kept: CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID SETPCAP
 *         NET_BIND_SERVICE SYS_CHROOT AUDIT_WRITE SETFCAP
 *
 * Ambient and inheritable sets are cleared; no_new_privs is set, so set-uid
 * binaries and file capabilities grant nothing.
 */
#include <errno.h>
#include <linux/capability.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "jail.h"

#define FAIL(what) (snprintf(msg, cap, "%s: %s", (what), strerror(errno)), -errno)

static const int caps_kept[] = {
	CAP_CHOWN,   CAP_DAC_OVERRIDE, CAP_FOWNER,           CAP_FSETID,
	CAP_KILL,    CAP_SETGID,       CAP_SETUID,           CAP_SETPCAP,
	CAP_NET_BIND_SERVICE, CAP_SYS_CHROOT, CAP_AUDIT_WRITE, CAP_SETFCAP,
};

int jail_net_lo_up(char *msg, size_t cap)
{
	struct ifreq ifr;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return FAIL("socket");
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0) {
		close(fd);
		return FAIL("SIOCGIFFLAGS lo");
	}
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0) {
		close(fd);
		return FAIL("SIOCSIFFLAGS lo");
	}
	close(fd);
	return 0;
}

static int kept(int c)
{
	for (size_t i = 0; i < sizeof(caps_kept) / sizeof(caps_kept[0]); i++)
		if (caps_kept[i] == c)
			return 1;
	return 0;
}

int jail_drop_caps(char *msg, size_t cap)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2];

	/* Walk up to the kernel's last cap: PR_CAPBSET_DROP says EINVAL past it. */
	for (int c = 0; c < 64; c++) {
		if (kept(c))
			continue;
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0) {
			if (errno == EINVAL)
				break;
			return FAIL("PR_CAPBSET_DROP");
		}
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		return FAIL("clear ambient caps");
	/* Clear the inheritable set; permitted/effective are recomputed at
	 * exec for uid 0 from the bounding set. */
	if (syscall(SYS_capget, &hdr, data) < 0)
		return FAIL("capget");
	data[0].inheritable = data[1].inheritable = 0;
	if (syscall(SYS_capset, &hdr, data) < 0)
		return FAIL("capset");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return FAIL("no_new_privs");
	return 0;
}
