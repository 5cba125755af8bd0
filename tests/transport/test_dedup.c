/* Exactly-once filter for pushes (esd/dedup.h): a worker's sequences only
 * grow, a sequence at or below the last applied one is a duplicate,
 * workers are apart, 0 is never filtered, reset forgets. */
#include "testutil.h"

#include <esd/dedup.h>

static void test_dedup(void **state)
{
	(void)state;
	struct esd_dedup d;
	esd_dedup_reset(&d);
	assert_true(esd_dedup_fresh(&d, 0, 1));
	esd_dedup_applied(&d, 0, 1);
	assert_false(esd_dedup_fresh(&d, 0, 1)); /* re-sent */
	assert_true(esd_dedup_fresh(&d, 1, 1));  /* another worker */
	for (uint64_t s = 2; s <= 1000; s++) {
		assert_true(esd_dedup_fresh(&d, 0, s));
		esd_dedup_applied(&d, 0, s);
	}
	assert_false(esd_dedup_fresh(&d, 0, 999)); /* older */
	assert_true(esd_dedup_fresh(&d, 0, 0));    /* unnumbered */
	esd_dedup_applied(&d, 0, 5);               /* never moves back */
	assert_false(esd_dedup_fresh(&d, 0, 1000));
	assert_true(esd_dedup_fresh(&d, ESD_MAX_WORKERS - 1, 7));
	esd_dedup_reset(&d);
	assert_true(esd_dedup_fresh(&d, 0, 1));
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_dedup)};
	return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
