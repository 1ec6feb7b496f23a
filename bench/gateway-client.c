/* gateway-client - the load generator of bench/gateway, run inside a sandbox
 * (through the gateway) and on the host (direct) with the same code.
 *   lat   HOST IP PORT PATH N        one HTTP/1.0 GET per new connection, N
 *                                    times; prints each latency in us
 *   get   HOST IP PORT PATH          one GET; prints "bytes seconds"
 *   conns HOST IP PORT PATH SECS THR THR threads do connect+GET+close for
 *                                    SECS seconds; prints the total count
 * Built static by bench/gateway so it runs in any template. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char *host, *ip, *path;
static int port;
static double secs;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* One request on a new connection; returns body+head bytes read, -1 on error. */
static long long fetch(char *buf, size_t cap)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	char req[512];
	long long total = 0;
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
	ssize_t k;

	inet_pton(AF_INET, ip, &sa.sin_addr);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, host);
	if (write(fd, req, n) != n) {
		close(fd);
		return -1;
	}
	while ((k = read(fd, buf, cap)) > 0)
		total += k;
	close(fd);
	return k < 0 ? -1 : total;
}

static void *conns_thread(void *arg)
{
	long *count = arg;
	char buf[65536];
	double end = now() + secs;

	while (now() < end)
		if (fetch(buf, sizeof(buf)) > 0)
			(*count)++;
	return NULL;
}

int main(int argc, char **argv)
{
	static char buf[1 << 20];

	if (argc < 6) {
		fprintf(stderr, "usage: %s lat|get|conns HOST IP PORT PATH [N | SECS THREADS]\n",
			argv[0]);
		return 2;
	}
	host = argv[2];
	ip = argv[3];
	port = atoi(argv[4]);
	path = argv[5];
	if (!strcmp(argv[1], "lat") && argc > 6) {
		int n = atoi(argv[6]);
		for (int i = 0; i < n; i++) {
			double t0 = now();
			if (fetch(buf, sizeof(buf)) <= 0)
				return 1;
			printf("%.1f\n", (now() - t0) * 1e6);
		}
		return 0;
	}
	if (!strcmp(argv[1], "get")) {
		double t0 = now();
		long long b = fetch(buf, sizeof(buf));
		if (b <= 0)
			return 1;
		printf("%lld %.4f\n", b, now() - t0);
		return 0;
	}
	if (!strcmp(argv[1], "conns") && argc > 7) {
		int thr = atoi(argv[7]);
		pthread_t t[64];
		long counts[64] = { 0 }, total = 0;
		secs = atof(argv[6]);
		if (thr < 1 || thr > 64)
			return 2;
		for (int i = 0; i < thr; i++)
			pthread_create(&t[i], NULL, conns_thread, &counts[i]);
		for (int i = 0; i < thr; i++) {
			pthread_join(t[i], NULL);
			total += counts[i];
		}
		printf("%ld\n", total);
		return 0;
	}
	return 2;
}
