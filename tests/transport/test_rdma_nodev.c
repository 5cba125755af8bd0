/* The rdma backend builds, and without an RDMA device fails at start with
 * -ENODEV and a clear "no RDMA device" error naming the device asked for
 * (never a crash or a hang, and at once: no retry, no wait). */
#include "testutil.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <esd/log.h>
#include <esd/transport.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_no_device(void **state)
{
	(void)state;
	const char *why;
	int rc = esd_transport_backend_check("rdma", &why);
	if (rc == -ENOTSUP) {
		printf("# %s\n", why);
		assert_non_null(strstr(why, "not built: "));
		skip();
	}
	assert_int_equal(rc, 0);
	struct stat st;
	if (!stat("/dev/infiniband", &st)) {
		printf("# this host has /dev/infiniband: the no-device path cannot be tested\n");
		skip();
	}
	/* Capture the log line. */
	char path[] = "/tmp/esd-rdma-log.XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	fflush(stderr);
	int saved = dup(2);
	dup2(fd, 2);

	struct esd_link_opts o;
	struct esd_link *l = NULL;
	struct esd_listener *ls = NULL;
	esd_link_opts_init(&o);
	o.backend = "rdma";
	o.addr = "127.0.0.1:7471";
	int64_t t0 = esd_now_ns();
	int rc1 = esd_link_connect(&o, &l);
	int rc2 = esd_listener_open(&o, &ls);
	/* a device by name: the probe a program runs at start, and connect */
	o.rdma_device = "mlx5_0";
	o.rdma_port = 2;
	o.rdma_gid_index = 3;
	int rc3 = esd_transport_probe(&o);
	int rc4 = esd_link_connect(&o, &l);
	int64_t took = esd_now_ns() - t0;

	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	char buf[4096] = "";
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	close(fd);
	unlink(path);
	assert_true(n > 0);
	printf("# log: %s", buf);
	printf("# 2 connects, 1 listen, 1 probe failed in %.3f ms\n", (double)took / 1e6);
	assert_int_equal(rc1, -ENODEV);
	assert_int_equal(rc2, -ENODEV);
	assert_int_equal(rc3, -ENODEV);
	assert_int_equal(rc4, -ENODEV);
	assert_null(l);
	assert_null(ls);
	assert_non_null(strstr(buf, "no RDMA device"));
	assert_non_null(strstr(buf, "no RDMA device mlx5_0"));
	assert_true(took < ESD_NS_PER_S); /* at once, never a wait */
}

/* The probe of the backends that have nothing to check before a link,
 * and of a backend that is not there. */
static void test_probe_other_backends(void **state)
{
	(void)state;
	struct esd_link_opts o;
	esd_link_opts_init(&o);
	assert_int_equal(esd_transport_probe(&o), 0); /* tcp */
	o.backend = "dpdk";
	const char *why;
	assert_int_equal(esd_transport_probe(&o), esd_transport_backend_check("dpdk", &why));
	o.backend = "carrier-pigeon";
	assert_int_equal(esd_transport_probe(&o), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_no_device),
	                                   cmocka_unit_test(test_probe_other_backends)};
	return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
