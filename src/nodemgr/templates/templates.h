/* templates.h - template builds, deletes and listings (template.c), and
 * templates moved between nodes (template-xfer.c). */
#ifndef AIRLOCK_NODEMGR_TEMPLATES_H
#define AIRLOCK_NODEMGR_TEMPLATES_H

#include "../core/nodemgr-internal.h"

/* template-xfer.c: a template into and out of a btrfs send stream in the fd
 * the node passed, and a template found by identity (nm.h,
 * nm_template_export / _find / _import). */
int tmpl_export(struct nm_server *s, const char *name, uint32_t version, int fd,
		char uuid[37], int64_t *size, err_t *err);
int tmpl_find(struct nm_server *s, const char *name, const char *uuid, uint32_t *version,
	      err_t *err);
int tmpl_import(struct nm_server *s, const char *name, const char *uuid,
		uint32_t min_version, int fd, uint32_t *version, err_t *err);
/* At start: remove what imports a crash cut off left
 * (templates/<name>/.recv-*). */
void tmpl_import_sweep(struct nm_server *s);

/* template.c */
typedef int (*progress_fn)(void *arg, const char *line);  /* <0: client gone */
/* A hang-up on client_fd (the requester's socket) cancels the build. */
int tmpl_build(struct nm_server *s, const struct nm_template_spec *spec, uid_t peer_uid,
	       int client_fd, progress_fn progress, void *arg, err_t *err);
int tmpl_delete(struct nm_server *s, const char *name, uint32_t version, err_t *err);
char **tmpl_list(struct nm_server *s);
/* The walk of templates/<name>/ for every valid name: fn(arg, name,
 * templates/<name>, entry) for each entry there (".", "..", versions,
 * <ver>.vm, .recv-*), then once with entry NULL when the name's are done. */
typedef void (*tmpl_entry_fn)(void *arg, const char *name, const char *namedir,
			      const char *entry);
void tmpl_each(struct nm_server *s, tmpl_entry_fn fn, void *arg);
struct buf;
/* templates/<name>/<version>/image.json into out (empty when there is
 * none); at most NM_TEMPLATE_CONFIG_MAX bytes. */
int tmpl_config(struct nm_server *s, const char *name, uint32_t version, struct buf *out,
		err_t *err);
#endif
