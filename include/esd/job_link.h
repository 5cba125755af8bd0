/*
 * esd/job_link.h - a job's transport keys ([ps] backend, dpdk_*, rdma_*;
 * docs/configuration.md) as link options, for the programs that open
 * links (esd-ps, esdd).
 *
 * In the library esd_job_link, which links esd_transport; esd_job does
 * not, so the tools that only read a job (esdctl, esd-replay) need no
 * transport and accept a backend their own build lacks.
 *
 * A program calls esd_job_link_check() once at start, right after loading
 * the job: a backend this build lacks, or an RDMA device, port or GID
 * index the host does not have, stops it at once naming the key, before
 * it loads data or waits on a peer. Then esd_job_link_opts() for each
 * link or listener it opens, and esd_job_link_explain() when one fails.
 */
#ifndef ESD_JOB_LINK_H
#define ESD_JOB_LINK_H

#include <stdint.h>

#include <esd/job.h>
#include <esd/transport.h>

#ifdef __cplusplus
extern "C" {
#endif

/* esd_job_link_opts: the options of a shard's listener */
#define ESD_JOB_LINK_LISTEN UINT32_MAX

/*
 * Is the job's ps.backend built into this program, and is its device
 * there (esd_transport_probe)? Returns 0, or esd_transport_probe's error
 * (-ENOENT, -ENOTSUP, -ENODEV, -EINVAL), logged with the transport's
 * reason and a line naming the job keys (esd_job_link_explain).
 */
int esd_job_link_check(const struct esd_job *job);

/*
 * Fill the backend's fields of o (initialised by the caller, whose addr,
 * key, rates and timeout_ns stay) from the job: backend, the heartbeats
 * (job.heartbeat_ms, job.peer_timeout_ms), the dpdk options (EAL
 * arguments, port, MTU, rings, the peers' MAC addresses) and the rdma
 * ones (device, port, GID index). shard: the shard a node's link goes to,
 * or ESD_JOB_LINK_LISTEN for a shard's listener. For a dpdk af_packet or
 * PCI port o->addr becomes the interface or the PCI address. o then points
 * into job, which must outlive the links and listener opened with it.
 */
void esd_job_link_opts(const struct esd_job *job, uint32_t shard, struct esd_link_opts *o);

/*
 * Log what a link's failure rc (from esd_link_connect, esd_listener_open
 * or esd_transport_probe) means in job keys, for the errors that settings
 * cause: the backend not built (ps.backend), no RDMA device, port or GID
 * (ps.rdma_device, ps.rdma_port, ps.rdma_gid_index), an EAL that does not
 * start (ps.dpdk_eal, ps.dpdk_port). Logs nothing for other errors.
 */
void esd_job_link_explain(const struct esd_job *job, int rc);

/* Whether a link failure rc is for good (a setting or this host, not the
 * peer): retrying cannot help. -ENOENT, -ENOTSUP, -ENODEV. */
bool esd_job_link_fatal(int rc);

#ifdef __cplusplus
}
#endif
#endif /* ESD_JOB_LINK_H */
