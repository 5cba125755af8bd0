/*
 * The dpdk backend's bottom layer: the EAL (started once per process),
 * the mbuf pool, the threads that use it, and the making and removing of
 * ports. dpdk.c (the links) and dpdk_port.c (a port shared by many links)
 * both build on it; it calls neither.
 *
 * EAL: started once per process by the first dpdk link, with
 * dpdk_eal_args plus a per-process --file-prefix; the calling thread's
 * CPU affinity is restored afterwards (EAL pins it to its main lcore).
 *
 * Devices are made, started, stopped and removed in the EAL's interrupt
 * thread (esd_dpdk_intr_call), never in the caller's: DPDK 22.11's memif
 * tears a connection down there when its peer leaves (memif_disconnect:
 * the link marked down, the regions unmapped and freed), with no lock
 * against a stop or close of the same device in another thread, which
 * then frees the same regions a second time ("EAL: Error: Invalid
 * memory", then SIGSEGV). Run in that thread, a close and a peer's
 * leaving take turns, whatever the peer does and whenever.
 */
#include "dpdk_internal.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <esd/log.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rte_alarm.h>
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_interrupts.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>

#define DEFAULT_MTU 8192u
#define POOL_MBUFS  8191
/* The longest wait for the EAL's interrupt thread to run a device's
 * bring-up or teardown (esd_dpdk_intr_call). */
#define INTR_CALL_NS (10 * ESD_NS_PER_S)
#define DEFAULT_EAL_ARGS                                                                           \
	"--no-pci --no-huge --no-shconf -m 512 --no-telemetry --log-level=*:warning"

static pthread_mutex_t eal_lock = PTHREAD_MUTEX_INITIALIZER;
static int eal_state; /* 0 not tried, 1 up, <0 failed with this code */
static pid_t eal_pid; /* the process that started it */
static struct rte_mempool *pool;

int esd_dpdk_is_memif(const struct esd_link_opts *o)
{
	return !o->dpdk_vdev || !strcmp(o->dpdk_vdev, "memif");
}

int esd_dpdk_is_pci(const struct esd_link_opts *o)
{
	return o->dpdk_vdev && !strcmp(o->dpdk_vdev, "pci");
}

/* af_packet's ring frame for packets of mtu frame bytes: the packet and
 * the kernel's tpacket header before it (the PMD's data room is the frame
 * less 32 bytes). The PMD finds frame i at i frames from the start, so a
 * block holds whole frames: 2 KiB, or whole pages. */
uint32_t esd_dpdk_mtu(const struct esd_link_opts *o)
{
	return o->dpdk_mtu ? o->dpdk_mtu : DEFAULT_MTU;
}

static uint32_t af_packet_frame(uint32_t mtu)
{
	uint32_t need = ETH_HDR + FRAG_HDR + mtu + 96;
	return need <= 2048 ? 2048 : (need + 4095) & ~4095u;
}

static void prefault_mbuf(struct rte_mempool *mp, void *arg, void *obj, unsigned idx)
{
	(void)mp;
	(void)arg;
	(void)idx;
	struct rte_mbuf *m = obj;
	volatile uint8_t *p = m->buf_addr;
	for (uint32_t off = 0; off < m->buf_len; off += 4096)
		p[off] = 0;
	p[m->buf_len - 1] = 0;
}

int esd_dpdk_eal_start(const struct esd_link_opts *o)
{
	pthread_mutex_lock(&eal_lock);
	if (eal_state && eal_pid != getpid()) {
		/* The EAL's threads (interrupts, memif control) did not survive the
		 * fork: nothing in this process may use it. */
		pthread_mutex_unlock(&eal_lock);
		ESD_ERR("transport",
		        "dpdk: the EAL was started by process %d before it forked; a "
		        "forked child cannot use it (start dpdk links after fork)",
		        (int)eal_pid);
		return -ENODEV;
	}
	if (eal_state) {
		int rc = eal_state > 0 ? 0 : eal_state;
		pthread_mutex_unlock(&eal_lock);
		return rc;
	}
	char args[1024], prefix[64];
	char *argv[64];
	int argc = 0;
	snprintf(args, sizeof(args), "%s", o->dpdk_eal_args ? o->dpdk_eal_args : DEFAULT_EAL_ARGS);
	argv[argc++] = "esd";
	int has_prefix = strstr(args, "--file-prefix") != NULL;
	for (char *save, *t = strtok_r(args, " \t", &save); t && argc < 62;
	     t = strtok_r(NULL, " \t", &save))
		argv[argc++] = t;
	if (!has_prefix) {
		snprintf(prefix, sizeof(prefix), "--file-prefix=esd%d", (int)getpid());
		argv[argc++] = prefix;
	}
	argv[argc] = NULL;
	cpu_set_t cpus;
	int have_cpus = !sched_getaffinity(0, sizeof(cpus), &cpus);
	int rc = rte_eal_init(argc, argv);
	if (have_cpus)
		sched_setaffinity(0, sizeof(cpus), &cpus);
	if (rc < 0) {
		rc = rte_errno ? -rte_errno : -ENODEV;
		ESD_ERR("transport", "dpdk: EAL did not start (%s) with '%s'", rte_strerror(-rc),
		        o->dpdk_eal_args ? o->dpdk_eal_args : DEFAULT_EAL_ARGS);
		eal_state = -ENODEV;
		pthread_mutex_unlock(&eal_lock);
		return -ENODEV;
	}
	uint32_t mtu = esd_dpdk_mtu(o);
	/* At least 2 KiB of data room: af_packet rejects smaller mbufs. A NIC
	 * writes whole buffers of its own granularity: room for a VLAN tag and
	 * the CRC, rounded up to 1 KiB, so that a packet fits one mbuf. */
	uint32_t room = ETH_HDR + FRAG_HDR + mtu < 2048 ? 2048 : ETH_HDR + FRAG_HDR + mtu;
	if (!esd_dpdk_is_memif(o) && !esd_dpdk_is_pci(o))
		room = af_packet_frame(mtu); /* the PMD wants a ring frame to fit */
	if (esd_dpdk_is_pci(o))
		room = (room + 8 + 1023) & ~1023u;
	/* every ring full at once, rx and tx, and as much again in flight */
	unsigned nmbufs =
	    4u * esd_dpdk_ring_size(o) - 1 > POOL_MBUFS ? 4u * esd_dpdk_ring_size(o) - 1 : POOL_MBUFS;
	pool =
	    rte_pktmbuf_pool_create("esd_mbufs", nmbufs, 256, 0,
	                            (uint16_t)(RTE_PKTMBUF_HEADROOM + room), (int)rte_socket_id());
	if (!pool) {
		ESD_ERR("transport", "dpdk: no mbuf pool: %s", rte_strerror(rte_errno));
		eal_state = -ENOMEM;
		pthread_mutex_unlock(&eal_lock);
		return -ENOMEM;
	}
	/* Every page of the pool now, before the job runs: without huge pages
	 * the EAL's memory is faulted in 4 KiB at a time, and the pool's ring
	 * hands out every mbuf in turn, so each buffer's first use would fault
	 * during the first iterations (tens of thousands of faults a process;
	 * bench/results/transport.md). */
	rte_mempool_obj_iter(pool, prefault_mbuf, NULL);
	esd_dpdk_guard_init();
	eal_state = 1;
	eal_pid = getpid();
	pthread_mutex_unlock(&eal_lock);
	return 0;
}

/* ---- device bring-up and teardown, in the EAL's interrupt thread -------- */

struct intr_call {
	void (*fn)(void *);
	void *arg;
	atomic_int done;
};

static void intr_call_run(void *p)
{
	struct intr_call *c = p;
	c->fn(c->arg);
	atomic_store_explicit(&c->done, 1, memory_order_release);
}

int esd_dpdk_intr_call(void (*fn)(void *), void *arg, const char *what)
{
	if (rte_thread_is_intr()) {
		fn(arg);
		return 0;
	}
	struct intr_call c = {.fn = fn, .arg = arg};
	int rc = rte_eal_alarm_set(1, intr_call_run, &c);
	if (rc) {
		ESD_ERR("transport", "dpdk: %s: cannot reach the EAL's interrupt thread (%s)", what,
		        rte_strerror(rc < 0 ? -rc : rc));
		return rc < 0 ? rc : -rc;
	}
	int64_t deadline = esd_now_ns() + INTR_CALL_NS, nap = 20 * ESD_NS_PER_US;
	while (!atomic_load_explicit(&c.done, memory_order_acquire)) {
		if (esd_now_ns() > deadline) {
			/* Cancelled: it never ran. Else it runs now, and the
			 * cancel returns once it has. */
			if (rte_eal_alarm_cancel(intr_call_run, &c) > 0) {
				ESD_ERR("transport",
				        "dpdk: %s: the EAL's interrupt thread did not take it "
				        "within %lld s",
				        what, (long long)(INTR_CALL_NS / ESD_NS_PER_S));
				return -ETIMEDOUT;
			}
			break;
		}
		esd_sleep_ns(nap);
		if (nap < ESD_NS_PER_MS)
			nap *= 2;
	}
	return 0;
}

struct port_op {
	const char *name, *spec;
	uint16_t ring, port;
	int socket;
	int rc;
};

/* The vdev of op->spec made, configured and started (op->port), or
 * op->rc < 0 and nothing left. In the interrupt thread. */
static void vdev_up(void *arg)
{
	struct port_op *op = arg;
	int rc = rte_dev_probe(op->spec);
	if (rc) {
		ESD_ERR("transport", "dpdk: probe of %s failed: %s", op->spec, rte_strerror(-rc));
		op->rc = rc;
		return;
	}
	uint16_t port;
	if ((rc = rte_eth_dev_get_port_by_name(op->name, &port)))
		goto err_remove;
	/* Default rx mode: memif and af_packet carry packets up to their
	 * buffer size (memif chains buffers) whatever MTU ethdev reports. */
	struct rte_eth_conf conf;
	memset(&conf, 0, sizeof(conf));
	if ((rc = rte_eth_dev_configure(port, 1, 1, &conf)) < 0)
		goto err_remove;
	if ((rc = rte_eth_rx_queue_setup(port, 0, op->ring, (unsigned)op->socket, NULL, pool)) <
	        0 ||
	    (rc = rte_eth_tx_queue_setup(port, 0, op->ring, (unsigned)op->socket, NULL)) < 0 ||
	    (rc = rte_eth_dev_start(port)) < 0)
		goto err_close;
	op->port = port;
	op->rc = 0;
	return;

err_close:
	rte_eth_dev_close(port);
err_remove:
	ESD_ERR("transport", "dpdk: port %s: %s", op->name, rte_strerror(rc < 0 ? -rc : rc));
	rte_eal_hotplug_remove("vdev", op->name);
	op->rc = rc < 0 ? rc : -rc;
}

/* The vdev stopped, closed and removed. In the interrupt thread. */
static void vdev_down(void *arg)
{
	struct port_op *op = arg;
	rte_eth_dev_stop(op->port);
	rte_eth_dev_close(op->port);
	rte_eal_hotplug_remove("vdev", op->name);
}

/* Create (a vdev from its devargs) or find (a NIC by its PCI address,
 * name), configure and start the port of a link. */
int esd_dpdk_port_up(const struct esd_link_opts *o, const char *name, const char *devargs,
                     uint16_t *port)
{
	char spec[512];
	uint16_t ring = esd_dpdk_ring_size(o);
	if (esd_dpdk_is_pci(o))
		return esd_dpdk_pci_port_up(
		    name, pool, FRAG_HDR + esd_dpdk_mtu(o), ring, port);
	snprintf(spec, sizeof(spec), "%s,%s", name, devargs);
	struct port_op op = {
	    .name = name, .spec = spec, .ring = ring, .socket = (int)rte_socket_id(), .rc = -EIO};
	int rc = esd_dpdk_intr_call(vdev_up, &op, name);
	if (rc)
		return rc;
	if (!op.rc)
		*port = op.port;
	return op.rc;
}

/* Whatever its peer is doing: the peer's leaving is handled in the same
 * thread as this teardown. A device the interrupt thread does not reach
 * in time is left as it is (logged): a leak, not a crash. */
void esd_dpdk_port_down(uint16_t port, const char *name)
{
	if (strncmp(name, "net_", 4)) { /* a NIC (its PCI address): stopped, kept */
		esd_dpdk_pci_port_down(port);
		return;
	}
	struct port_op op = {.name = name, .port = port};
	if (esd_dpdk_intr_call(vdev_down, &op, name))
		ESD_ERR("transport", "dpdk: device %s left in place", name);
}

int esd_dpdk_port_is_up(uint16_t port)
{
	struct rte_eth_link l;
	memset(&l, 0, sizeof(l));
	rte_eth_link_get_nowait(port, &l);
	return l.link_status == RTE_ETH_LINK_UP;
}

struct rte_mempool *esd_dpdk_pool(void)
{
	return pool;
}

/* esd_dpdk_thread_enter: 1 once this thread tried to register itself. */
static __thread bool thread_entered;
static pthread_key_t thread_key;
static pthread_once_t thread_key_once = PTHREAD_ONCE_INIT;

/* At the exit of a registered thread: its cached mbufs back to the pool,
 * its lcore back to the EAL. */
static void thread_exit(void *arg)
{
	(void)arg;
	struct rte_mempool_cache *c = pool ? rte_mempool_default_cache(pool, rte_lcore_id()) : NULL;
	if (c)
		rte_mempool_cache_flush(c, pool);
	rte_thread_unregister();
}

static void thread_key_make(void)
{
	pthread_key_create(&thread_key, thread_exit);
}

void esd_dpdk_thread_enter(void)
{
	if (thread_entered)
		return;
	thread_entered = true;
	if (rte_lcore_id() != LCORE_ID_ANY)
		return; /* an EAL thread */
	pthread_once(&thread_key_once, thread_key_make);
	if (rte_thread_register() == 0)
		pthread_setspecific(thread_key, (void *)1);
	else
		ESD_DBG("transport", "dpdk: no lcore for this thread (%s): its mbufs go through "
		        "the pool's ring", rte_strerror(rte_errno));
}

int esd_dpdk_l2_devargs(const struct esd_link_opts *o, char *buf, size_t len)
{
	uint32_t mtu = esd_dpdk_mtu(o);
	if (esd_dpdk_is_pci(o)) {
		buf[0] = '\0'; /* a NIC, no vdev */
		return 0;
	}
	if (!strcmp(o->dpdk_vdev, "af_packet")) {
		/* ring frames that hold a whole packet (the defaults, 2 KiB,
		 * would cut a larger one); a block of whole pages. The packets
		 * go through the interface's qdisc, as a socket's would: the
		 * PMD bypasses it unless told, and tc's shaping, queueing and
		 * drops of the interface would not apply to them. */
		uint32_t frame = af_packet_frame(mtu), block = frame < 4096 ? 4096 : frame;
		snprintf(buf, len,
		         "iface=%s,qpairs=1,qdisc_bypass=0,framesz=%u,blocksz=%u,framecnt=%u",
		         o->addr, frame, block, (unsigned)esd_dpdk_ring_size(o));
		return esd_dpdk_iface_mtu_check(o->addr, FRAG_HDR + mtu);
	}
	ESD_ERR("transport", "dpdk: vdev '%s': expected memif, af_packet or pci", o->dpdk_vdev);
	return -EINVAL;
}
