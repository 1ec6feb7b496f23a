/* kms-local.c - the local key provider: the tenant's key as files under
 * the node's data dir, DATA/keys/<tenant>/<key_id>.v<N> (kms.h).
 *
 * Each version is 32 random bytes, created 0600 in a 0700 directory by the
 * daemon that uses it (so owned by its user, readable by no other); a file
 * that is not ours or is readable by others is refused. A data key is
 * wrapped as "local:v<N>:" base64(nonce 12 | AES-256-GCM ciphertext 32 |
 * tag 16), the AAD binding tenant, key id and version: a wrapping moved to
 * another tenant or key does not open. */
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../lib/ident.h"
#include "kms.h"

#define LOCAL_VERSIONS_MAX 100000

static char *key_path(struct kms *k, const char *tenant, const char *key_id, unsigned v)
{
	return xasprintf("%s/%s/%s.v%u", k->key_dir, tenant, key_id, v);
}

static int names_check(const char *tenant, const char *key_id, err_t *err)
{
	if (!ident_key_ok(tenant, CRYPT_NAME_MAX) || !ident_key_ok(key_id, 64))
		return err_set(err, EINVAL, "local key: bad tenant or key id");
	return 0;
}

unsigned kms_local_version(struct kms *k, const char *tenant, const char *key_id)
{
	unsigned v = 0;
	struct stat st;

	if (!ident_key_ok(tenant, CRYPT_NAME_MAX) || !ident_key_ok(key_id, 64))
		return 0;
	for (;;) {
		_cleanup_free_ char *p = key_path(k, tenant, key_id, v + 1);
		if (v >= LOCAL_VERSIONS_MAX || lstat(p, &st) < 0)
			return v;
		v++;
	}
}

/* Create version v (it must not exist). */
static int key_create(struct kms *k, const char *tenant, const char *key_id, unsigned v,
		      err_t *err)
{
	_cleanup_free_ char *dir = xasprintf("%s/%s", k->key_dir, tenant);
	_cleanup_free_ char *p = key_path(k, tenant, key_id, v);
	_cleanup_free_ char *tmp = NULL;
	struct dkey *kek;
	int fd, r;

	if ((r = mkdir_p(dir, 0700)) < 0) {
		errno = -r;
		return err_sys(err, "local key: create %s", dir);
	}
	(void)chmod(k->key_dir, 0700);
	(void)chmod(dir, 0700);
	/* Written whole under a temporary name, then linked into place: a
	 * node sharing the directory never reads a half-written key, and of
	 * two first uses at once, one key wins and both use it. */
	{
		/* random: two threads (or nodes) making it at once never share one */
		_cleanup_free_ char *rnd = random_id("", 8);
		tmp = xasprintf("%s.tmp-%s", p, rnd);
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return err_sys(err, "local key: create %s", tmp);
	kek = dkey_new();
	random_bytes(kek->k, CRYPT_KEY_LEN);
	r = write_all(fd, kek->k, CRYPT_KEY_LEN);
	dkey_free(kek);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	close(fd);
	if (r == 0 && link(tmp, p) < 0 && errno != EEXIST)
		r = -errno;
	unlink(tmp);
	if (r < 0) {
		errno = -r;
		return err_sys(err, "local key: write %s", p);
	}
	return 0;
}

static int key_load(struct kms *k, const char *tenant, const char *key_id, unsigned v,
		    struct dkey **out, err_t *err)
{
	_cleanup_free_ char *p = key_path(k, tenant, key_id, v);
	_cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct dkey *kek;
	struct stat st;
	int r;

	if (fd < 0)
		return errno == ENOENT ? err_set(err, ENOKEY, "local key %s v%u of tenant %s is "
						 "missing", key_id, v, tenant)
				       : err_sys(err, "local key: open %s", p);
	if (fstat(fd, &st) < 0)
		return err_sys(err, "local key: stat %s", p);
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) ||
	    st.st_size != CRYPT_KEY_LEN)
		return err_set(err, EPERM, "local key %s: not a 32-byte file of this daemon's user, "
			       "mode 0600", p);
	kek = dkey_new();
	if ((r = read_all(fd, kek->k, CRYPT_KEY_LEN)) < 0) {
		dkey_free(kek);
		errno = -r;
		return err_sys(err, "local key: read %s", p);
	}
	*out = kek;
	return 0;
}

static void wrap_aad(struct buf *a, const char *tenant, const char *key_id, unsigned v)
{
	buf_printf(a, "airlock-local-wrap-v1%c%s%c%s%c%u", 0, tenant, 0, key_id, 0, v);
}

static int gcm(bool enc, const struct dkey *kek, const uint8_t nonce[12], const struct buf *aad,
	       const uint8_t *in, uint8_t *out, uint8_t tag[16])
{
	EVP_CIPHER_CTX *cx = EVP_CIPHER_CTX_new();
	int len = 0, ok;

	if (!cx)
		abort();
	ok = EVP_CipherInit_ex(cx, EVP_aes_256_gcm(), NULL, kek->k, nonce, enc) == 1 &&
	     EVP_CipherUpdate(cx, NULL, &len, (const uint8_t *)aad->data, (int)aad->len) == 1 &&
	     EVP_CipherUpdate(cx, out, &len, in, CRYPT_KEY_LEN) == 1;
	if (ok && !enc)
		ok = EVP_CIPHER_CTX_ctrl(cx, EVP_CTRL_GCM_SET_TAG, 16, tag) == 1;
	if (ok)
		ok = EVP_CipherFinal_ex(cx, out + CRYPT_KEY_LEN, &len) == 1;
	if (ok && enc)
		ok = EVP_CIPHER_CTX_ctrl(cx, EVP_CTRL_GCM_GET_TAG, 16, tag) == 1;
	EVP_CIPHER_CTX_free(cx);
	return ok ? 0 : -EBADMSG;
}

static int local_wrap(struct kms *k, const char *tenant, const struct kms_conf *c,
		      const uint8_t dk[CRYPT_KEY_LEN], char **wrapped, err_t *err)
{
	uint8_t box[12 + CRYPT_KEY_LEN + 16];
	struct dkey *kek = NULL;
	_cleanup_free_ char *b64 = NULL;
	struct buf aad;
	unsigned v;
	int r;

	if ((r = names_check(tenant, c->key_id, err)) < 0)
		return r;
	/* first use: version 1 */
	if ((v = kms_local_version(k, tenant, c->key_id)) == 0) {
		if ((r = key_create(k, tenant, c->key_id, 1, err)) < 0)
			return r;
		v = 1;
	}
	if ((r = key_load(k, tenant, c->key_id, v, &kek, err)) < 0)
		return r;
	buf_init(&aad);
	wrap_aad(&aad, tenant, c->key_id, v);
	random_bytes(box, 12);
	r = gcm(true, kek, box, &aad, dk, box + 12, box + 12 + CRYPT_KEY_LEN);
	dkey_free(kek);
	buf_free(&aad);
	if (r < 0)
		return err_set(err, EIO, "local key: wrap failed");
	b64 = base64_encode(box, sizeof(box));
	*wrapped = xasprintf("local:v%u:%s", v, b64);
	return 0;
}

static int local_unwrap(struct kms *k, const char *tenant, const struct kms_conf *c,
			const char *wrapped, uint8_t dk[CRYPT_KEY_LEN], err_t *err)
{
	uint8_t plain[CRYPT_KEY_LEN + 16];
	struct dkey *kek = NULL;
	struct buf raw, aad;
	unsigned v = 0;
	int n = 0, r;

	if ((r = names_check(tenant, c->key_id, err)) < 0)
		return r;
	if (sscanf(wrapped, "local:v%u:%n", &v, &n) != 1 || n == 0 || v == 0)
		return err_set(err, EBADMSG, "not a local wrapping");
	buf_init(&raw);
	if (base64_decode(wrapped + n, strlen(wrapped + n), &raw) < 0 ||
	    raw.len != 12 + CRYPT_KEY_LEN + 16) {
		buf_free(&raw);
		return err_set(err, EBADMSG, "a malformed local wrapping");
	}
	if ((r = key_load(k, tenant, c->key_id, v, &kek, err)) < 0) {
		buf_free(&raw);
		return r;
	}
	buf_init(&aad);
	wrap_aad(&aad, tenant, c->key_id, v);
	r = gcm(false, kek, (uint8_t *)raw.data, &aad, (uint8_t *)raw.data + 12, plain,
		(uint8_t *)raw.data + 12 + CRYPT_KEY_LEN);
	dkey_free(kek);
	buf_free(&aad);
	buf_free(&raw);
	if (r == 0)
		memcpy(dk, plain, CRYPT_KEY_LEN);
	OPENSSL_cleanse(plain, sizeof(plain));
	if (r < 0)
		return err_set(err, EBADMSG, "the wrapping does not open under local key %s v%u of "
			       "tenant %s", c->key_id, v, tenant);
	return 0;
}

static int local_rewrap(struct kms *k, const char *tenant, const struct kms_conf *c,
			const char *wrapped, char **out, err_t *err)
{
	struct dkey *dk = dkey_new();
	int r = local_unwrap(k, tenant, c, wrapped, dk->k, err);

	if (r == 0)
		r = local_wrap(k, tenant, c, dk->k, out, err);
	dkey_free(dk);
	return r;
}

int kms_local_rotate(struct kms *k, const char *tenant, const char *key_id, unsigned *version,
		     err_t *err)
{
	unsigned v;
	int r;

	if ((r = names_check(tenant, key_id, err)) < 0)
		return r;
	v = kms_local_version(k, tenant, key_id) + 1;
	if ((r = key_create(k, tenant, key_id, v, err)) < 0)
		return r;
	*version = v;
	return 0;
}

const struct kms_provider kms_local = {
	.name = "local",
	.wrap = local_wrap,
	.unwrap = local_unwrap,
	.rewrap = local_rewrap,
};
