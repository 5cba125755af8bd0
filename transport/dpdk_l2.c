/*
 * The dpdk backend beyond one host: a NIC bound to a DPDK driver, found
 * by its PCI address and set up within its limits, and the MTU check of a
 * Linux interface for af_packet. Which link a packet on such a port
 * belongs to is dpdk_port.c's.
 */
#include "dpdk_internal.h"

#include <esd/log.h>

#include <errno.h>
#include <net/if.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_ethdev.h>

#define DEFAULT_RING 1024
/* memif's ring holds the packet buffers themselves (a 16 KiB buffer per
 * 8 KiB packet): 1024 of them per direction is 16 MiB that every packet
 * cycles through cold in the caches, and copying into and out of it cost
 * more than the transfers (bench/results/transport.md); 256 packets (2 MiB
 * in flight) keep a link at full speed. */
#define DEFAULT_RING_MEMIF 256

static pthread_mutex_t busy_lock = PTHREAD_MUTEX_INITIALIZER;
static bool busy[RTE_MAX_ETHPORTS]; /* a link holds the PCI port */

uint16_t esd_dpdk_ring_size(const struct esd_link_opts *o)
{
	if (o->dpdk_queue)
		return (uint16_t)o->dpdk_queue;
	return !o->dpdk_vdev || !strcmp(o->dpdk_vdev, "memif") ? DEFAULT_RING_MEMIF : DEFAULT_RING;
}

/* The ethdev port whose device is at PCI address pci, or -1. */
static int port_of(const char *pci)
{
	uint16_t p;
	RTE_ETH_FOREACH_DEV(p)
	{
		struct rte_eth_dev_info info;
		if (!rte_eth_dev_info_get(p, &info) && info.device &&
		    !strcmp(rte_dev_name(info.device), pci))
			return p;
	}
	return -1;
}

static int find_pci(const char *pci, uint16_t *port)
{
	int p = port_of(pci);
	if (p < 0) {
		int rc = rte_dev_probe(pci); /* not probed at EAL start: now */
		p = port_of(pci);
		if (p < 0) {
			ESD_ERR("transport",
			        "dpdk: no NIC at PCI address %s for DPDK (%s): bind it "
			        "to vfio-pci (dpdk-devbind.py -b vfio-pci %s) and let the EAL see "
			        "it (-a %s, no --no-pci)",
			        pci, rc ? rte_strerror(-rc) : "no port", pci, pci);
			return -ENODEV;
		}
	}
	pthread_mutex_lock(&busy_lock);
	bool taken = busy[p];
	busy[p] = true;
	pthread_mutex_unlock(&busy_lock);
	if (taken) {
		ESD_ERR("transport",
		        "dpdk: the NIC at %s is already open in this process",
		        pci);
		return -EBUSY;
	}
	*port = (uint16_t)p;
	return 0;
}

/* MTU and rings within the NIC's limits; the ring sizes cut to them. */
static int fit(const char *pci, uint16_t port, uint32_t payload, uint16_t *nrx, uint16_t *ntx)
{
	struct rte_eth_dev_info info;
	int rc = rte_eth_dev_info_get(port, &info);
	if (rc)
		return rc;
	if (payload > info.max_mtu || payload < info.min_mtu) {
		ESD_ERR("transport",
		        "dpdk: the NIC at %s takes an MTU of %u to %u; dpdk_mtu "
		        "needs %u (dpdk_mtu + 16): lower dpdk_mtu or enable jumbo frames on the "
		        "network",
		        pci, info.min_mtu, info.max_mtu, payload);
		return -EINVAL;
	}
	uint16_t want = *nrx;
	if ((rc = rte_eth_dev_adjust_nb_rx_tx_desc(port, nrx, ntx)))
		return rc;
	if (*nrx != want || *ntx != want)
		ESD_WARN("transport",
		         "dpdk: the NIC at %s takes %u rx and %u tx descriptors, not "
		         "%u (dpdk_queue)",
		         pci, *nrx, *ntx, want);
	return 0;
}

int esd_dpdk_pci_port_up(const char *pci, struct rte_mempool *pool, uint32_t payload, uint16_t ring,
                         uint16_t *port)
{
	uint16_t nrx = ring, ntx = ring;
	int rc = find_pci(pci, port);
	if (rc)
		return rc;
	if ((rc = fit(pci, *port, payload, &nrx, &ntx))) {
		esd_dpdk_pci_port_down(*port);
		return rc;
	}
	struct rte_eth_conf conf;
	memset(&conf, 0, sizeof(conf));
	conf.rxmode.mtu = payload;
	unsigned socket = (unsigned)rte_eth_dev_socket_id(*port);
	if ((rc = rte_eth_dev_configure(*port, 1, 1, &conf)) ||
	    (rc = rte_eth_rx_queue_setup(*port, 0, nrx, socket, NULL, pool)) ||
	    (rc = rte_eth_tx_queue_setup(*port, 0, ntx, socket, NULL)) ||
	    (rc = rte_eth_dev_start(*port))) {
		ESD_ERR("transport", "dpdk: the NIC at %s does not start: %s", pci,
		        rte_strerror(rc < 0 ? -rc : rc));
		esd_dpdk_pci_port_down(*port);
		return rc < 0 ? rc : -rc;
	}
	return 0;
}

void esd_dpdk_pci_port_down(uint16_t port)
{
	rte_eth_dev_stop(port);
	pthread_mutex_lock(&busy_lock);
	busy[port] = false;
	pthread_mutex_unlock(&busy_lock);
}

int esd_dpdk_iface_mtu_check(const char *iface, uint32_t payload)
{
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", iface);
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0; /* cannot ask: af_packet will say */
	int rc = ioctl(fd, SIOCGIFMTU, &ifr);
	close(fd);
	if (rc) {
		ESD_ERR("transport", "dpdk: no interface %s for af_packet", iface);
		return -ENODEV;
	}
	if ((uint32_t)ifr.ifr_mtu < payload) {
		ESD_ERR("transport",
		        "dpdk: interface %s has MTU %d; dpdk_mtu needs %u (dpdk_mtu + "
		        "16): set dpdk_mtu to at most %d",
		        iface, ifr.ifr_mtu, payload, ifr.ifr_mtu - 16);
		return -EINVAL;
	}
	return 0;
}
