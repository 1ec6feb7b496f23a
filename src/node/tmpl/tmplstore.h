/* tmplstore.h - the room node/tmpl: templates (templates.c: resolve,
 * build, list, delete; their image defaults), and template versions and
 * vm memory bases in the object store, so that sandboxes move between
 * nodes, with the publisher thread (tmplstore.c). Above the model,
 * node/cluster and node/http. */
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

/* templates.c */
/* Newest ready version of name; builds a built-in (debian, busybox, desktop) on
 * demand, sharing one build among concurrent callers. -ENOENT if unknown. */
int template_resolve(struct node *n, const char *name, uint32_t *version, err_t *err);
/* The image defaults of template name/version (a build from an image
 * records them; docs/DESIGN.md "Templates from OCI images"), checked: an
 * object with "env" (object of strings), "workdir" (absolute path), "user"
 * (name or uid[:gid]), "entrypoint" and "cmd" (arrays of strings), each
 * optional. *out is a copy the caller owns, NULL when there are none.
 * Asked of nodemgr once per version, then cached. */
int template_image_config(struct node *n, const char *name, uint32_t version, json **out,
			  err_t *err);
/* admin: show the templates' sources and errors (host paths) too. */
void handle_templates_list(struct node *n, struct http_req *req, struct http_conn *c,
			   bool admin);
void handle_templates_create(struct node *n, struct http_req *req, struct http_conn *c);
void handle_templates_delete(struct node *n, const char *name, struct http_conn *c);
void templates_reconcile(struct node *n);
void templates_cleanup(struct node *n);

#endif
