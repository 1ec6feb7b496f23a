/* sigv4.h - AWS Signature Version 4 (header form), in the three steps AWS
 * documents so each can be tested on its own against AWS's published test
 * suite (tests/unit/test-objstore-sigv4.c): the canonical request, the
 * string to sign, the signature. No network, no clock: the caller passes
 * the time. Internal to src/objstore. */
#ifndef AIRLOCK_OBJSTORE_SIGV4_H
#define AIRLOCK_OBJSTORE_SIGV4_H

#include <stddef.h>

#include "../lib/util.h"

struct sigv4_header {
	const char *name;    /* any case; borrowed */
	const char *value;   /* as sent; borrowed */
};

struct sigv4_req {
	const char *method;
	const char *path;          /* unencoded ("/bucket/a b"); encoded here, S3 style */
	const char *query;         /* as sent, pairs already encoded; "" or NULL: none */
	const struct sigv4_header *headers;  /* every header to sign, host included */
	size_t n_headers;
	const char *payload_hash;  /* hex SHA-256 of the body (or UNSIGNED-PAYLOAD) */
};

struct sigv4_scope {
	const char *access_key, *secret_key;
	const char *region, *service;
	const char *amz_date;      /* "YYYYMMDDTHHMMSSZ" */
};

/* Percent-encode s as AWS wants: every byte but A-Z a-z 0-9 - . _ ~ (and
 * '/' unless encode_slash) as %XX with upper-case hex. Appends to out. */
void sigv4_uri_encode(const char *s, int encode_slash, struct buf *out);

/* The canonical request into creq (reset first) and the ';'-joined signed
 * header names into signed_headers (reset first). Header names are lower-
 * cased and sorted, values trimmed with inner runs of spaces made one, and
 * repeated names joined with ','; query pairs are sorted by name, then value. */
void sigv4_canonical_request(const struct sigv4_req *r, struct buf *creq,
			     struct buf *signed_headers);
/* "AWS4-HMAC-SHA256\nDATE\nSCOPE\nhex(sha256(creq))" into sts (reset first). */
void sigv4_string_to_sign(const struct sigv4_scope *s, const char *creq, struct buf *sts);
/* hex HMAC of sts under the key derived from secret, date, region, service. */
void sigv4_signature(const struct sigv4_scope *s, const char *sts, char hex[65]);
/* The Authorization header's value for r. Caller owns. */
char *sigv4_authorization(const struct sigv4_scope *s, const struct sigv4_req *r);

#endif
