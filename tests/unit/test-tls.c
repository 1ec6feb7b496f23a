/* test-tls.c - the api listener's TLS policy (src/lib/tls.c tls_server_ctx):
 * TLS 1.2 or later, and on 1.2 only ECDHE with an AEAD cipher (AES-GCM or
 * ChaCha20-Poly1305), the server's order first. Each client below offers
 * one thing and handshakes over a socketpair with tls_server_wrap. */
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../src/lib/tls.h"
#include "../../src/lib/util.h"
#include "check.h"

/* An EC P-256 key and a self-signed certificate for it, as PEM files in
 * dir (the api's own certificate in tests/e2e/test_tls.py is EC too). */
static int make_cert(const char *dir, char *cert, char *key, size_t n)
{
	EVP_PKEY *pk = EVP_EC_gen("P-256");
	X509 *x = X509_new();
	FILE *f;
	int ok = 0;

	snprintf(cert, n, "%s/cert.pem", dir);
	snprintf(key, n, "%s/key.pem", dir);
	if (!pk || !x)
		goto out;
	ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
	X509_gmtime_adj(X509_getm_notBefore(x), 0);
	X509_gmtime_adj(X509_getm_notAfter(x), 3600);
	X509_set_pubkey(x, pk);
	X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
				   (const unsigned char *)"localhost", -1, -1, 0);
	X509_set_issuer_name(x, X509_get_subject_name(x));
	if (!X509_sign(x, pk, EVP_sha256()))
		goto out;
	if (!(f = fopen(cert, "w")))
		goto out;
	ok = PEM_write_X509(f, x);
	fclose(f);
	if (!ok || !(f = fopen(key, "w"))) {
		ok = 0;
		goto out;
	}
	ok = PEM_write_PrivateKey(f, pk, NULL, NULL, 0, NULL, NULL);
	fclose(f);
out:
	X509_free(x);
	EVP_PKEY_free(pk);
	return ok ? 0 : -1;
}

struct server {
	struct tls_ctx *t;
	int fd;
	int plain;   /* tls_server_wrap's answer */
};

static void *serve(void *arg)
{
	struct server *s = arg;
	err_t err = { 0 };

	s->plain = tls_server_wrap(s->t, s->fd, now_ms() + 5000, &err);
	if (s->plain < 0)
		close(s->fd);   /* left to us on failure: the client sees EOF */
	return NULL;
}

/* A client that offers only [min, max] and the given TLS 1.2 cipher list
 * (NULL: OpenSSL's defaults) connects. Returns whether the handshake
 * succeeded, and then the cipher it got in got (when not NULL). */
static bool handshake(struct tls_ctx *t, int min, int max, const char *ciphers, char *got,
		      size_t gn)
{
	int sv[2];
	struct server s = { .t = t, .plain = -1 };
	pthread_t th;
	SSL_CTX *cctx = SSL_CTX_new(TLS_client_method());
	SSL *ssl = NULL;
	bool ok = false;

	if (!cctx || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		CHECK(!"client setup");
		SSL_CTX_free(cctx);
		return false;
	}
	s.fd = sv[0];
	CHECK(pthread_create(&th, NULL, serve, &s) == 0);
	/* security level 0: let the client offer what a default client no
	 * longer would, so it is the server that refuses */
	SSL_CTX_set_security_level(cctx, 0);
	SSL_CTX_set_min_proto_version(cctx, min);
	SSL_CTX_set_max_proto_version(cctx, max);
	if (ciphers)
		CHECK(SSL_CTX_set_cipher_list(cctx, ciphers) == 1);
	ssl = SSL_new(cctx);
	SSL_set_fd(ssl, sv[1]);
	ok = SSL_connect(ssl) == 1;
	if (ok && got)
		snprintf(got, gn, "%s", SSL_get_cipher_name(ssl));
	if (ok)
		SSL_shutdown(ssl);
	ERR_clear_error();
	SSL_free(ssl);
	SSL_CTX_free(cctx);
	close(sv[1]);
	pthread_join(th, NULL);
	CHECK(ok == (s.plain >= 0));   /* both sides agree */
	if (s.plain >= 0)
		close(s.plain);
	return ok;
}

int main(void)
{
	char dir[] = "/tmp/airlock-test-tls-XXXXXX", cert[128], key[128], got[64] = "";
	err_t err = { 0 };
	struct tls_ctx *t;

	signal(SIGPIPE, SIG_IGN);   /* a refused client writes to a closed socket */
	if (!mkdtemp(dir) || make_cert(dir, cert, key, sizeof(cert)) < 0) {
		fprintf(stderr, "test-tls: cannot make a certificate\n");
		return 1;
	}
	t = tls_server_ctx(cert, key, &err);
	unlink(cert);
	unlink(key);
	rmdir(dir);
	if (!t) {
		fprintf(stderr, "test-tls: %s\n", err.msg);
		return 1;
	}

	/* a modern client: TLS 1.3 */
	CHECK(handshake(t, TLS1_2_VERSION, 0, NULL, got, sizeof(got)));
	CHECK(strncmp(got, "TLS_", 4) == 0);
	/* TLS 1.2 with each AEAD suite */
	CHECK(handshake(t, TLS1_2_VERSION, TLS1_2_VERSION, "ECDHE-ECDSA-AES128-GCM-SHA256", NULL, 0));
	CHECK(handshake(t, TLS1_2_VERSION, TLS1_2_VERSION, "ECDHE-ECDSA-AES256-GCM-SHA384", NULL, 0));
	CHECK(handshake(t, TLS1_2_VERSION, TLS1_2_VERSION, "ECDHE-ECDSA-CHACHA20-POLY1305", NULL, 0));

	/* older protocols, whatever the cipher */
	CHECK(!handshake(t, TLS1_VERSION, TLS1_1_VERSION, "DEFAULT", NULL, 0));
	CHECK(!handshake(t, TLS1_1_VERSION, TLS1_1_VERSION, "ECDHE-ECDSA-AES128-SHA", NULL, 0));
	/* TLS 1.2 with CBC (MAC-then-encrypt: Lucky13 and padding oracles) */
	CHECK(!handshake(t, TLS1_2_VERSION, TLS1_2_VERSION, "ECDHE-ECDSA-AES128-SHA", NULL, 0));
	CHECK(!handshake(t, TLS1_2_VERSION, TLS1_2_VERSION, "ECDHE-ECDSA-AES256-SHA384", NULL, 0));
	CHECK(!handshake(t, TLS1_2_VERSION, TLS1_2_VERSION,
			 "ECDHE-ECDSA-AES128-SHA:ECDHE-ECDSA-AES128-SHA256:ECDHE-ECDSA-AES256-SHA",
			 NULL, 0));
	/* ... and no suite without forward secrecy, nor a null cipher */
	CHECK(!handshake(t, TLS1_2_VERSION, TLS1_2_VERSION, "ECDHE-ECDSA-NULL-SHA", NULL, 0));

	/* the server's order wins: a client listing AES-256 first and a CBC
	 * suite before AES-128 still gets AES-128-GCM */
	CHECK(handshake(t, TLS1_2_VERSION, TLS1_2_VERSION,
			"ECDHE-ECDSA-AES128-SHA:ECDHE-ECDSA-AES256-GCM-SHA384:"
			"ECDHE-ECDSA-AES128-GCM-SHA256",
			got, sizeof(got)));
	CHECK(strcmp(got, "ECDHE-ECDSA-AES128-GCM-SHA256") == 0);

	tls_ctx_free(t);
	tls_relays_wait(2000);
	return check_done("test-tls");
}
