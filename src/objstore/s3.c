/* s3.c - the s3 driver (to follow). */
#include "objstore-internal.h"

#include <errno.h>

struct objstore *os_s3_open(const char *rest, const struct objstore_opts *opts, err_t *err)
{
	err_set(err, ENOTSUP, "objstore: the s3 driver is not built yet");
	return NULL;
}
