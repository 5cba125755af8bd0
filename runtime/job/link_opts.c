/*
 * The job's transport keys as link options (esd/job_link.h), and what a
 * link's failure means in those keys. Apart from job.c so that reading a
 * job needs no transport.
 */
#include <esd/job_link.h>

#include <esd/clock.h>
#include <esd/log.h>

#include <errno.h>
#include <string.h>

static const char *const vdev_of[] = {
	[ESD_JOB_PORT_MEMIF] = "memif",
	[ESD_JOB_PORT_AF_PACKET] = "af_packet",
	[ESD_JOB_PORT_PCI] = "pci",
};

void esd_job_link_opts(const struct esd_job *job, uint32_t shard, struct esd_link_opts *o)
{
	o->backend = job->backend;
	/* a silent link beats; a peer silent for the timeout is dead */
	o->heartbeat_ns = (int64_t)job->heartbeat_ms * ESD_NS_PER_MS;
	o->peer_timeout_ns = (int64_t)job->peer_timeout_ms * ESD_NS_PER_MS;
	/* model.dims: a row crosses the link with its table's dim (job must
	 * outlive the link) */
	o->limits.table_dims = job->ntable_dims ? job->table_dims : NULL;
	o->limits.ntables = job->ntable_dims;
	/* dpdk */
	o->dpdk_eal_args = job->dpdk_eal[0] ? job->dpdk_eal : NULL;
	o->dpdk_vdev = vdev_of[job->dpdk_port];
	o->dpdk_mtu = job->dpdk_mtu;
	o->dpdk_queue = job->dpdk_queue;
	if (!strcmp(job->backend, "dpdk") && job->dpdk_port != ESD_JOB_PORT_MEMIF)
		o->addr = job->dpdk_dev;
	if (shard != ESD_JOB_LINK_LISTEN)
		o->dpdk_channel = shard; /* the listener's: its caller sets it */
	if (shard == ESD_JOB_LINK_LISTEN && job->have_worker_macs) {
		o->dpdk_peer_macs = job->worker_macs;
		o->dpdk_npeer_macs = job->n;
	} else if (shard != ESD_JOB_LINK_LISTEN && job->have_shard_macs) {
		o->dpdk_peer_macs = &job->shard_macs[shard];
		o->dpdk_npeer_macs = 1;
	}
	/* rdma */
	o->rdma_device = job->rdma_device;
	o->rdma_port = job->rdma_port;
	o->rdma_gid_index = job->rdma_gid_index;
}

static void explain_rdma(const struct esd_job *job, int rc)
{
	const char *dev = job->rdma_device[0] ? job->rdma_device : NULL;
	if (rc == -ENODEV && dev)
		ESD_ERR("config", "ps.backend = rdma: ps.rdma_device = '%s' port %u (ps.rdma_port): "
			"no such RDMA device or port on this host, or the port is down; set them to "
			"a device and port that ibv_devinfo shows ACTIVE, or use ps.backend = tcp",
			dev, job->rdma_port);
	else if (rc == -ENODEV)
		ESD_ERR("config", "ps.backend = rdma: no RDMA device on this host, or port %u "
			"(ps.rdma_port) of the first one is down (ps.rdma_device unset: the first "
			"device); set ps.rdma_device to one that ibv_devinfo shows ACTIVE, or use "
			"ps.backend = tcp", job->rdma_port);
	else if (rc == -EINVAL)
		ESD_ERR("config", "ps.backend = rdma: ps.rdma_gid_index = '%d' does not fit the port "
			"(port %u of %s): pick an index show_gids lists for it (RoCE needs one; -1 "
			"only on InfiniBand)", (int)job->rdma_gid_index, job->rdma_port,
			dev ? dev : "the first device");
}

void esd_job_link_explain(const struct esd_job *job, int rc)
{
	const char *why = NULL;
	if (rc == -ENOENT || rc == -ENOTSUP) {
		esd_transport_backend_check(job->backend, &why);
		ESD_ERR("config", "ps.backend = '%s': %s", job->backend, why ? why : "unusable");
	} else if (!strcmp(job->backend, "rdma")) {
		explain_rdma(job, rc);
	} else if (!strcmp(job->backend, "dpdk") && rc == -ENODEV) {
		ESD_ERR("config", "ps.backend = dpdk: the EAL did not start with ps.dpdk_eal = '%s' "
			"for ps.dpdk_port = %s%s%s (the transport's line above says why)",
			job->dpdk_eal[0] ? job->dpdk_eal : "(the default)", vdev_of[job->dpdk_port],
			job->dpdk_dev[0] ? " " : "", job->dpdk_dev);
	}
}

int esd_job_link_check(const struct esd_job *job)
{
	struct esd_link_opts o;
	esd_link_opts_init(&o);
	esd_job_link_opts(job, ESD_JOB_LINK_LISTEN, &o);
	int rc = esd_transport_probe(&o);
	if (rc)
		esd_job_link_explain(job, rc);
	return rc;
}

bool esd_job_link_fatal(int rc)
{
	return rc == -ENOENT || rc == -ENOTSUP || rc == -ENODEV;
}
