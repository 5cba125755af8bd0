/* CPU pinning reports the core actually obtained. */
#include "testutil.h"

#include <esd/pin.h>
#include <esd/err.h>
#include <sched.h>
#include <stdio.h>

static void test_pin_each_core(void **state)
{
	(void)state;
	cpu_set_t allowed;
	assert_int_equal(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
	assert_true(esd_pin_ncores() >= 1);
	printf("# pinning via %s, %d cores\n", esd_pin_mechanism(), esd_pin_ncores());
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, &allowed))
			continue;
		int got = -1;
		assert_int_equal(esd_pin_thread(c, &got), 0);
		assert_int_equal(got, c);
		assert_int_equal(sched_getcpu(), c);
	}
	assert_int_equal(sched_setaffinity(0, sizeof(allowed), &allowed), 0);
}

static void test_pin_bad_core(void **state)
{
	(void)state;
	assert_int_equal(esd_pin_thread(-1, NULL), -EINVAL);
	assert_int_equal(esd_pin_thread(CPU_SETSIZE - 1, NULL), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pin_each_core),
		cmocka_unit_test(test_pin_bad_core),
	};
	return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
