/* The local vault: sealed boxes, base64 in the vault_secrets table. */
#include "vault.h"

#include <errno.h>
#include <string.h>

#include "../lib/secmem.h"

static int local_put(struct vault *v, const char *ref, const void *secret, size_t n, err_t *err)
{
	_cleanup_free_ char *b64 = NULL;
	struct buf box;
	int r;

	buf_init(&box);
	r = seal_box(&v->key, ref, strlen(ref), secret, n, &box, err);
	if (r == 0) {
		b64 = base64_encode(box.data, box.len);
		r = db_exec(v->db, err,
			    "INSERT INTO vault_secrets(ref, box, created_at) VALUES(?, ?, ?)", "ssi",
			    ref, b64, wall_ms());
	}
	buf_free(&box);
	return r < 0 ? r : 0;
}

static int local_get(struct vault *v, const char *ref, struct buf *out, err_t *err)
{
	struct db_rows rows;
	struct buf box;
	const char *b64;
	int r;

	if (!v->key.have_priv)
		return err_set(err, ENOKEY, "vault: this process may store secrets but not read them");
	r = db_query(v->db, &rows, err, "SELECT box FROM vault_secrets WHERE ref = ?", "s", ref);
	if (r < 0)
		return r;
	if (rows.n_rows == 0 || !(b64 = db_cell(&rows, 0, 0))) {
		db_rows_free(&rows);
		return err_set(err, ENOENT, "vault: no secret `%s`", ref);
	}
	buf_init(&box);
	if (base64_decode(b64, strlen(b64), &box) < 0)
		r = err_set(err, EBADMSG, "vault: secret `%s` is not valid base64", ref);
	else
		r = seal_open(&v->key, ref, strlen(ref), box.data, box.len, out, err);
	buf_free(&box);
	db_rows_free(&rows);
	return r;
}

static int local_del(struct vault *v, const char *ref, err_t *err)
{
	int r = db_exec(v->db, err, "DELETE FROM vault_secrets WHERE ref = ?", "s", ref);

	return r < 0 ? r : 0;
}

static void local_close(struct vault *v)
{
	secmem_free(v, sizeof(*v));  /* wipes the key */
}

static const struct vault_ops local_ops = {
	.name = "local", .put = local_put, .get = local_get, .del = local_del, .close = local_close,
};

struct vault *vault_local_open(struct db *db, const struct seal_key *key)
{
	/* Locked, out of core dumps: it may hold the private key. */
	struct vault *v = secmem_alloc(sizeof(*v));

	v->ops = &local_ops;
	v->db = db;
	v->key = *key;
	return v;
}

void vault_close(struct vault *v)
{
	if (v)
		v->ops->close(v);
}
