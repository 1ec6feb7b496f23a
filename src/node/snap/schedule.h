/* schedule.h - per-sandbox lifecycle policy and the scheduler pass (node).
 *
 * The policy comes from the create request, with the node's config as the
 * default, and is stored in the sandbox's spec row:
 *
 *   "snapshots": {"disk_interval_s", "full_interval_s",
 *                 "retention": {"keep_all_s", "keep_hourly_s", "keep_daily_s"}}
 *   "idle_timeout_s"      pause after this long without activity (0 = never)
 *   "on_timeout"          "delete" | "pause": what timeout_s does
 *
 * The scheduler runs on the reaper thread once a second (and on demand from
 * the debug clock endpoint). For each running sandbox it asks the guest for
 * its activity only when a decision is due (a snapshot interval passed, or
 * the idle timeout), takes scheduled disk snapshots through the same path as
 * POST .../snapshots, prunes scheduled snapshots by the retention tiers
 * (retention.h), and pauses idle sandboxes (reason "idle").
 *
 * Its clock is sched_now() (model/clock.c, with the TTL's accounting): wall
 * ms plus an offset that only the debug clock endpoint (config
 * debug_clock=true) moves, so tests cross days without sleeping. Snapshot
 * timestamps use the same clock. TTLs (timeout_s) use the wall clock.
 */
#ifndef AIRLOCK_NODE_SCHEDULE_H
#define AIRLOCK_NODE_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

#include "../../lib/json.h"
#include "../model/policy.h"
#include "retention.h"

struct node;
struct sandbox;
struct http_req;
struct http_conn;

/* The node's defaults (config) into *pol. */
void sched_policy_defaults(const struct node *n, struct sb_policy *pol);
/* Fields of a create body over *pol (after sched_policy_defaults). NULL, or the
 * error code for a 400 with msg filled. */
const char *sched_policy_parse(const json *body, struct sb_policy *pol, char *msg, size_t sz);
/* The policy as keys of the object being written (spec row, sandbox JSON). */
void sched_policy_render(struct jw *w, const struct sb_policy *pol);
/* From a stored spec object (missing keys keep *pol's values). */
void sched_policy_load(const json *spec, struct sb_policy *pol);

/* Start the once-a-second pass on the reaper (after reaper_start). */
void schedule_start(struct node *n);
/* The reaper's TIMER_SCHEDULE: one pass, then the next tick. */
void schedule_tick(struct node *n);
/* POST /v1/debug/clock {"advance_s"}: 404 unless config debug_clock. */
void handle_debug_clock(struct node *n, struct http_req *req, struct http_conn *c);

#endif
