/* readiness.h - how a daemon reports one component's readiness in JSON.
 *
 * The node writes these for what it depends on (GET /internal/ready,
 * node/ready-deps.c); the api reads them back, adds its own and writes the
 * same shape in GET /v1/ready (api/ready.c). One writer keeps both sides of
 * that contract the same. */
#ifndef AIRLOCK_READINESS_H
#define AIRLOCK_READINESS_H

#include "json.h"

/* `"name":{"status":status[,"error":error]}` inside an object being written
 * on w. status: "up", "down", "off" (configured away) or "unknown" (whoever
 * would have asked could not); error: why, or NULL. All borrowed. */
void readiness_component(struct jw *w, const char *name, const char *status, const char *error);

#endif
