/*
 * Private to the dpdk backend: what dpdk.c (EAL, vdev ports, links, data
 * path) takes from dpdk_l2.c (a NIC by PCI address; the peer addressing
 * of af_packet and PCI ports). Not installed.
 */
#ifndef ESD_TRANSPORT_DPDK_INTERNAL_H
#define ESD_TRANSPORT_DPDK_INTERNAL_H

#include "link_internal.h"

#include <stdbool.h>
#include <stdint.h>

#include <rte_mempool.h>

/* Descriptors per rx and tx ring of the options (dpdk_queue, 0: 1024). */
uint16_t dpdk_ring_size(const struct esd_link_opts *o);

/*
 * The NIC at PCI address pci (DDDD:BB:DD.F), probed by the EAL or now:
 * configured for packets of up to payload bytes after the Ethernet header
 * (its MTU), one rx and one tx queue of ring descriptors (cut to the
 * NIC's limits, logged), started. One link at a time per NIC port: a
 * second gets -EBUSY. Returns 0 with the port, -ENODEV (no such device
 * for DPDK: not bound to a DPDK driver, or hidden from the EAL), -EINVAL
 * (payload above the NIC's MTU), -EBUSY, or the driver's -errno; logged.
 */
int dpdk_pci_port_up(const char *pci, struct rte_mempool *pool, uint32_t payload, uint16_t ring,
                     uint16_t *port);
/* Stop the port and free it for the next link; the device stays probed
 * (a link opened again finds it). */
void dpdk_pci_port_down(uint16_t port);

/* 0 if the Linux interface carries payload bytes after the Ethernet
 * header (its MTU); -EINVAL (logged) if not, -ENODEV if there is none. */
int dpdk_iface_mtu_check(const char *iface, uint32_t payload);

/* The station at the other end of an af_packet or PCI link. */
struct l2_peer {
	uint8_t mac[6];
	bool known;            /* mac is the peer's */
	uint32_t n;            /* sources taken (0: any) */
	uint8_t (*allowed)[6]; /* owned */
};

/* From the options (a copy of dpdk_peer_macs): a client with one MAC
 * knows its peer; a listener learns it. Returns 0 or -ENOMEM. */
int l2_peer_init(struct l2_peer *p, const struct esd_link_opts *o, bool client);
void l2_peer_fini(struct l2_peer *p);
/* Whether the packet whose Ethernet header is h belongs to this link: it
 * is addressed to own (or broadcast) and comes from the peer, which the
 * first such packet from an allowed source names when it is not known. */
bool l2_peer_take(struct l2_peer *p, const uint8_t own[6], const uint8_t *h);
/* Where packets go: the peer, or broadcast until it is known. */
void l2_peer_dst(const struct l2_peer *p, uint8_t dst[6]);

#endif /* ESD_TRANSPORT_DPDK_INTERNAL_H */
