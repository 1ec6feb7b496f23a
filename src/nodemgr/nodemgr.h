/* nodemgr.h - the node manager daemon (`airlockd nodemgr`), the only root
 * process. main() fills a config (core/config.h) and calls nodemgr_run; the
 * client side of its socket is nm.h. */
#ifndef AIRLOCK_NODEMGR_H
#define AIRLOCK_NODEMGR_H

#include "../lib/err.h"
#include "core/config.h"

/* Ensure the pool, clean up leftovers of a previous run (kill processes in
 * stale jail cgroups; subvolumes are kept), listen, and serve until SIGTERM
 * or SIGINT. Then kill every jail (keeping its subvolume) and return 0.
 * Blocks SIGCHLD/SIGTERM/SIGINT in the calling thread while it runs (signals
 * are read with a signalfd) and makes the process a child subreaper. */
int nodemgr_run(const struct nodemgr_config *cfg, err_t *err);

#endif
