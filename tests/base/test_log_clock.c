/* Logging levels and output format; monotonic clock helpers. */
#include "testutil.h"

#include <esd/clock.h>
#include <esd/log.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

static void test_levels(void **state)
{
	(void)state;
	enum esd_log_level l;
	assert_int_equal(esd_log_parse_level("debug", &l), 0);
	assert_int_equal(l, ESD_LOG_DEBUG);
	assert_int_equal(esd_log_parse_level("WARN", &l), 0);
	assert_int_equal(l, ESD_LOG_WARN);
	assert_int_equal(esd_log_parse_level("2", &l), 0);
	assert_int_equal(l, ESD_LOG_INFO);
	assert_int_equal(esd_log_parse_level("loud", &l), -EINVAL);
}

static void test_output(void **state)
{
	(void)state;
	char *dir = esd_test_mkdtemp("esd-log"), path[512], buf[4096];
	snprintf(path, sizeof(path), "%s/err", dir);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	int saved = dup(STDERR_FILENO);
	dup2(fd, STDERR_FILENO);
	esd_log_init("unit");
	esd_log_set_level(ESD_LOG_WARN);
	ESD_INFO("comp", "hidden %d", 1);
	ESD_WARN("comp", "shown %d", 2);
	ESD_DBG("comp", "hidden %d", 3);
	esd_log_set_level(ESD_LOG_DEBUG);
	ESD_DBG("comp", "debug %s", "visible");
	char longmsg[3000];
	memset(longmsg, 'x', sizeof(longmsg) - 1);
	longmsg[sizeof(longmsg) - 1] = '\0';
	ESD_ERR("comp", "%s", longmsg); /* truncated, still one line */
	dup2(saved, STDERR_FILENO);
	close(saved);
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	assert_true(n > 0);
	buf[n] = '\0';
	assert_null(strstr(buf, "hidden"));
	assert_non_null(strstr(buf, "unit/comp WARN: shown 2\n"));
	assert_non_null(strstr(buf, "unit/comp DEBUG: debug visible\n"));
	assert_non_null(strstr(buf, "...\n"));
	int lines = 0;
	for (char *p = buf; *p; p++)
		lines += *p == '\n';
	assert_int_equal(lines, 3);
	close(fd);
	esd_test_rmtree(dir);
	free(dir);
}

static void test_clock(void **state)
{
	(void)state;
	int64_t t0 = esd_now_ns(), lap = t0;
	esd_sleep_ns(2 * ESD_NS_PER_MS);
	int64_t d = esd_lap_ns(&lap);
	assert_true(d >= 2 * ESD_NS_PER_MS);
	assert_true(lap > t0);
	struct timespec ts = esd_ns_to_timespec(3 * ESD_NS_PER_S + 5);
	assert_int_equal(ts.tv_sec, 3);
	assert_int_equal(ts.tv_nsec, 5);
	assert_true(esd_ns_to_ms(1500000) == 1.5);
	esd_sleep_ns(-5); /* no-op */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_levels),
		cmocka_unit_test(test_output),
		cmocka_unit_test(test_clock),
	};
	return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
