/* The rdma backend builds, and without an RDMA device fails at start with
 * -ENODEV and a clear "no RDMA device" error (never a crash or a hang). */
#include "testutil.h"

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
	int rc1 = esd_link_connect(&o, &l);
	int rc2 = esd_listener_open(&o, &ls);

	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	char buf[4096] = "";
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	close(fd);
	unlink(path);
	assert_true(n > 0);
	printf("# log: %s", buf);
	assert_int_equal(rc1, -ENODEV);
	assert_int_equal(rc2, -ENODEV);
	assert_null(l);
	assert_null(ls);
	assert_non_null(strstr(buf, "no RDMA device"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_no_device)};
	return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
