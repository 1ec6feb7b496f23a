/* gateway-client - the load generator of bench/gateway, run inside a sandbox
 * (through the gateway) and on the host (direct) with the same code.
 *   lat   HOST IP PORT PATH N        one HTTP/1.0 GET per new connection, N
 *                                    times; prints each latency in us
 *   get   HOST IP PORT PATH          one GET; prints "bytes seconds"
 *   conns HOST IP PORT PATH SECS THR THR threads do connect+GET+close for
 *                                    SECS seconds; prints the total count
 *   serve CERT KEY IP PORT DIR       the bench's HTTPS test server: one
 *                                    process per connection, HTTP/1.0 GET of
 *                                    a file under DIR, 1 MiB writes
 *   relay IP PORT TO_IP TO_PORT      the bench's floor: the least a proxy
 *                                    that ends TCP does (a thread per
 *                                    connection, splice both ways through a
 *                                    1 MiB pipe, half-closes passed on); no
 *                                    policy, no parsing
 *   relay-sniff IP PORT TO_IP TO_PORT the same, but dials only once the
 *                                    client's first bytes are in (as a
 *                                    proxy that decides on the Host or SNI
 *                                    must): TCP_DEFER_ACCEPT, one read,
 *                                    dial, those bytes first; still no
 *                                    policy, no parsing
 * With -t CAFILE first, every connection is TLS (SNI and name check for
 * HOST, verified against CAFILE only; a handshake that fails verification
 * is an error). Built static (with OpenSSL) by bench/gateway so it runs in
 * any template. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char *host, *ip, *path;
static int port;
static double secs;
static SSL_CTX *tls;	/* NULL: plain HTTP */

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* The whole response over TLS; a peer that closes without close_notify
 * (SSL_OP_IGNORE_UNEXPECTED_EOF) ends it like a plain EOF. */
static long long fetch_tls(int fd, const char *req, int n, char *buf, size_t cap)
{
	SSL *ssl = SSL_new(tls);
	long long total = 0;
	int k;

	if (!ssl)
		return -1;
	SSL_set_fd(ssl, fd);
	SSL_set_tlsext_host_name(ssl, host);
	SSL_set1_host(ssl, host);
	if (SSL_connect(ssl) != 1 || SSL_write(ssl, req, n) != n) {
		ERR_print_errors_fp(stderr);
		SSL_free(ssl);
		return -1;
	}
	while ((k = SSL_read(ssl, buf, cap > INT_MAX ? INT_MAX : (int)cap)) > 0)
		total += k;
	if (SSL_get_error(ssl, k) != SSL_ERROR_ZERO_RETURN) {
		ERR_print_errors_fp(stderr);
		total = -1;
	}
	SSL_free(ssl);
	return total;
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
	if (tls) {
		total = fetch_tls(fd, req, n, buf, cap);
		close(fd);
		return total;
	}
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

/* One HTTPS request on fd, served from the current directory. */
static void serve_one(SSL_CTX *ctx, int fd)
{
	static char buf[1 << 20];
	char head[4096], file[1024];
	SSL *ssl = SSL_new(ctx);
	int n = 0, k, f;
	ssize_t r;

	SSL_set_fd(ssl, fd);
	if (SSL_accept(ssl) != 1)
		return;
	while (n < (int)sizeof(head) - 1 && (k = SSL_read(ssl, head + n, sizeof(head) - 1 - n)) > 0) {
		n += k;
		head[n] = 0;
		if (strstr(head, "\r\n\r\n"))
			break;
	}
	head[n] = 0;
	if (sscanf(head, "GET /%1023s ", file) != 1 || strstr(file, "..") ||
	    (f = open(file, O_RDONLY)) < 0) {
		SSL_write(ssl, "HTTP/1.0 404 Not Found\r\n\r\n", 26);
	} else {
		n = snprintf(head, sizeof(head), "HTTP/1.0 200 OK\r\nContent-Length: %lld\r\n\r\n",
			     (long long)lseek(f, 0, SEEK_END));
		lseek(f, 0, SEEK_SET);
		if (SSL_write(ssl, head, n) == n)
			while ((r = read(f, buf, sizeof(buf))) > 0 && SSL_write(ssl, buf, r) == r)
				;
		close(f);
	}
	SSL_shutdown(ssl);
	SSL_free(ssl);
}

static int serve(char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[5])) };
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0), fd;

	if (!ctx || SSL_CTX_use_certificate_chain_file(ctx, argv[2]) != 1 ||
	    SSL_CTX_use_PrivateKey_file(ctx, argv[3], SSL_FILETYPE_PEM) != 1 || chdir(argv[6])) {
		ERR_print_errors_fp(stderr);
		return 1;
	}
	inet_pton(AF_INET, argv[4], &sa.sin_addr);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 512) < 0) {
		perror("bind");
		return 1;
	}
	signal(SIGCHLD, SIG_IGN);	/* no zombies */
	printf("ready\n");
	fflush(stdout);
	while ((fd = accept(lfd, NULL, NULL)) >= 0) {
		if (fork() == 0) {
			close(lfd);
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			serve_one(ctx, fd);
			_exit(0);
		}
		close(fd);
	}
	return 1;
}

static struct sockaddr_in relay_to;
static int relay_sniff;   /* relay-sniff: read the first bytes, then dial */

/* One relayed connection: each way, bytes go socket -> pipe -> socket
 * (splice: no copy to user space), and an EOF one way is a shutdown of
 * the write side of the other socket. */
static void *relay_conn(void *arg)
{
	struct way {
		int from, to, p[2];
		size_t held;
		int eof, done;
	} w[2];
	int a = (int)(intptr_t)arg, one = 1, b = socket(AF_INET, SOCK_STREAM, 0);
	char first[16384];
	ssize_t nfirst = 0;

	setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (relay_sniff && (nfirst = recv(a, first, sizeof(first), 0)) <= 0) {
		close(a);
		close(b);
		return NULL;
	}
	if (connect(b, (struct sockaddr *)&relay_to, sizeof(relay_to)) < 0 ||
	    (nfirst > 0 && send(b, first, (size_t)nfirst, MSG_NOSIGNAL) != nfirst)) {
		close(a);
		close(b);
		return NULL;
	}
	fcntl(a, F_SETFL, O_NONBLOCK);
	fcntl(b, F_SETFL, O_NONBLOCK);
	w[0] = (struct way){ .from = a, .to = b };
	w[1] = (struct way){ .from = b, .to = a };
	for (int i = 0; i < 2; i++)
		if (pipe2(w[i].p, O_NONBLOCK) < 0 || fcntl(w[i].p[1], F_SETPIPE_SZ, 1 << 20) < 0)
			abort();
	while (!w[0].done || !w[1].done) {
		struct pollfd pf[2] = { { .fd = a }, { .fd = b } };
		for (int i = 0; i < 2; i++) {
			if (w[i].held)
				pf[i == 0 ? 1 : 0].events |= POLLOUT;
			else if (!w[i].eof)
				pf[i].events |= POLLIN;
		}
		if (poll(pf, 2, -1) < 0)
			break;
		int fail = 0;
		for (int i = 0; i < 2; i++) {
			struct way *d = &w[i];
			ssize_t n;
			if (d->done)
				continue;
			if (!d->held && !d->eof) {
				n = splice(d->from, NULL, d->p[1], NULL, 1 << 20, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
				if (n == 0)
					d->eof = 1;
				else if (n > 0)
					d->held = (size_t)n;
				else if (errno != EAGAIN)
					fail = 1;
			}
			while (d->held) {
				n = splice(d->p[0], NULL, d->to, NULL, d->held, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
				if (n <= 0) {
					fail |= n == 0 || errno != EAGAIN;
					break;
				}
				d->held -= (size_t)n;
			}
			if (d->eof && !d->held) {
				shutdown(d->to, SHUT_WR);
				d->done = 1;
			}
		}
		if (fail)
			break;
	}
	for (int i = 0; i < 2; i++) {
		close(w[i].p[0]);
		close(w[i].p[1]);
	}
	close(a);
	close(b);
	return NULL;
}

static int relay(char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[3])) };
	int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0), fd;
	pthread_attr_t attr;
	pthread_t t;

	relay_to = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(atoi(argv[5])) };
	inet_pton(AF_INET, argv[2], &sa.sin_addr);
	inet_pton(AF_INET, argv[4], &relay_to.sin_addr);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (relay_sniff)   /* accepted once the first bytes are in, as the gateway does */
		setsockopt(lfd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 512) < 0) {
		perror("bind");
		return 1;
	}
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	printf("ready\n");
	fflush(stdout);
	while ((fd = accept(lfd, NULL, NULL)) >= 0)
		if (pthread_create(&t, &attr, relay_conn, (void *)(intptr_t)fd) != 0)
			close(fd);
	return 1;
}

int main(int argc, char **argv)
{
	static char buf[1 << 20];

	if (argc == 7 && !strcmp(argv[1], "serve"))
		return serve(argv);
	if (argc == 6 && !strcmp(argv[1], "relay"))
		return relay(argv);
	if (argc == 6 && !strcmp(argv[1], "relay-sniff")) {
		relay_sniff = 1;
		return relay(argv);
	}
	if (argc > 2 && !strcmp(argv[1], "-t")) {
		tls = SSL_CTX_new(TLS_client_method());
		if (!tls || SSL_CTX_load_verify_locations(tls, argv[2], NULL) != 1) {
			ERR_print_errors_fp(stderr);
			return 2;
		}
		SSL_CTX_set_verify(tls, SSL_VERIFY_PEER, NULL);
		SSL_CTX_set_options(tls, SSL_OP_IGNORE_UNEXPECTED_EOF);
		argv += 2;
		argc -= 2;
	}
	if (argc < 6) {
		fprintf(stderr, "usage: %s [-t CAFILE] lat|get|conns HOST IP PORT PATH "
			"[N | SECS THREADS]\n", argv[0]);
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
