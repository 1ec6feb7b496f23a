/* secret.h - secrets that come from files: a `*_file` setting, a systemd
 * credential ($CREDENTIALS_DIRECTORY/<name>), and the check that a config
 * file holding a secret is not readable by others.
 *
 * What counts as a secret setting is said once, by secret_setting_holds:
 * airlockd warns with it at start and `airlock doctor` reports with it. */
#ifndef AIRLOCK_SECRET_H
#define AIRLOCK_SECRET_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

/* Read the secret in the file at path into out (cap bytes with the NUL).
 * The file must be a regular file that others can neither read nor write
 * (a secret anyone can read is no secret; one anyone can write is not the
 * operator's), hold one non-empty line (one trailing "\n" or "\r\n" is
 * stripped; no NUL) and fit. out is written only on success; every copy of
 * the bytes this function made is wiped before it returns. */
int secret_read_file(const char *path, char *out, size_t cap, err_t *err);

/* A systemd credential (LoadCredential=, SetCredentialEncrypted=, ...):
 * the file `name` in $CREDENTIALS_DIRECTORY, read as secret_read_file
 * reads. Returns 1 when read, 0 when there is none (no directory, or no
 * such file in it), or -errno. */
int secret_read_credential(const char *name, char *out, size_t cap, err_t *err);

/* Does the setting `key = val` of airlockd's config hold a secret? The S3
 * keys when set, and `db` when its PostgreSQL URL or conninfo names a
 * password. */
bool secret_setting_holds(const char *key, const char *val);

enum secret_exposure {
	SECRET_NOT_EXPOSED = 0,
	SECRET_GROUP_READABLE,   /* by a group other than root's */
	SECRET_WORLD_READABLE,
};
/* Is the config file at path holding a secret (secret_setting_holds, on
 * any `key = value` line) readable by others? why gets a sentence naming
 * the key and the mode when it is. A file this process cannot read (not
 * there, or not ours to read) is SECRET_NOT_EXPOSED: whoever can read it
 * reports it. */
enum secret_exposure secret_config_exposure(const char *path, char *why, size_t cap);

#endif
