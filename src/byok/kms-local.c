/* kms-local.c - the local key provider: the tenant's key as files under
 * the node's data dir, DATA/keys/<tenant>/<key_id>.v<N> (kms.h).
 *
 * Each version is 32 random bytes, created 0600 in a 0700 directory by the
 * daemon that uses it (so owned by its user, readable by no other); a file
 * that is not ours or is readable by others is refused. A data key is
 * wrapped as "local:v<N>:" base64(nonce 12 | AES-256-GCM ciphertext 32 |
 * tag 16), the AAD binding tenant, key id and version: a wrapping moved to
 * another tenant or key does not open.
 *
 * Rotation makes version N+1, rewraps every data key under it, then
 * retires the older versions (kms_local_retire): their files are deleted
 * once no data key is wrapped under them, so a key file that leaked
 * before a rotation opens nothing written or rewrapped after it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../db/db.h"
#include "../lib/ident.h"
#include "kms.h"

#define LOCAL_VERSIONS_MAX 100000
#define RETIRING 0x80000000u   /* kms_local_retire: a version found renamed already */

static char *key_path(struct kms *k, const char *tenant, const char *key_id, unsigned v)
{
	return xasprintf("%s/%s/%s.v%u", k->key_dir, tenant, key_id, v);
}

/* A version being retired: renamed first, deleted once nothing needs it. */
static char *retiring_path(struct kms *k, const char *tenant, const char *key_id, unsigned v)
{
	return xasprintf("%s/%s/%s.v%u.retiring", k->key_dir, tenant, key_id, v);
}

/* The version a file name "<key_id>.v<N>" names, else 0. */
static unsigned name_version(const char *name, const char *key_id)
{
	size_t kl = strlen(key_id);
	unsigned long v;
	char *end;

	if (strncmp(name, key_id, kl) != 0 || strncmp(name + kl, ".v", 2) != 0 ||
	    name[kl + 2] < '1' || name[kl + 2] > '9')
		return 0;
	errno = 0;
	v = strtoul(name + kl + 2, &end, 10);
	if (errno || *end || v > LOCAL_VERSIONS_MAX)
		return 0;
	return (unsigned)v;
}

static int names_check(const char *tenant, const char *key_id, err_t *err)
{
	if (!ident_key_ok(tenant, CRYPT_NAME_MAX) || !ident_key_ok(key_id, 64))
		return err_set(err, EINVAL, "local key: bad tenant or key id");
	return 0;
}

/* The highest version with a file: older ones may be retired (gone), so
 * the versions present are not 1..N. */
unsigned kms_local_version(struct kms *k, const char *tenant, const char *key_id)
{
	_cleanup_free_ char *dir = NULL;
	struct dirent *e;
	unsigned v = 0;
	DIR *d;

	if (!ident_key_ok(tenant, CRYPT_NAME_MAX) || !ident_key_ok(key_id, 64))
		return 0;
	dir = xasprintf("%s/%s", k->key_dir, tenant);
	if (!(d = opendir(dir)))
		return 0;
	while ((e = readdir(d))) {
		unsigned n = name_version(e->d_name, key_id);
		if (n > v)
			v = n;
	}
	closedir(d);
	return v;
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

	/* being retired: a reader in the meantime still opens its data key */
	if (fd < 0 && errno == ENOENT) {
		free(p);
		p = retiring_path(k, tenant, key_id, v);
		fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	}
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
	/* The newest version (first use: version 1); once more if a rotation
	 * retired the one read in between. */
	for (int tries = 0;; tries++) {
		if ((v = kms_local_version(k, tenant, c->key_id)) == 0) {
			if ((r = key_create(k, tenant, c->key_id, 1, err)) < 0)
				return r;
			v = 1;
		}
		if ((r = key_load(k, tenant, c->key_id, v, &kek, err)) == 0)
			break;
		if (r != -ENOKEY || tries > 0)
			return r;
		err_clear(err);
	}
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

unsigned kms_local_wrapped_version(const char *wrapped)
{
	unsigned v = 0;
	int n = 0;

	if (!wrapped || sscanf(wrapped, "local:v%u:%n", &v, &n) != 1 || n == 0)
		return 0;
	return v;
}

bool kms_local_live(struct kms *k, const char *tenant, const char *key_id, const char *wrapped)
{
	unsigned v = kms_local_wrapped_version(wrapped);
	_cleanup_free_ char *p = NULL;
	struct stat st;

	if (v == 0 || !ident_key_ok(tenant, CRYPT_NAME_MAX) || !ident_key_ok(key_id, 64))
		return false;
	p = key_path(k, tenant, key_id, v);
	return lstat(p, &st) == 0;
}

/* Put the versions renamed for retirement back (a rewrap failed). */
static void unretire(struct kms *k, const char *tenant, const char *key_id,
		     const unsigned *vs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		_cleanup_free_ char *from = retiring_path(k, tenant, key_id, vs[i]);
		_cleanup_free_ char *to = key_path(k, tenant, key_id, vs[i]);
		(void)rename(from, to);
	}
}

int kms_local_retire(struct kms *k, const char *tenant, const struct kms_conf *c,
		     unsigned *retired, err_t *err)
{
	_cleanup_free_ char *dir = NULL;
	_cleanup_free_ unsigned *vs = NULL;
	size_t nv = 0, cap = 0;
	unsigned newest;
	struct db_rows rows;
	struct dirent *e;
	DIR *d;
	int r;

	*retired = 0;
	if ((r = names_check(tenant, c->key_id, err)) < 0)
		return r;
	if ((newest = kms_local_version(k, tenant, c->key_id)) == 0)
		return 0;
	dir = xasprintf("%s/%s", k->key_dir, tenant);
	if (!(d = opendir(dir)))
		return err_sys(err, "local key: open %s", dir);
	while ((e = readdir(d))) {
		unsigned v = name_version(e->d_name, c->key_id);
		size_t l = strlen(e->d_name);

		/* one left renamed by a retirement that did not finish (a
		 * crash): retired again, its rename done */
		if (v == 0 && l > 9 && strcmp(e->d_name + l - 9, ".retiring") == 0) {
			_cleanup_free_ char *base = xstrndup(e->d_name, l - 9);
			if ((v = name_version(base, c->key_id)) && v < newest)
				v |= RETIRING;
		}
		if (v == 0 || (v & ~RETIRING) >= newest)
			continue;
		if (nv == cap) {
			cap = cap ? 2 * cap : 4;
			vs = xrealloc(vs, cap * sizeof(*vs));
		}
		vs[nv++] = v;
	}
	closedir(d);
	/* 1. Out of use first: a data key made from here on (kms_data_key_new
	 * checks its version is live after its row is in) is rewrapped by its
	 * maker, and one whose check saw the old file live was in the table
	 * before this rename, so the scan below finds it. */
	for (size_t i = 0; i < nv; i++) {
		_cleanup_free_ char *from = NULL, *to = NULL;

		if (vs[i] & RETIRING) {
			vs[i] &= ~RETIRING;
			continue;
		}
		from = key_path(k, tenant, c->key_id, vs[i]);
		to = retiring_path(k, tenant, c->key_id, vs[i]);
		if (rename(from, to) < 0) {
			r = err_sys(err, "local key: retire %s", from);
			unretire(k, tenant, c->key_id, vs, i);
			return r;
		}
	}
	/* 2. Every data key still under an older version, rewrapped (the
	 * retiring files still open them). */
	r = db_query(k->db, &rows, err,
		     "SELECT id, wrapped FROM data_keys WHERE tenant_id=? AND provider='local'", "s",
		     tenant);
	if (r < 0) {
		unretire(k, tenant, c->key_id, vs, nv);
		return r;
	}
	for (int i = 0; r >= 0 && i < rows.n_rows; i++) {
		_cleanup_free_ char *out = NULL;
		const char *w = db_cell(&rows, i, 1);

		if (kms_local_wrapped_version(w) >= newest)
			continue;
		r = local_rewrap(k, tenant, c, w, &out, err);
		if (r >= 0)
			r = db_exec(k->db, err,
				    "UPDATE data_keys SET wrapped=? WHERE id=? AND wrapped=?", "sss",
				    out, db_cell(&rows, i, 0), w);
		if (r < 0)
			err_wrap(err, "rewrap data key %.8s…", db_cell(&rows, i, 0));
	}
	db_rows_free(&rows);
	if (r < 0) {
		unretire(k, tenant, c->key_id, vs, nv);
		return r;
	}
	/* 3. Nothing is wrapped under them any more: their material goes. */
	for (size_t i = 0; i < nv; i++) {
		_cleanup_free_ char *p = retiring_path(k, tenant, c->key_id, vs[i]);
		if (unlink(p) < 0 && errno != ENOENT)
			return err_sys(err, "local key: delete %s", p);
		(*retired)++;
	}
	return 0;
}

const struct kms_provider kms_local = {
	.name = "local",
	.wrap = local_wrap,
	.unwrap = local_unwrap,
	.rewrap = local_rewrap,
};
