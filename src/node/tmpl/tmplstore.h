/* tmplstore.h - the room node/tmpl (tmplstore.c): template versions and
 * vm memory bases in the object store, so that sandboxes move between
 * nodes; the publisher thread. Above the model and node/cluster. */
#ifndef AIRLOCK_NODE_TMPLSTORE_H
#define AIRLOCK_NODE_TMPLSTORE_H

#include "../model/model.h"

/* publish: make sure template name/version is in the object
 * store (the first call uploads its full stream), *uuid its identity.
 * fetch: the local version of name whose identity is uuid, downloaded and
 * received first when there is none (one download per identity at a time);
 * sha (may be NULL or ""): the stream's SHA-256 the manifest names, checked. */
int tmplstore_publish(struct node *n, const char *name, uint32_t version, char uuid[37],
		      char sha[65], err_t *err);
int tmplstore_fetch(struct node *n, const char *name, const char *uuid, const char *sha,
		    uint32_t *version, err_t *err);
/* The publisher (when there is an object store): queue a template
 * version (a build just became ready) or the memory base of a vm spec's
 * template and shape (a vm sandbox was created from it) for upload off the
 * request path; each is published at most once (a HEAD when it is there).
 * start also queues every ready version this node has not published. */
void tmplstore_start(struct node *n);
void tmplstore_stop(struct node *n);
void tmplstore_queue_template(struct node *n, const char *name, uint32_t version);
void tmplstore_queue_base(struct node *n, const struct nm_sandbox_spec *spec);
/* vm memory bases: publish: make sure the RAM file a vm
 * memory artifact of spec's template and shape is a difference from is in
 * the store (want: its SHA-256 as the export answered; NULL: the template's
 * current one), sha its digest, osha and osize the object's. fetch: make
 * sure the base sha is here (nodemgr's template file or its cache),
 * downloading the object, which must be osize bytes with SHA-256 osha, into
 * nodemgr's cache first (one download per base at a time). */
int membase_publish(struct node *n, const struct nm_sandbox_spec *spec, const char *want,
		    char sha[65], char osha[65], uint64_t *osize, err_t *err);
int membase_fetch(struct node *n, const struct nm_sandbox_spec *spec, const char *sha,
		  const char *osha, uint64_t osize, err_t *err);

#endif
