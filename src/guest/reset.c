/* reset.c - RESET: make a restored or forked VM a machine of its own.
 *
 * Clones of one memory snapshot wake up with the snapshot's wall clock, the
 * same RNG state (TERRAIN: three clones printed the same /dev/urandom bytes),
 * the same hostname and the same machine-id. The host sends RESET before it
 * hands the sandbox out; we answer OK only once every step is done, so
 * nothing inside the sandbox can observe shared state after the node has
 * reported the sandbox ready.
 *
 * Order: the RNG first (it is what clones must never share), then the clock,
 * the hostname and /etc/machine-id, then (when the host sends an address)
 * eth0 and /etc/resolv.conf. The host sends the fixed vm network
 * (PROTO_VM_NET_*), which the guest set at boot, so a clone or a fork child
 * already has it and changes nothing; only a guest restored from a snapshot
 * made before that (its own sandbox's address on eth0) is readdressed. A
 * failed step is reported as ERROR and the later steps are not attempted;
 * the host treats that as a failed create.
 */
#include "guest.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <arpa/inet.h>
#include <linux/random.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#define MACHINE_ID_PATH "/etc/machine-id"
#define RESOLV_CONF_PATH "/etc/resolv.conf"
#define NET_IF "eth0"

/* Mix the host's bytes into the pool, credit them, and force the CRNG to
 * reseed from it now (otherwise it would keep serving the snapshot's key
 * until its next scheduled reseed). */
static int reseed(const uint8_t *p, size_t n)
{
	/* struct rand_pool_info ends in a flexible array: room for it and
	 * the bytes, aligned for its int fields */
	uint32_t req[(sizeof(struct rand_pool_info) + PROTO_RESET_ENTROPY_MAX) / 4 + 1];
	struct rand_pool_info *info = (struct rand_pool_info *)req;
	int fd, r = 0;

	if (n > PROTO_RESET_ENTROPY_MAX)
		return -EINVAL;
	memset(req, 0, sizeof(req));
	memcpy(info->buf, p, n);
	info->entropy_count = (int)(n * 8);
	info->buf_size = (int)n;
	fd = open("/dev/urandom", O_RDONLY | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (ioctl(fd, RNDADDENTROPY, info) < 0 || ioctl(fd, RNDRESEEDCRNG) < 0)
		r = -errno;
	close(fd);
	explicit_bzero(req, sizeof(req));
	return r;
}

/* Overwrite an existing /etc/machine-id of exactly the new id's length in
 * place: one pwrite into a page that is already allocated. Creating a
 * temporary file and renaming it over the old one (below) allocates an
 * inode, frees the old one and journals both; under TCG that was 9-16 ms,
 * nearly all of RESET (timed inside the guest). After a clone's first RESET
 * (the warm pool's) the file is always of this shape. 0 when done, 1 when
 * the file is not such a file (then the caller replaces it). Nothing in the
 * guest reads the id while RESET runs: the sandbox is not handed out before
 * RESET answers. */
static int overwrite_machine_id(const char *line, size_t n)
{
	struct stat st;
	int fd = open(MACHINE_ID_PATH, O_WRONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
	int r = 1;

	if (fd < 0)
		return 1;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 &&
	    st.st_size == (off_t)n) {
		errno = 0;
		r = pwrite(fd, line, n, 0) == (ssize_t)n ? 0 : (errno ? -errno : -EIO);
	}
	close(fd);
	return r;
}

/* open(path, O_WRONLY | flags) and write all of text; no fsync (see
 * write_machine_id; lib's write_file syncs). */
static int write_text(const char *path, int flags, mode_t mode, const char *text, size_t n)
{
	int fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC | flags, mode), r;

	if (fd < 0)
		return -errno;
	r = write_all(fd, text, n);
	close(fd);
	return r;
}

/* Replace path with text: in place when it is in memory, else atomically
 * (tmp + rename; a symlink at path is replaced, not followed). No fsync
 * (see write_machine_id). A regular file that already says exactly that is
 * left alone (a vm guest's resolv.conf names the fixed resolver from its
 * boot on): no write on the create path. */
static int replace_file(const char *path, const char *text, mode_t mode)
{
	char tmp[128], cur[128];
	struct statfs sf;
	size_t n = strlen(text);
	int fd, r;

	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t k = n < sizeof(cur) ? read(fd, cur, sizeof(cur)) : -1;
		struct stat st;
		bool same = k == (ssize_t)n && !memcmp(cur, text, n) && fstat(fd, &st) == 0 &&
			    S_ISREG(st.st_mode) && (st.st_mode & 07777) == mode;
		close(fd);
		if (same)
			return 0;
	}
	/* In memory (vminit's etc_in_memory bind-mounts a tmpfs file over
	 * it): rewritten in place, as a rename over a mount point fails.
	 * Nothing in the guest reads it while RESET runs. */
	if (statfs(path, &sf) == 0 && sf.f_type == TMPFS_MAGIC)
		return write_text(path, O_TRUNC, 0, text, n);
	snprintf(tmp, sizeof(tmp), "%s.airlock-tmp", path);
	r = write_text(tmp, O_CREAT | O_TRUNC, mode, text, n);
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0)
		unlink(tmp);
	return r;
}

/* The new machine-id in place when the file allows it, else replaced
 * atomically (replace_file); without fsync: the id only has to hold for
 * this boot of this clone, and an fsync here is an ext4 journal commit plus
 * a flush of the virtio-blk disk, i.e. an fdatasync on the host: measured
 * 60-100 ms of a ~130 ms RESET under TCG, on the create path. */
static int write_machine_id(const char *line)
{
	int r = overwrite_machine_id(line, strlen(line));

	return r <= 0 ? r : replace_file(MACHINE_ID_PATH, line, 0444);
}

static void sin_set(struct sockaddr *sa, uint32_t host_order)
{
	struct sockaddr_in *in = (struct sockaddr_in *)sa;

	memset(in, 0, sizeof(*in));
	in->sin_family = AF_INET;
	in->sin_addr.s_addr = htonl(host_order);
}

/* eth0 = addr/prefix, up, default route via gw (the classic ioctls, as
 * vminit brings lo up: no netlink code in the guest). SIOCSIFADDR replaces
 * an address eth0 already has, which takes that address's routes with it;
 * the default route is deleted first in case its gateway stays reachable.
 * (No ARP entry to drop: the gateway is QEMU's namespace's tap, whose MAC
 * is the same in every jail.) */
static int net_config(int s, uint32_t addr, uint8_t prefix, uint32_t gw, const char **step)
{
	struct ifreq ifr;
	struct rtentry rt;

	memset(&rt, 0, sizeof(rt));
	sin_set(&rt.rt_dst, 0);
	sin_set(&rt.rt_genmask, 0);
	sin_set(&rt.rt_gateway, 0);
	(void)ioctl(s, SIOCDELRT, &rt);   /* ESRCH: none yet */
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), NET_IF);
	sin_set(&ifr.ifr_addr, addr);
	if (ioctl(s, SIOCSIFADDR, &ifr) < 0) {
		*step = "set the address of " NET_IF;
		return -errno;
	}
	sin_set(&ifr.ifr_netmask, prefix ? ~0u << (32 - prefix) : 0);
	if (ioctl(s, SIOCSIFNETMASK, &ifr) < 0) {
		*step = "set the netmask of " NET_IF;
		return -errno;
	}
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0) {
		*step = "read the flags of " NET_IF;
		return -errno;
	}
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0) {
		*step = "bring " NET_IF " up";
		return -errno;
	}
	memset(&rt, 0, sizeof(rt));
	sin_set(&rt.rt_dst, 0);
	sin_set(&rt.rt_genmask, 0);
	sin_set(&rt.rt_gateway, gw);
	rt.rt_flags = RTF_UP | RTF_GATEWAY;
	rt.rt_dev = (char *)NET_IF;
	if (ioctl(s, SIOCADDRT, &rt) < 0 && errno != EEXIST) {
		*step = "add the default route";
		return -errno;
	}
	return 0;
}

/* Whether eth0 holds exactly addr/prefix. */
static bool net_has(int s, uint32_t addr, uint8_t prefix)
{
	struct ifreq ifr;
	uint32_t mask = prefix ? ~0u << (32 - prefix) : 0;

	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), NET_IF);
	if (ioctl(s, SIOCGIFADDR, &ifr) < 0 ||
	    ntohl(((struct sockaddr_in *)&ifr.ifr_addr)->sin_addr.s_addr) != addr)
		return false;
	return ioctl(s, SIOCGIFNETMASK, &ifr) == 0 &&
	       ntohl(((struct sockaddr_in *)&ifr.ifr_netmask)->sin_addr.s_addr) == mask;
}

int guest_net_setup(uint32_t addr, uint8_t prefix, uint32_t gw, uint32_t dns, const char **step)
{
	char text[64], ip[INET_ADDRSTRLEN];
	struct in_addr in = { htonl(dns) };
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), r = 0;

	if (s < 0) {
		*step = "socket";
		return -errno;
	}
	if (!net_has(s, addr, prefix))
		r = net_config(s, addr, prefix, gw, step);
	close(s);
	if (r < 0)
		return r;
	inet_ntop(AF_INET, &in, ip, sizeof(ip));
	snprintf(text, sizeof(text), "nameserver %s\n", ip);
	if ((r = replace_file(RESOLV_CONF_PATH, text, 0644)) < 0)
		*step = "write " RESOLV_CONF_PATH;
	return r;
}

void guest_reset(struct agent *a, const struct proto_frame *f)
{
	struct proto_reset x;
	char line[PROTO_MACHINE_ID_LEN + 2];
	int r;

	/* Trusted host, but parsed like everything else: all fields are
	 * checked before anything is changed. */
	if ((r = proto_dec_reset(f, &x)) < 0) {
		agent_send_error(a, f->req_id, -r, "reset: %s",
				 r == -EINVAL ? "a field is out of range" : "malformed request");
		return;
	}
	r = reseed(x.entropy, x.entropy_len);
	explicit_bzero(x.entropy, sizeof(x.entropy));
	if (r < 0) {
		agent_send_error(a, f->req_id, -r, "reset: reseed the RNG: %s", strerror(-r));
		return;
	}
	if (x.wall_ns) {
		struct timespec ts = {
			.tv_sec = (time_t)(x.wall_ns / 1000000000ull),
			.tv_nsec = (long)(x.wall_ns % 1000000000ull),
		};
		if (clock_settime(CLOCK_REALTIME, &ts) < 0) {
			agent_send_error(a, f->req_id, errno, "reset: set the clock: %s",
					 strerror(errno));
			return;
		}
	}
	if (sethostname(x.hostname, strlen(x.hostname)) < 0) {
		agent_send_error(a, f->req_id, errno, "reset: sethostname: %s", strerror(errno));
		return;
	}
	/* machine-id(5): 32 hex digits and a newline, replaced atomically. */
	snprintf(line, sizeof(line), "%s\n", x.machine_id);
	(void)mkdir_p("/etc", 0755);
	if ((r = write_machine_id(line)) < 0) {
		agent_send_error(a, f->req_id, -r, "reset: write " MACHINE_ID_PATH ": %s",
				 strerror(-r));
		return;
	}
	if (x.net_addr) {
		const char *step = "";

		r = guest_net_setup(x.net_addr, x.net_prefix, x.net_gateway, x.net_dns, &step);
		if (r < 0) {
			agent_send_error(a, f->req_id, -r, "reset: %s: %s", step, strerror(-r));
			return;
		}
	}
	agent_send_ok(a, f->req_id);
}
