/* net.h - the sandbox network (net.c; rtnetlink in netlink.c). */
#ifndef AIRLOCK_NODEMGR_NET_H
#define AIRLOCK_NODEMGR_NET_H

#include "../core/nodemgr-internal.h"

/* net.c: the sandbox network (see the comment at its top). init installs
 * this instance's nftables table (replacing a leftover one), fini deletes
 * it; both run the `nft` command outside the server loop. attach gives the
 * live jail j (init pid) its veth, addresses, route
 * (over rtnetlink); detach removes them (idempotent). nmnet_addr: the
 * sandbox address of jail id (ns or vm), its slot's: the same from create
 * to destroy, whether its init runs or not (verbs.c puts it in replies). */
int nmnet_init(struct nm_server *s, err_t *err);
void nmnet_fini(struct nm_server *s);
int nmnet_attach(struct nm_server *s, struct jail *j, pid_t pid, err_t *err);
void nmnet_detach(struct nm_server *s, struct jail *j);
/* vm: attach the veth of slot to the QEMU pid's namespace, routed (and
 * translated, nmnet_vm_nat) to the tap that nmnet_vm_tap made there. In the
 * child, before exec: nmnet_vm_tap (an fd, or -1 with errno) and, with the
 * network on, nmnet_vm_nat of the parent's nmnet_vm_nat_rules (caller frees;
 * NULL when off). detach_slot: nmnet_detach by slot. */
int nmnet_attach_vm(struct nm_server *s, int slot, const char *id, pid_t pid, err_t *err);
void nmnet_detach_slot(struct nm_server *s, int slot, const char *id);
int nmnet_vm_tap(void);
char *nmnet_vm_nat_rules(struct nm_server *s, int slot);
int nmnet_vm_nat(const char *rules);
int nmnet_addr(struct nm_server *s, const char *id, char out[16], err_t *err);
/* "nameserver <host end>\n" for slot (caller frees); NULL when off. */
char *nmnet_resolv_conf(struct nm_server *s, int slot);

#endif
