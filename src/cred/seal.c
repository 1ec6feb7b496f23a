/* Sealed boxes: X25519 + HKDF-SHA256 + AES-256-GCM (OpenSSL EVP). */
#include "seal.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BOX_VERSION 1
#define NONCE_LEN 12
#define TAG_LEN 16
static const char hkdf_info[] = "airlock-vault-v1";

static int crypto_fail(err_t *err, const char *what)
{
	return err_set(err, EIO, "vault: %s failed", what);
}

static EVP_PKEY *pkey_private(const uint8_t priv[SEAL_KEY_LEN])
{
	return EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, NULL, priv, SEAL_KEY_LEN);
}

int seal_from_private(struct seal_key *k, const uint8_t priv[SEAL_KEY_LEN], err_t *err)
{
	EVP_PKEY *p = pkey_private(priv);
	size_t n = SEAL_KEY_LEN;
	int ok;

	if (!p)
		return crypto_fail(err, "loading the private key");
	ok = EVP_PKEY_get_raw_public_key(p, k->pub, &n) == 1 && n == SEAL_KEY_LEN;
	EVP_PKEY_free(p);
	if (!ok)
		return crypto_fail(err, "deriving the public key");
	memcpy(k->priv, priv, SEAL_KEY_LEN);
	k->have_priv = 1;
	return 0;
}

int seal_keygen(struct seal_key *k, err_t *err)
{
	uint8_t priv[SEAL_KEY_LEN];
	int r;

	random_bytes(priv, sizeof(priv));
	r = seal_from_private(k, priv, err);
	explicit_bzero(priv, sizeof(priv));
	return r;
}

/* AES key = HKDF(X25519(mine, theirs), salt = eph_pub || rcpt_pub). */
static int derive(const uint8_t mine[SEAL_KEY_LEN], const uint8_t theirs[SEAL_KEY_LEN],
		  const uint8_t eph_pub[SEAL_KEY_LEN], const uint8_t rcpt_pub[SEAL_KEY_LEN],
		  uint8_t key[32])
{
	EVP_PKEY *me = pkey_private(mine), *peer = NULL;
	EVP_PKEY_CTX *dctx = NULL, *kctx = NULL;
	uint8_t shared[SEAL_KEY_LEN], salt[2 * SEAL_KEY_LEN];
	size_t n = sizeof(shared), klen = 32;
	int ok = 0;

	peer = EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, NULL, theirs, SEAL_KEY_LEN);
	if (!me || !peer)
		goto out;
	dctx = EVP_PKEY_CTX_new(me, NULL);
	if (!dctx || EVP_PKEY_derive_init(dctx) != 1 || EVP_PKEY_derive_set_peer(dctx, peer) != 1 ||
	    EVP_PKEY_derive(dctx, shared, &n) != 1 || n != sizeof(shared))
		goto out;
	memcpy(salt, eph_pub, SEAL_KEY_LEN);
	memcpy(salt + SEAL_KEY_LEN, rcpt_pub, SEAL_KEY_LEN);
	kctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
	if (!kctx || EVP_PKEY_derive_init(kctx) != 1 ||
	    EVP_PKEY_CTX_set_hkdf_md(kctx, EVP_sha256()) != 1 ||
	    EVP_PKEY_CTX_set1_hkdf_salt(kctx, salt, sizeof(salt)) != 1 ||
	    EVP_PKEY_CTX_set1_hkdf_key(kctx, shared, sizeof(shared)) != 1 ||
	    EVP_PKEY_CTX_add1_hkdf_info(kctx, (const unsigned char *)hkdf_info,
					sizeof(hkdf_info) - 1) != 1 ||
	    EVP_PKEY_derive(kctx, key, &klen) != 1 || klen != 32)
		goto out;
	ok = 1;
out:
	explicit_bzero(shared, sizeof(shared));
	EVP_PKEY_CTX_free(kctx);
	EVP_PKEY_CTX_free(dctx);
	EVP_PKEY_free(peer);
	EVP_PKEY_free(me);
	return ok ? 0 : -EIO;
}

/* One AES-256-GCM pass; enc selects the direction. tag is written (enc) or
 * checked (!enc). Returns 0, or -EBADMSG when the tag does not match. */
static int gcm(int enc, const uint8_t key[32], const uint8_t nonce[NONCE_LEN], const void *aad,
	       size_t aad_len, const uint8_t *in, size_t n, uint8_t *out, uint8_t tag[TAG_LEN])
{
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	int len = 0, r = -EIO;

	if (!c || n > INT32_MAX || aad_len > INT32_MAX)
		goto out;
	if (EVP_CipherInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL, enc) != 1 ||
	    EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, NONCE_LEN, NULL) != 1 ||
	    EVP_CipherInit_ex(c, NULL, NULL, key, nonce, enc) != 1)
		goto out;
	if (aad_len && EVP_CipherUpdate(c, NULL, &len, aad, (int)aad_len) != 1)
		goto out;
	if (n && EVP_CipherUpdate(c, out, &len, in, (int)n) != 1)
		goto out;
	if (!enc && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, TAG_LEN, tag) != 1)
		goto out;
	if (EVP_CipherFinal_ex(c, out + len, &len) != 1) {
		r = enc ? -EIO : -EBADMSG;
		goto out;
	}
	if (enc && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, TAG_LEN, tag) != 1)
		goto out;
	r = 0;
out:
	EVP_CIPHER_CTX_free(c);
	return r;
}

int seal_box(const struct seal_key *k, const void *aad, size_t aad_len, const void *plain,
	     size_t n, struct buf *out, err_t *err)
{
	struct seal_key eph;
	uint8_t key[32], nonce[NONCE_LEN], tag[TAG_LEN];
	_cleanup_free_ uint8_t *ct = xmalloc(n ? n : 1);
	uint8_t ver = BOX_VERSION;
	int r;

	r = seal_keygen(&eph, err);
	if (r < 0)
		return r;
	if (derive(eph.priv, k->pub, eph.pub, k->pub, key) < 0) {
		explicit_bzero(&eph, sizeof(eph));
		return crypto_fail(err, "key agreement");
	}
	explicit_bzero(&eph.priv, sizeof(eph.priv));
	random_bytes(nonce, sizeof(nonce));
	r = gcm(1, key, nonce, aad, aad_len, plain, n, ct, tag);
	explicit_bzero(key, sizeof(key));
	if (r < 0)
		return crypto_fail(err, "encryption");
	buf_add(out, &ver, 1);
	buf_add(out, eph.pub, SEAL_KEY_LEN);
	buf_add(out, nonce, NONCE_LEN);
	buf_add(out, ct, n);
	buf_add(out, tag, TAG_LEN);
	return 0;
}

int seal_open(const struct seal_key *k, const void *aad, size_t aad_len, const void *box,
	      size_t n, struct buf *out, err_t *err)
{
	const uint8_t *b = box, *eph_pub, *nonce, *ct;
	uint8_t key[32], tag[TAG_LEN];
	_cleanup_free_ uint8_t *pt = NULL;
	size_t ct_len;
	int r;

	if (!k->have_priv)
		return err_set(err, ENOKEY, "vault: this process holds no private key");
	if (n < SEAL_OVERHEAD || b[0] != BOX_VERSION)
		return err_set(err, EBADMSG, "vault: malformed box");
	eph_pub = b + 1;
	nonce = eph_pub + SEAL_KEY_LEN;
	ct = nonce + NONCE_LEN;
	ct_len = n - SEAL_OVERHEAD;
	memcpy(tag, ct + ct_len, TAG_LEN);
	if (derive(k->priv, eph_pub, eph_pub, k->pub, key) < 0)
		return err_set(err, EBADMSG, "vault: malformed box");
	pt = xmalloc(ct_len ? ct_len : 1);
	r = gcm(0, key, nonce, aad, aad_len, ct, ct_len, pt, tag);
	explicit_bzero(key, sizeof(key));
	if (r < 0) {
		explicit_bzero(pt, ct_len);
		return err_set(err, EBADMSG, "vault: box does not open (wrong key, record or tampered)");
	}
	buf_add(out, pt, ct_len);
	explicit_bzero(pt, ct_len);
	return 0;
}

static int load_raw(const char *path, uint8_t key[SEAL_KEY_LEN], err_t *err)
{
	struct buf b;
	int r;

	buf_init(&b);
	r = read_file(path, SEAL_KEY_LEN + 1, &b);
	if (r < 0) {
		buf_free(&b);
		errno = -r;
		return err_sys(err, "vault: cannot read key `%s`", path);
	}
	if (b.len != SEAL_KEY_LEN) {
		explicit_bzero(b.data, b.len);
		buf_free(&b);
		return err_set(err, EINVAL, "vault: key `%s` is not %d bytes", path, SEAL_KEY_LEN);
	}
	memcpy(key, b.data, SEAL_KEY_LEN);
	explicit_bzero(b.data, b.len);
	buf_free(&b);
	return 0;
}

int seal_key_load_public(struct seal_key *k, const char *path, err_t *err)
{
	memset(k, 0, sizeof(*k));
	return load_raw(path, k->pub, err);
}

int seal_key_load_private(struct seal_key *k, const char *path, err_t *err)
{
	uint8_t priv[SEAL_KEY_LEN];
	int r;

	memset(k, 0, sizeof(*k));
	r = load_raw(path, priv, err);
	if (r == 0)
		r = seal_from_private(k, priv, err);
	explicit_bzero(priv, sizeof(priv));
	return r;
}

int seal_key_ensure(struct seal_key *k, const char *priv_path, const char *pub_path, err_t *err)
{
	_cleanup_free_ char *dir = xstrdup(priv_path);
	char *slash = strrchr(dir, '/');
	int r;

	if (slash && slash != dir) {
		*slash = '\0';
		r = mkdir_p(dir, 0700);
		if (r < 0) {
			errno = -r;
			return err_sys(err, "vault: cannot create `%s`", dir);
		}
	}
	if (access(priv_path, F_OK) == 0) {
		r = seal_key_load_private(k, priv_path, err);
	} else {
		r = seal_keygen(k, err);
		if (r == 0 && (r = write_file(priv_path, k->priv, SEAL_KEY_LEN, 0600)) < 0) {
			errno = -r;
			r = err_sys(err, "vault: cannot write `%s`", priv_path);
		}
	}
	if (r < 0)
		return r;
	r = write_file(pub_path, k->pub, SEAL_KEY_LEN, 0644);
	if (r < 0) {
		errno = -r;
		return err_sys(err, "vault: cannot write `%s`", pub_path);
	}
	return 0;
}
