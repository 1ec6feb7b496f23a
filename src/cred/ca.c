/* The interception CA: key and certificate files, leaf certificates per host. */
#include "ca.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../lib/util.h"

#define CA_DAYS 3650
#define LEAF_SECS (24 * 3600)
#define CACHE_MAX 1024

struct leaf {
	struct leaf *next;
	char *host;
	SSL_CTX *ctx;
};

struct ca {
	EVP_PKEY *key;        /* the CA's */
	X509 *crt;
	EVP_PKEY *leaf_key;   /* shared by every leaf */
	pthread_mutex_t mu;
	struct leaf *leaves;
	size_t n_leaves;
};

static int ssl_fail(err_t *err, const char *what)
{
	return err_set(err, EIO, "ca: %s failed", what);
}

static int add_ext(X509 *crt, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX v3;
	X509_EXTENSION *ext;
	int ok;

	X509V3_set_ctx(&v3, issuer, crt, NULL, NULL, 0);
	ext = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
	if (!ext)
		return -1;
	ok = X509_add_ext(crt, ext, -1);
	X509_EXTENSION_free(ext);
	return ok ? 0 : -1;
}

/* A certificate for subject CN with key pub, signed by (issuer, ikey); issuer
 * NULL = self-signed. */
static X509 *make_cert(const char *cn, EVP_PKEY *pub, X509 *issuer, EVP_PKEY *ikey,
		       long not_before, long not_after, bool is_ca, const char *san)
{
	X509 *crt = X509_new();
	X509_NAME *name;
	uint8_t serial[16];
	BIGNUM *bn = NULL;

	if (!crt)
		return NULL;
	random_bytes(serial, sizeof(serial));
	serial[0] &= 0x7f;
	bn = BN_bin2bn(serial, sizeof(serial), NULL);
	if (!bn || !X509_set_version(crt, 2) || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(crt)))
		goto fail;
	if (!X509_gmtime_adj(X509_getm_notBefore(crt), not_before) ||
	    !X509_gmtime_adj(X509_getm_notAfter(crt), not_after) || !X509_set_pubkey(crt, pub))
		goto fail;
	name = X509_get_subject_name(crt);
	if (!X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"Airlock",
					-1, -1, 0) ||
	    !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1,
					-1, 0))
		goto fail;
	if (!X509_set_issuer_name(crt, issuer ? X509_get_subject_name(issuer) : name))
		goto fail;
	if (add_ext(crt, issuer ? issuer : crt, NID_subject_key_identifier, "hash") < 0)
		goto fail;
	if (is_ca) {
		if (add_ext(crt, crt, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") < 0 ||
		    add_ext(crt, crt, NID_key_usage, "critical,keyCertSign,cRLSign") < 0)
			goto fail;
	} else {
		if (add_ext(crt, issuer, NID_authority_key_identifier, "keyid:always") < 0 ||
		    add_ext(crt, issuer, NID_basic_constraints, "critical,CA:FALSE") < 0 ||
		    add_ext(crt, issuer, NID_key_usage, "critical,digitalSignature") < 0 ||
		    add_ext(crt, issuer, NID_ext_key_usage, "serverAuth") < 0 ||
		    add_ext(crt, issuer, NID_subject_alt_name, san) < 0)
			goto fail;
	}
	if (!X509_sign(crt, ikey, EVP_sha256()))
		goto fail;
	BN_free(bn);
	return crt;
fail:
	BN_free(bn);
	X509_free(crt);
	return NULL;
}

static int write_pem(const char *path, int mode, int (*fn)(FILE *, void *), void *obj)
{
	_cleanup_free_ char *tmp = xasprintf("%s.tmp", path);
	FILE *f;
	int fd, ok;

	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
	if (fd < 0)
		return -errno;
	f = fdopen(fd, "w");
	if (!f) {
		close(fd);
		return -errno;
	}
	ok = fn(f, obj);
	if (fclose(f) != 0)
		ok = 0;
	if (!ok || rename(tmp, path) < 0) {
		unlink(tmp);
		return -EIO;
	}
	return 0;
}

static int pem_key(FILE *f, void *k)
{
	return PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL);
}

static int pem_crt(FILE *f, void *c)
{
	return PEM_write_X509(f, c);
}

int ca_ensure(const char *key_path, const char *crt_path, err_t *err)
{
	EVP_PKEY *key;
	X509 *crt;
	int r;

	if (access(key_path, F_OK) == 0 && access(crt_path, F_OK) == 0)
		return 0;
	key = EVP_EC_gen("P-256");
	if (!key)
		return ssl_fail(err, "making the CA key");
	crt = make_cert("Airlock gateway CA", key, NULL, key, -3600, (long)CA_DAYS * 86400, true,
			NULL);
	if (!crt) {
		EVP_PKEY_free(key);
		return ssl_fail(err, "making the CA certificate");
	}
	r = write_pem(key_path, 0600, pem_key, key);
	if (r == 0)
		r = write_pem(crt_path, 0644, pem_crt, crt);
	X509_free(crt);
	EVP_PKEY_free(key);
	if (r < 0) {
		errno = -r;
		return err_sys(err, "ca: cannot write `%s` / `%s`", key_path, crt_path);
	}
	return 0;
}

struct ca *ca_load(const char *key_path, const char *crt_path, err_t *err)
{
	struct ca *ca = xcalloc(1, sizeof(*ca));
	FILE *f;

	pthread_mutex_init(&ca->mu, NULL);
	if ((f = fopen(key_path, "re"))) {
		ca->key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
		fclose(f);
	}
	if ((f = fopen(crt_path, "re"))) {
		ca->crt = PEM_read_X509(f, NULL, NULL, NULL);
		fclose(f);
	}
	if (!ca->key || !ca->crt || X509_check_private_key(ca->crt, ca->key) != 1) {
		err_set(err, EINVAL, "ca: cannot load a matching key and certificate from `%s`, `%s`",
			key_path, crt_path);
		ca_free(ca);
		return NULL;
	}
	ca->leaf_key = EVP_EC_gen("P-256");
	if (!ca->leaf_key) {
		ssl_fail(err, "making the leaf key");
		ca_free(ca);
		return NULL;
	}
	return ca;
}

void ca_free(struct ca *ca)
{
	if (!ca)
		return;
	for (struct leaf *l = ca->leaves, *next; l; l = next) {
		next = l->next;
		SSL_CTX_free(l->ctx);
		free(l->host);
		free(l);
	}
	EVP_PKEY_free(ca->leaf_key);
	EVP_PKEY_free(ca->key);
	X509_free(ca->crt);
	pthread_mutex_destroy(&ca->mu);
	free(ca);
}

static int alpn_http11(SSL *ssl, const unsigned char **out, unsigned char *outlen,
		       const unsigned char *in, unsigned int inlen, void *arg)
{
	static const unsigned char h11[] = "\x08http/1.1";
	unsigned char *sel;

	if (SSL_select_next_proto(&sel, outlen, h11, sizeof(h11) - 1, in, inlen) !=
	    OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_NOACK;   /* no ALPN answer: the client uses HTTP/1.1 */
	*out = sel;
	return SSL_TLSEXT_ERR_OK;
}

static SSL_CTX *make_ctx(struct ca *ca, const char *host, err_t *err)
{
	_cleanup_free_ char *san = xasprintf("DNS:%s", host);
	SSL_CTX *ctx;
	X509 *leaf;

	leaf = make_cert(host, ca->leaf_key, ca->crt, ca->key, -86400, LEAF_SECS, false, san);
	if (!leaf) {
		ssl_fail(err, "making a leaf certificate");
		return NULL;
	}
	ctx = SSL_CTX_new(TLS_server_method());
	if (!ctx || SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
	    SSL_CTX_use_certificate(ctx, leaf) != 1 ||
	    SSL_CTX_use_PrivateKey(ctx, ca->leaf_key) != 1 ||
	    SSL_CTX_add1_chain_cert(ctx, ca->crt) != 1) {
		X509_free(leaf);
		SSL_CTX_free(ctx);
		ssl_fail(err, "setting up TLS for a leaf");
		return NULL;
	}
	X509_free(leaf);
	SSL_CTX_set_alpn_select_cb(ctx, alpn_http11, NULL);
	return ctx;
}

/* Drop the oldest leaf (the list is newest first). Its SSL_CTX lives on in
 * any SSL or caller that holds a reference. Holds ca->mu. */
static void evict_oldest(struct ca *ca)
{
	struct leaf **pp = &ca->leaves;

	if (!*pp)
		return;
	while ((*pp)->next)
		pp = &(*pp)->next;
	SSL_CTX_free((*pp)->ctx);
	free((*pp)->host);
	free(*pp);
	*pp = NULL;
	ca->n_leaves--;
}

SSL_CTX *ca_server_ctx(struct ca *ca, const char *host, err_t *err)
{
	struct leaf *l;
	SSL_CTX *ctx;

	pthread_mutex_lock(&ca->mu);
	for (l = ca->leaves; l; l = l->next)
		if (strcmp(l->host, host) == 0)
			break;
	ctx = l ? l->ctx : NULL;
	if (ctx)
		SSL_CTX_up_ref(ctx);
	pthread_mutex_unlock(&ca->mu);
	if (ctx)
		return ctx;
	ctx = make_ctx(ca, host, err);
	if (!ctx)
		return NULL;
	pthread_mutex_lock(&ca->mu);
	for (l = ca->leaves; l; l = l->next)
		if (strcmp(l->host, host) == 0)
			break;
	if (l) {                    /* another thread made it meanwhile */
		SSL_CTX_free(ctx);
		ctx = l->ctx;
	} else {
		if (ca->n_leaves >= CACHE_MAX)
			evict_oldest(ca);
		l = xcalloc(1, sizeof(*l));
		l->host = xstrdup(host);
		l->ctx = ctx;
		l->next = ca->leaves;
		ca->leaves = l;
		ca->n_leaves++;
	}
	SSL_CTX_up_ref(ctx);        /* the caller's */
	pthread_mutex_unlock(&ca->mu);
	return ctx;
}
