/* limits.h - the room node/limits (limits.c): limits that bite are events.
 *
 * A sandbox's cgroup counts the processes the kernel's OOM killer ended and
 * the forks refused at its pids limit (nodemgr's NM_SANDBOX_LIMITS). The
 * node polls them for every sandbox at once on the reaper (TIMER_LIMITS,
 * every LIMITS_POLL_MS), adds what rose to the sandbox's counts
 * ("limits_hit" in its JSON, kept in its row's spec) and to the node's
 * counters (GET /metrics), and writes an event row per kind: the first rise
 * at the next poll, later ones coalesced to at most one row per kind per
 * LIMITS_EVENT_MS, however often a tenant hits them. */
#ifndef AIRLOCK_NODE_LIMITS_H
#define AIRLOCK_NODE_LIMITS_H

#include "../model/model.h"

#define LIMITS_POLL_MS 2000
#define LIMITS_EVENT_MS 30000

/* The event kinds (events.kind) and their names in the API. */
const char *limits_kind_name(enum sb_limit_kind k);

/* Its keys of a sandbox's JSON ("limits_hit") and its fields of a loaded
 * row; node_start registers it. */
extern const struct sandbox_feature limits_feature;

/* Arm the first TIMER_LIMITS; the reaper's TIMER_LIMITS: one poll, then the
 * next. */
void limits_start(struct node *n);
void limits_tick(struct node *n);

/* A spec row's text without the counts (*spec replaced; caller owns): a
 * fork's children copy their parent's spec, not what it hit. */
void limits_spec_forget(char **spec);

/* The guest channel of sandbox id closed by itself: why, for its event and
 * failure. When its jail's init was SIGKILLed right after an OOM kill in
 * its cgroup (the kernel chose the init: ns, the guest agent; vm, QEMU),
 * "out of memory: ..."; otherwise "guest channel closed". The counts are
 * taken as for a poll. */
void limits_why_closed(struct node *n, const char *id, char *why, size_t sz);

#endif
