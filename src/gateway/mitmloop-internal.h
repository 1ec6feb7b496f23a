/* mitmloop-internal.h - shared by the interception loop's two files only:
 * mitmloop.c (the shards and hook threads, a connection's start, its
 * deadlines and its end) and mitmloop-phases.c (what a connection does in
 * each phase, and its upstream side). */
#ifndef AIRLOCK_MITMLOOP_INTERNAL_H
#define AIRLOCK_MITMLOOP_INTERNAL_H

#include <openssl/ssl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "../lib/util.h"
#include "inject.h"
#include "mitm-internal.h"
#include "mitmloop.h"

enum phase {
	P_ACCEPT,      /* TLS with the sandbox */
	P_HEAD,        /* its request head */
	P_BODY,        /* a body read whole (Content-Length or chunked) */
	P_HOOK,        /* the credential hook, on a hook thread */
	P_UPSTREAM,    /* the upstream side (below), if it is not ready yet */
	P_SEND,        /* the request upstream */
	P_STREAM,      /* a large body with replacements, streamed */
	P_RELAY,       /* to the relay loop */
	P_DONE,        /* over: freed at the end of the loop's turn */
};

/* The upstream side goes on alongside the phases up to P_UPSTREAM: the
 * connect, then TLS (verified), so neither adds its round trips to the
 * request's once the hook is done. */
enum up_state { U_CONNECTING, U_TLS, U_READY, U_UNREACHABLE, U_UNVERIFIED };

/* H_DONE: the hook thread gave it back (on the shard's hooked list);
 * H_BACK: the loop took it from there. */
enum hook_state { H_NONE, H_QUEUED, H_RUNNING, H_DONE, H_BACK };

struct shard;

struct mconn {
	struct mconn *next, *prev;    /* the shard's */
	struct mconn *hnext;          /* the hook queue's, then the shard's hooked list */
	struct shard *sh;
	struct mitm_conn_spec spec;   /* prefix and host point into this struct's copies */
	char *host;
	SSL *cs, *us;
	struct pbio *pb;              /* cs's BIO data, with the prefix after it */
	int cfd, ufd;
	enum phase phase;
	uint64_t deadline;            /* of the phase, now_ms() */
	uint64_t dial_deadline;
	enum up_state up;
	uint64_t up_deadline;         /* of U_TLS */
	uint32_t up_want;             /* what SSL_connect wants */
	char up_why[512];             /* why U_UNVERIFIED */
	uint32_t cev, uev;            /* epoll events armed */
	bool creg, ureg;              /* the fd is in the epoll set */
	uint32_t cwant, uwant;        /* what the last SSL calls want */
	/* the request */
	struct buf hb;
	struct http_head h;
	long hl, body_len;
	size_t rest;
	enum body_kind kind;
	struct dechunk d;
	/* the hook (under the loop's hook mutex while queued or running) */
	enum hook_state hs;
	int hook_r;
	struct buf reply;
	/* upstream: out[out_off, len) still to write */
	struct buf out;
	size_t out_off;
	/* streaming a large body */
	struct subst_stream ss;
	bool ss_on, stream_fin;
	uint64_t got;
	size_t take;
	int r;
	char why[256];
};

struct shard {
	struct mitm_loop *l;
	int ep, efd;
	pthread_mutex_t mu;
	struct mconn *incoming;       /* under mu */
	struct mconn *hooked;         /* under mu: back from the hook */
	struct mconn *conns;          /* the loop's */
	struct mconn *dead;           /* over: freed after this turn's events */
};

struct mitm_loop {
	struct tls_loop *relay;
	struct shard *sh;
	unsigned n_sh, next_sh;       /* next_sh: atomic */
	pthread_mutex_t hmu;
	pthread_cond_t hcv;
	struct mconn *hq_head, *hq_tail;
	unsigned n;                   /* atomic: connections being set up */
	int io_ms, connect_ms;        /* the deadlines */
};

/* mitmloop-phases.c */

/* Run c's current phase, P_ACCEPT to P_STREAM: 1 go on (next phase), 0
 * wait (cwant and uwant say for what), -1 over (c->r and c->why set). */
int mconn_step(struct mconn *c);
/* The upstream side's next steps, as far as they go now (connect, then
 * the verified handshake); never ends the connection itself. */
void mconn_up_progress(struct mconn *c);
/* The upstream handshake failed or timed out: U_UNVERIFIED, with why. */
void mconn_up_unverified(struct mconn *c);
/* A chunked body not read whole after all: it passes untouched (P_HOOK). */
void mconn_chunked_pass(struct mconn *c);
/* Record how c ends: r for the end callback and the reason (a log line,
 * "mitm: ..."); returns -1, a phase's "over". */
int mconn_fail(struct mconn *c, int r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
