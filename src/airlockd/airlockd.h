/* airlockd.h - the daemon entry points behind `airlockd <cmd>`. */
#ifndef AIRLOCKD_H
#define AIRLOCKD_H

#include <sys/types.h>

#include "config.h"

/* Apply argv (after the subcommand) over cfg: --config is read first, then
 * the other flags, so flags win. */
int airlockd_parse_args(struct airlockd_config *cfg, int argc, char **argv, err_t *err);

/* The roles `up` forks wipe the secrets they do not use from their copies
 * of cfg (config_keep_secrets); `up`'s own stays whole, for restarts. */
int airlockd_up(struct airlockd_config *cfg, err_t *err);
int airlockd_nodemgr(const struct airlockd_config *cfg, err_t *err);
int airlockd_node(const struct airlockd_config *cfg, err_t *err);
int airlockd_gateway(const struct airlockd_config *cfg, err_t *err);
int airlockd_api(const struct airlockd_config *cfg, err_t *err);

/* The daemons' users (users.c). */
extern pid_t airlockd_supervisor;   /* the `up` process of a role it spawned; else 0 */
int lookup_user(const char *name, uid_t *uid, gid_t *gid, err_t *err);
int ensure_user(const char *name, err_t *err);          /* useradd when missing (root) */
const char *gateway_user(const struct airlockd_config *cfg, char buf[64]);
const char *api_user(const struct airlockd_config *cfg, char buf[64]);
int shared_group(const struct airlockd_config *cfg, gid_t *gid, err_t *err);
struct peer_uids;
int role_uids(const struct airlockd_config *cfg, struct peer_uids *out, err_t *err);
int drop_privileges(const char *user, gid_t extra_group, err_t *err);
int check_data_dir_reachable(const struct airlockd_config *cfg, const char *user,
			     gid_t extra_gid, err_t *err);

/* Paths under the data directory; caller owns the result. */
char *data_path(const struct airlockd_config *cfg, const char *rel);

#endif
