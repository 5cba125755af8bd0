/*
 * The huge-page path: reserve 2 MiB pages through /proc/sys/vm/nr_hugepages
 * (we are root in CI), create a region that must be in huge pages, check
 * that it is (the fd lives on hugetlbfs, the pages are taken from the
 * pool), share it with an attacher, then give the pages back. Skips (77)
 * when no huge page can be reserved.
 */
#include "testutil.h"

#include <esd/cache.h>
#include <esd/err.h>

#include <linux/magic.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>

#define NR_PATH "/proc/sys/vm/nr_hugepages"

static long read_long(const char *path, const char *field)
{
	FILE *f = fopen(path, "r");
	char line[256];
	long v = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (!field) {
			v = strtol(line, NULL, 10);
			break;
		}
		if (!strncmp(line, field, strlen(field))) {
			v = strtol(line + strlen(field), NULL, 10);
			break;
		}
	}
	fclose(f);
	return v;
}

static int write_long(const char *path, long v)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	int rc = fprintf(f, "%ld\n", v) > 0 ? 0 : -1;
	if (fclose(f))
		rc = -1;
	return rc;
}

/* Pages this test added to the pool: given back at the end by
 * subtracting them from the pool as it is then, so a reservation another
 * process made meanwhile survives. */
static long added = 0;

static void give_back(void)
{
	long now = read_long(NR_PATH, NULL);
	if (added > 0 && now >= added)
		write_long(NR_PATH, now - added);
	added = 0;
}

static int reserve(void **state)
{
	(void)state;
	struct esd_cache_config cfg = {.rows = 1000, .dim = 64, .ntables = 1};
	struct esd_cache_sizes sz;
	if (esd_cache_size(&cfg, &sz))
		return -1;
	long need = (long)(sz.total >> 21);
	long nr = read_long(NR_PATH, NULL);
	long free_now = read_long("/proc/meminfo", "HugePages_Free:");
	if (nr < 0 || free_now < 0)
		ESD_TEST_SKIP("no huge page support (%s unreadable)", NR_PATH);
	if (free_now < need) {
		if (write_long(NR_PATH, nr + need - free_now) < 0)
			ESD_TEST_SKIP("cannot write %s (not root?)", NR_PATH);
		added = read_long(NR_PATH, NULL) - nr;
	}
	if (read_long("/proc/meminfo", "HugePages_Free:") < need) {
		give_back();
		ESD_TEST_SKIP("could not reserve %ld huge pages", need);
	}
	return 0;
}

static int release(void **state)
{
	(void)state;
	give_back();
	return 0;
}

static void test_huge_region(void **state)
{
	(void)state;
	struct esd_cache_config cfg = {.rows = 1000,
	                               .dim = 64,
	                               .optimizer = ESD_OPT_SGD,
	                               .ntables = 1,
	                               .pages = ESD_CACHE_PAGES_HUGE};
	struct esd_cache *c = NULL, *t = NULL;
	struct esd_cache_info info;
	struct statfs sfs;
	struct esd_cache_sizes sz;

	assert_int_equal(esd_cache_size(&cfg, &sz), 0);
	long free_before = read_long("/proc/meminfo", "HugePages_Free:");
	int rc = esd_cache_create(&cfg, &c);
	if (rc == -ENOMEM) {
		/* another process shrank the pool between reserve and here */
		give_back();
		ESD_TEST_SKIP("huge page pool emptied by another process");
	}
	assert_int_equal(rc, 0);
	esd_cache_get_info(c, &info);
	assert_int_equal(info.page_size, 2u << 20);
	assert_int_equal(fstatfs(esd_cache_fd(c), &sfs), 0);
	assert_true((unsigned long)sfs.f_type == HUGETLBFS_MAGIC);
	/* the pages are reserved from the pool at mapping time */
	long rsvd = read_long("/proc/meminfo", "HugePages_Rsvd:");
	long free_after = read_long("/proc/meminfo", "HugePages_Free:");
	assert_true(rsvd > 0 || free_after < free_before);

	esd_cache_vec(c, 999)[63] = 42.0f;
	assert_int_equal(esd_cache_attach_fd(esd_cache_fd(c), 0, &t), 0);
	esd_cache_get_info(t, &info);
	assert_int_equal(info.page_size, 2u << 20);
	assert_true(esd_cache_vec(t, 999)[63] == 42.0f);
	esd_cache_grad(t, 5)[0] = 1.5f; /* grad area writable in huge pages */
	assert_true(esd_cache_grad(c, 5)[0] == 1.5f);
	esd_cache_close(t);
	esd_cache_close(c);
}

int main(void)
{
	if (geteuid() != 0)
		ESD_TEST_SKIP("needs root to reserve huge pages");
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_huge_region),
	};
	return cmocka_run_group_tests(tests, reserve, release) ? 1 : 0;
}
