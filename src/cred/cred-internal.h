/* cred-internal.h - between cred.c and cred-transport.c; not for other
 * components (they use cred.h). */
#ifndef AIRLOCK_CRED_INTERNAL_H
#define AIRLOCK_CRED_INTERNAL_H

#include <stdbool.h>

#include "../lib/err.h"
#include "../lib/json.h"
#include "cred.h"

/* schemes and ports from an API body (either may be NULL: absent). Every
 * problem is a message in err (-EINVAL). */
int cred_transport_parse(const json *schemes, const json *ports, struct cred_transport *t,
			 err_t *err);
/* t's schemes (ports false) or ports (ports true) as a JSON array, as the
 * API shows them and the credentials table stores them. */
void cred_transport_write(struct jw *w, const struct cred_transport *t, bool ports);
/* The stored columns (either may be NULL) back into t. */
void cred_transport_read(const char *schemes, const char *ports, struct cred_transport *t);

#endif
