/* Exactly-once filter for pushes: new pushes pass once, duplicates and
 * pushes of closed iterations do not, counts match the barrier. */
#include "testutil.h"

#include <esd/dedup.h>
#include <errno.h>

static void test_dedup(void **state)
{
	(void)state;
	struct esd_dedup *d;
	assert_int_equal(esd_dedup_create(0, &d), -EINVAL);
	assert_int_equal(esd_dedup_create(4, &d), 0);
	assert_int_equal(esd_dedup_check(d, 0, 1, 0), 1);
	assert_int_equal(esd_dedup_check(d, 0, 1, 0), 0);
	assert_int_equal(esd_dedup_check(d, 1, 1, 0), 1); /* other worker */
	for (uint64_t s = 1; s < 1000; s++)
		assert_int_equal(esd_dedup_check(d, 0, 1, s), 1);
	assert_int_equal(esd_dedup_check(d, 0, 1, 999), 0);
	assert_int_equal(esd_dedup_count(d, 0, 1), 1000);
	assert_int_equal(esd_dedup_check(d, 0, 2, 0), 1);    /* next iteration */
	assert_int_equal(esd_dedup_check(d, 0, 1, 5000), 0); /* closed iteration */
	assert_int_equal(esd_dedup_count(d, 0, 1), 0);
	assert_int_equal(esd_dedup_count(d, 0, 2), 1);
	assert_int_equal(esd_dedup_check(d, 4, 1, 0), -EINVAL);
	assert_int_equal(esd_dedup_check(d, 0, 2, ESD_DEDUP_MAX_SEQ), -ERANGE);
	esd_dedup_reset(d);
	assert_int_equal(esd_dedup_check(d, 0, 1, 0), 1);
	esd_dedup_destroy(d);
	esd_dedup_destroy(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_dedup)};
	return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
