/*
 * The rdma backend: libibverbs. Opening a link first looks for an RDMA
 * device; on hosts without one (every test host of this project) connect
 * and listen fail at once with -ENODEV and the log line
 * "no RDMA device: ...", which tests/transport/test_rdma_nodev.c checks.
 *
 * With a device present, the device is opened and a protection domain,
 * completion queue and reliable-connected queue pair are created to prove
 * the verbs stack works; the frame data path over the QP (posting sends
 * from registered huge-page buffers, exchanging QP numbers over a TCP
 * bootstrap) is not written yet and fails with -ENOTSUP saying so.
 */
#include "link_internal.h"

#include <esd/err.h>
#include <esd/log.h>

#include <infiniband/verbs.h>
#include <stdio.h>

static int probe_device(const char *what, char *err, size_t errlen)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list) {
		int rc = esd_neg_errno();
		snprintf(err, errlen, "no RDMA device: ibv_get_device_list() failed (%s)",
			 esd_strerror(rc));
		ESD_ERR("transport", "rdma %s: %s", what, err);
		return -ENODEV;
	}
	if (n == 0) {
		ibv_free_device_list(list);
		snprintf(err, errlen,
			 "no RDMA device: ibv_get_device_list() found none (no /dev/infiniband/"
			 "uverbs*; load an RDMA driver or use the tcp or dpdk backend)");
		ESD_ERR("transport", "rdma %s: %s", what, err);
		return -ENODEV;
	}
	/* A device exists: check that it opens and can host an RC QP. */
	int rc = -ENOTSUP;
	struct ibv_context *ctx = ibv_open_device(list[0]);
	struct ibv_pd *pd = NULL;
	struct ibv_cq *cq = NULL;
	struct ibv_qp *qp = NULL;
	if (!ctx) {
		rc = -ENODEV;
		snprintf(err, errlen, "RDMA device %s does not open", ibv_get_device_name(list[0]));
		goto out_free_list;
	}
	if (!(pd = ibv_alloc_pd(ctx)) || !(cq = ibv_create_cq(ctx, 64, NULL, NULL, 0))) {
		rc = -ENODEV;
		snprintf(err, errlen, "RDMA device %s: no protection domain / completion queue",
			 ibv_get_device_name(list[0]));
		goto out_free_verbs;
	}
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 64, .max_recv_wr = 64,
					      .max_send_sge = 1, .max_recv_sge = 1}};
	if (!(qp = ibv_create_qp(pd, &qa))) {
		rc = -ENODEV;
		snprintf(err, errlen, "RDMA device %s: no RC queue pair",
			 ibv_get_device_name(list[0]));
		goto out_free_verbs;
	}
	snprintf(err, errlen, "RDMA device %s works, but the rdma frame data path is not "
		 "implemented in this build; use tcp or dpdk", ibv_get_device_name(list[0]));
out_free_verbs:
	if (qp)
		ibv_destroy_qp(qp);
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
out_free_list:
	ibv_free_device_list(list);
	ESD_ERR("transport", "rdma %s: %s", what, err);
	return rc;
}

static int rdma_connect(const struct esd_link_opts *o, struct wire **out)
{
	char err[WIRE_ERR_LEN];
	(void)out;
	return probe_device(o->addr, err, sizeof(err));
}

static int rdma_listen(const struct esd_link_opts *o, struct wire_listener **out)
{
	char err[WIRE_ERR_LEN];
	(void)out;
	return probe_device(o->addr, err, sizeof(err));
}

const struct wire_ops esd_wire_rdma = {
	.name = "rdma",
	.not_built = NULL,
	.connect = rdma_connect,
	.listen = rdma_listen,
};
