/* The frame decoder's seed corpus (corpus/, written by make_corpus.py) is
 * of the protocol's current version: each well-formed seed decodes, so the
 * fuzzer starts past the header. Regression: after the protocol went to
 * version 2 every seed stopped at the version check, unnoticed, since the
 * corpus replay only asks that nothing crashes. */
#include "testutil.h"

#include <esd/proto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* fuzz_frame.c's limits */
static const struct esd_proto_limits lim = {.max_body = 1u << 16, .max_rows = 512, .max_dim = 128};

static const char *const good[] = {
    "hello",     "pull",    "pull_resp",   "push_value", "push_value_evict",
    "push_grad", "barrier", "ack",         "error",      "stats_req",
    "stats",     "setting", "ack_setting", "link_ack",   "link_bye",
    /* flagged TABLE_DIMS: decoded under fuzz_frame.c's model.dims */
    "push_value_table_dims", "pull_resp_table_dims",
};
static const uint32_t dims[3] = {1, 4, 128};
static const struct esd_proto_limits tlim = {.max_body = 1u << 16, .max_rows = 512,
					     .max_dim = 128, .table_dims = dims, .ntables = 3};

static void test_good_seeds_decode(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		char rel[128];
		snprintf(rel, sizeof(rel), "tests/transport/corpus/%s", good[i]);
		char *path = esd_test_src(rel);
		FILE *f = fopen(path, "rb");
		assert_non_null(f);
		static _Alignas(16) uint8_t buf[1u << 16];
		size_t n = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		struct esd_msg m;
		char err[160] = "";
		const int table_dims = strstr(good[i], "table_dims") != NULL;
		int rc = esd_proto_decode(buf, n, table_dims ? &tlim : &lim, &m, err, sizeof(err));
		if (rc)
			fail_msg("seed %s: %s (rerun tests/transport/make_corpus.py)", good[i],
			         err);
		free(path);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_good_seeds_decode)};
	return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
