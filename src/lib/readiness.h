/* readiness.h - whether a daemon answers, and how one reports a component's
 * readiness in JSON.
 *
 * The node writes these for what it depends on (GET /internal/ready,
 * node/ready-deps.c); the api reads them back, adds its own and writes the
 * same shape in GET /v1/ready (api/ready.c). One writer keeps both sides of
 * that contract the same. */
#ifndef AIRLOCK_READINESS_H
#define AIRLOCK_READINESS_H

#include "err.h"
#include "json.h"

/* `"name":{"status":status[,"error":error]}` inside an object being written
 * on w. status: "up", "down", "off" (configured away) or "unknown" (whoever
 * would have asked could not); error: why, or NULL. All borrowed. */
void readiness_component(struct jw *w, const char *name, const char *status, const char *error);

/* Does an HTTP server answer at base ("unix:PATH" or "http://host:port")
 * now: it accepted a connection, read GET target and sent a status line,
 * whatever the status. A socket file nobody listens on (what a killed
 * server leaves behind) is refused at connect, so it never counts; nor
 * does a server that accepts but stalls past timeout_ms. 0, or -errno with
 * err filled. */
int readiness_http_answers(const char *base, const char *target, int timeout_ms, err_t *err);

#endif
