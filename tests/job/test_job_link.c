/* The job's transport keys as link options (esd/job_link.h): what a shard's
 * listener and a node's link to shard s get, and which link errors are for
 * good. What rdma needs up to the device, since no device is here. */
#include "testutil.h"

#include <esd/job_link.h>
#include <errno.h>
#include <string.h>

static void load(const char *const *sets, struct esd_job *j)
{
	struct esd_config *c;
	assert_int_equal(esd_config_create(&c), 0);
	for (; *sets; sets++)
		assert_int_equal(esd_config_set(c, *sets), 0);
	assert_int_equal(esd_config_check_keys(c, esd_job_keys), 0);
	assert_int_equal(esd_job_from_config(c, j), 0);
	esd_config_free(c);
}

/* The options of the link to shard (or the listener) from a fresh init
 * with the caller's address. */
static void opts_for(const struct esd_job *j, uint32_t shard, const char *addr,
		     struct esd_link_opts *o)
{
	esd_link_opts_init(o);
	o->addr = addr;
	esd_job_link_opts(j, shard, o);
}

static void test_rdma_opts(void **state)
{
	(void)state;
	static const char *const sets[] = {"ps.backend=rdma", "ps.addrs=10.0.0.1:7400",
					   "ps.rdma_device=mlx5_1", "ps.rdma_port=2",
					   "ps.rdma_gid_index=3", NULL};
	struct esd_job j;
	struct esd_link_opts o;
	load(sets, &j);
	opts_for(&j, 0, j.addrs[0], &o);
	assert_string_equal(o.backend, "rdma");
	assert_string_equal(o.addr, "10.0.0.1:7400"); /* the bootstrap address stays */
	assert_string_equal(o.rdma_device, "mlx5_1");
	assert_int_equal(o.rdma_port, 2);
	assert_int_equal(o.rdma_gid_index, 3);
}

static void test_dpdk_opts(void **state)
{
	(void)state;
	static const char *const sets[] = {
		"workers.n=2", "ps.shards=2", "ps.backend=dpdk", "ps.dpdk_port=af_packet:veth1",
		"ps.dpdk_mtu=1400", "ps.dpdk_queue=256", "ps.dpdk_eal=--no-pci --no-huge -m 256",
		"ps.dpdk_shard_macs=02:00:00:00:01:00,02:00:00:00:01:01",
		"ps.dpdk_worker_macs=02:00:00:00:00:00,02:00:00:00:00:01", NULL};
	struct esd_job j;
	struct esd_link_opts o;
	load(sets, &j);
	/* a node's link to shard 1: the interface, shard 1's MAC */
	opts_for(&j, 1, j.addrs[1], &o);
	assert_string_equal(o.backend, "dpdk");
	assert_string_equal(o.dpdk_vdev, "af_packet");
	assert_string_equal(o.addr, "veth1");
	assert_string_equal(o.dpdk_eal_args, "--no-pci --no-huge -m 256");
	assert_int_equal(o.dpdk_mtu, 1400);
	assert_int_equal(o.dpdk_queue, 256);
	assert_int_equal(o.dpdk_npeer_macs, 1);
	assert_int_equal(o.dpdk_peer_macs[0][5], 1);
	assert_int_equal(o.dpdk_peer_macs[0][4], 1);
	/* a shard's listener: every worker's MAC */
	opts_for(&j, ESD_JOB_LINK_LISTEN, "ignored", &o);
	assert_string_equal(o.addr, "veth1");
	assert_int_equal(o.dpdk_npeer_macs, 2);
	assert_int_equal(o.dpdk_peer_macs[1][5], 1);
	assert_int_equal(o.dpdk_peer_macs[1][4], 0);

	/* memif: the caller's socket path, no MACs, the transport's EAL default */
	static const char *const memif[] = {"ps.backend=dpdk", "ps.addrs=/run/esd/ps0.sock", NULL};
	load(memif, &j);
	opts_for(&j, 0, j.addrs[0], &o);
	assert_string_equal(o.dpdk_vdev, "memif");
	assert_string_equal(o.addr, "/run/esd/ps0.sock");
	assert_null(o.dpdk_eal_args);
	assert_int_equal(o.dpdk_npeer_macs, 0);

	/* a PCI port: its address, the EAL sees only it */
	static const char *const pci[] = {"ps.backend=dpdk", "ps.dpdk_port=0000:3b:00.0", NULL};
	load(pci, &j);
	opts_for(&j, ESD_JOB_LINK_LISTEN, NULL, &o);
	assert_string_equal(o.dpdk_vdev, "pci");
	assert_string_equal(o.addr, "0000:3b:00.0");
	assert_non_null(strstr(o.dpdk_eal_args, "-a 0000:3b:00.0"));
}

static void test_fatal(void **state)
{
	(void)state;
	assert_true(esd_job_link_fatal(-ENODEV));
	assert_true(esd_job_link_fatal(-ENOTSUP));
	assert_true(esd_job_link_fatal(-ENOENT));
	/* a shard still starting, a shard that is busy: try again */
	assert_false(esd_job_link_fatal(-ECONNREFUSED));
	assert_false(esd_job_link_fatal(-ETIMEDOUT));
	assert_false(esd_job_link_fatal(-EAGAIN));
	assert_false(esd_job_link_fatal(0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rdma_opts),
		cmocka_unit_test(test_dpdk_opts),
		cmocka_unit_test(test_fatal),
	};
	return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
