/* resource.h - the files shipped beside the programs. */
#ifndef AIRLOCK_RESOURCE_H
#define AIRLOCK_RESOURCE_H

/* A file shipped beside the programs ("airlock-guest", "scripts", "vm"):
 * PREFIX/lib/airlock/NAME when installed, else where a build tree has it;
 * found from this executable's path, so no build path is compiled in.
 * Caller owns the result. */
char *airlock_resource(const char *name);

#endif
