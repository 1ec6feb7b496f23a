/* wire.h - the private wire format between nm.c (client) and the server.
 *
 * SOCK_SEQPACKET keeps message boundaries, so every message is one fixed-size
 * struct: a request from the client, then zero or more ITEM/PROGRESS replies
 * and exactly one RESULT. A message of the wrong size, magic or version is
 * rejected whole. Strings are fixed char arrays; the receiver checks that
 * each is NUL-terminated before use. An fd (the guest channel) travels with a
 * RESULT as SCM_RIGHTS, and an artifact's fd with a SUSPEND_* request
 * (a template's stream with TEMPLATE_EXPORT and TEMPLATE_IMPORT).
 */
#ifndef AIRLOCK_NM_WIRE_H
#define AIRLOCK_NM_WIRE_H

#include <stdint.h>

#include "nm.h"

#define NM_WIRE_MAGIC 0x4d4e4c41u /* "ALNM" */
#define NM_WIRE_VERSION 6u

enum nm_verb {
	NM_SANDBOX_CREATE = 1,
	NM_SANDBOX_ADOPT,
	NM_SANDBOX_DESTROY,
	NM_SANDBOX_LIST,
	NM_TEMPLATE_BUILD,
	NM_TEMPLATE_DELETE,
	NM_TEMPLATE_LIST,
	NM_NODE_INFO,
	NM_VM_CREATE,
	NM_VM_TEMPLATE_SAVE,
	NM_VM_CONSOLE = 32,        /* fixed: other verbs are appended above */
	NM_SANDBOX_FREEZE,
	NM_SANDBOX_THAW,
	NM_SNAPSHOT_CREATE,
	NM_SNAPSHOT_DELETE,
	NM_SANDBOX_ROLLBACK,
	NM_SANDBOX_FORK,
	NM_DOCTOR,
	NM_SUSPEND_EXPORT,         /* the request carries the artifact's fd */
	NM_SUSPEND_IMPORT,
	NM_TEMPLATE_EXPORT,        /* the request carries the stream's fd */
	NM_TEMPLATE_FIND,
	NM_TEMPLATE_IMPORT,        /* the request carries the stream's fd */
	NM_POOL_LEVELS,            /* ITEMs "<kind> <key> <n>" */
	NM_SANDBOX_STATS,
	NM_TEMPLATE_CONFIG,
	NM_VM_BASE_FIND,
	NM_VM_BASE_EXPORT,         /* the request carries the base's fd */
	NM_VM_BASE_IMPORT,         /* the request carries the base's fd */
	NM_SANDBOX_LIMITS,         /* u.sandbox.id ("" = all); ITEMs, nm_sandbox_limits */
};

struct nm_req {
	uint32_t magic, version, verb, _pad;
	/* the node's request this verb serves, for nodemgr's log lines; ""
	 * when none. nodemgr uses it only if log_request_id_ok. */
	char request_id[65];
	union {
		struct nm_sandbox_spec create;
		struct {
			char id[65];
		} sandbox;                 /* adopt, destroy, freeze, thaw, limits */
		struct nm_template_spec build;
		struct {
			char name[65];
			uint32_t version;
		} tmpl;                    /* template_delete, template_config */
		struct {
			struct nm_sandbox_spec spec;
			uint32_t mode;     /* create: enum nm_vm_mode; save: 1 = discard */
		} vm;                      /* vm_create, vm_template_save */
		struct {
			struct nm_sandbox_spec spec; /* create/delete: only id */
			char snap[65];
			char prev[65];     /* create: the previous snapshot, or "";
					    * fork: the parent sandbox id */
			uint32_t vm;       /* fork: 1 = the child is a vm */
			uint32_t full;     /* create: 1 = memory too (vm), 2 = a
					    * fork's, 3 = the memory alone
					    * beside the disk snapshot snap */
		} snap;                    /* snapshot_create/delete, rollback, fork */
		struct {
			char backend[16];  /* the default backend: decides "ok" */
		} doctor;
		struct {
			struct nm_sandbox_spec spec;
			char snap[65];
			uint32_t artifact; /* enum nm_artifact */
			char base[65];     /* import of memory: its base's SHA-256, or
					    * "" for the template's own RAM file */
		} xfer;                    /* suspend_export/import */
		struct {
			struct nm_sandbox_spec spec; /* find, export: template, shape */
			char sha[65];      /* find, import: the base's SHA-256; find
					    * "": the template's own for the shape */
		} vmbase;                  /* vm_base_find/export/import */
		struct {
			char name[65];
			char uuid[37];     /* find, import: the identity */
			uint32_t version;  /* export: the version; import: the
					    * lowest version it may take */
		} txfer;                   /* template_export/find/import */
	} u;
};

enum nm_msg_type { NM_MSG_RESULT = 1, NM_MSG_PROGRESS, NM_MSG_ITEM };

struct nm_resp {
	uint32_t magic, version, type;
	int32_t code;                /* RESULT: 0 or a positive errno */
	int32_t pid;                 /* create/adopt: jail init, host pid */
	uint32_t has_fd;             /* RESULT carries an fd (SCM_RIGHTS) */
	struct nm_node_info info;    /* node_info */
	char text[1024];             /* error message, progress line or item */
	int64_t size;                /* snapshot_create: changed bytes, -1 unknown */
	/* create, vm create (not a template boot), adopt, fork: the sandbox's
	 * IPv4 address (dotted) on the node's sandbox network, "" when that is
	 * off. It is its slot's, so a rollback (same slot) keeps it. */
	char addr[16];
	/* template export: the template's identity; find, import: the
	 * version found or made */
	char uuid[37];
	uint32_t tmpl_version;
	/* create, vm create: 1 when a warm pool's jail or QEMU served it */
	uint32_t from_pool;
	struct nm_sandbox_stats stats;   /* sandbox_stats */
	/* suspend export of memory, vm base find/export: the base's SHA-256
	 * ("" when none) and its size (the RAM file's, not the stream's) */
	char sha256[65];
	uint64_t base_size;
};

/* Send one message, with fd (or -1). -errno on failure. */
int wire_send(int sock, const void *msg, size_t len, int fd);
/* Receive exactly len bytes as one message; *fd (may be NULL) gets a passed
 * fd (caller owns) or -1; extra fds are closed. -EPROTO on a wrong size,
 * -EPIPE on EOF. */
int wire_recv(int sock, void *msg, size_t len, int *fd);

#endif
