/* airlockd.h - the daemon entry points behind `airlockd <cmd>`. */
#ifndef AIRLOCKD_H
#define AIRLOCKD_H

#include "config.h"

/* Apply argv (after the subcommand) over cfg: --config is read first, then
 * the other flags, so flags win. */
int airlockd_parse_args(struct airlockd_config *cfg, int argc, char **argv, err_t *err);

int airlockd_up(const struct airlockd_config *cfg, err_t *err);
int airlockd_nodemgr(const struct airlockd_config *cfg, err_t *err);
int airlockd_node(const struct airlockd_config *cfg, err_t *err);
int airlockd_gateway(const struct airlockd_config *cfg, err_t *err);
int airlockd_api(const struct airlockd_config *cfg, err_t *err);

/* Paths under the data directory; caller owns the result. */
char *data_path(const struct airlockd_config *cfg, const char *rel);

#endif
