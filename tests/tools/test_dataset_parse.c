/*
 * Line parsers of the real formats and tsv-multi-hot: good lines map to
 * the expected label, dense values and IDs (missing values to ID 0,
 * hashing within the rows; bags of hashed IDs), bad lines are refused with
 * the field that is wrong.
 */
#include "testutil.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "parse.h"

static const char criteo_ok[] =
    "1\t1\t5\t\t-3\t100\t2\t3\t4\t5\t6\t7\t8\t9\t68fd1e64\t80e26c9b\tfb936136\t7b4723c4\t"
    "25c83c98\t7e0ccccf\tde7995b8\t1f89b562\ta73ee510\ta8cd5504\tb2cb9c98\t37c9c164\t2824a5f6\t"
    "1adce6ef\t8ba8b39a\t891b62e7\te5ba7672\tf54016b9\t21ddcdc9\tb1252a9d\t07b5194c\t\t"
    "3a171ecb\tc5c50484\te8b83407\t9727dd16";

/* tsv-multi-hot with 2 dense values and 3 tables: C1's rows, 7, 1. */
static const uint64_t mh_rows[3] = {1460, 7, 1};
static const uint32_t mh_max_bag[3] = {64, 2, 300};
static uint64_t mh_bags[512]; /* the bags' room of every sample here */
static float mh_wts[512];     /* and their weights (--weighted) */

static int parse(struct ds_parse_ctx *c, const char *line, struct ds_sample *s, char *why)
{
	return esd_ds_parse_line(c, line, strlen(line), s, why, 256);
}

static void test_criteo(void **state)
{
	(void)state;
	struct ds_parse_ctx c;
	struct ds_sample s;
	char why[256];
	esd_ds_parse_init(&c, DS_FMT_CRITEO, NULL);
	assert_int_equal(parse(&c, criteo_ok, &s, why), 0);
	assert_int_equal(s.label, 1);
	assert_true(fabsf(s.dense[0] - logf(2.0f)) < 1e-6f);
	assert_true(s.dense[2] == 0.0f); /* missing */
	assert_true(s.dense[3] == 0.0f); /* negative clamps to 0 */
	assert_true(fabsf(s.dense[4] - logf(101.0f)) < 1e-5f);
	assert_int_equal(s.ids[21], 0); /* empty C22 */
	for (int t = 0; t < 26; t++)
		assert_true(s.ids[t] < c.rows[t]);
	assert_true(s.ids[2] != 0);
	/* the same value hashes the same way; a trailing '\r' is ignored */
	struct ds_sample s2;
	char crlf[sizeof(criteo_ok) + 1];
	snprintf(crlf, sizeof(crlf), "%s\r", criteo_ok);
	assert_int_equal(parse(&c, crlf, &s2, why), 0);
	assert_memory_equal(s.ids, s2.ids, 26 * sizeof(uint64_t));
	/* --rows: every table hashed into 10 rows */
	uint64_t rows[26];
	for (int t = 0; t < 26; t++)
		rows[t] = 10;
	esd_ds_parse_init(&c, DS_FMT_CRITEO, rows);
	assert_int_equal(parse(&c, criteo_ok, &s, why), 0);
	for (int t = 0; t < 26; t++)
		assert_true(s.ids[t] < 10);
}

static void expect_bad_in(struct ds_parse_ctx *c, const char *line, struct ds_sample *s,
                          const char *needle)
{
	char why[256];
	assert_int_equal(parse(c, line, s, why), -EINVAL);
	if (!strstr(why, needle))
		fail_msg("'%s' does not say '%s'", why, needle);
}

static void expect_bad(struct ds_parse_ctx *c, const char *line, const char *needle)
{
	struct ds_sample s;
	char why[256];
	s.bag_ids = mh_bags;
	s.bag_cap = sizeof(mh_bags) / sizeof(mh_bags[0]);
	s.bag_wts = mh_wts;
	assert_int_equal(parse(c, line, &s, why), -EINVAL);
	if (!strstr(why, needle))
		fail_msg("'%s' does not say '%s'", why, needle);
}

static void test_criteo_bad(void **state)
{
	(void)state;
	struct ds_parse_ctx c;
	esd_ds_parse_init(&c, DS_FMT_CRITEO, NULL);
	char line[sizeof(criteo_ok) + 16];
	expect_bad(&c, "", "1 tab-separated fields");
	expect_bad(&c, "1\t2\t3", "3 tab-separated fields");
	snprintf(line, sizeof(line), "%s\tx", criteo_ok);
	expect_bad(&c, line, "more than 40");
	snprintf(line, sizeof(line), "%s", criteo_ok);
	line[0] = '2';
	expect_bad(&c, line, "field 1 (label)");
	snprintf(line, sizeof(line), "%s", criteo_ok);
	line[2] = 'z'; /* I1 */
	expect_bad(&c, line, "field 2 (I1)");
	snprintf(line, sizeof(line), "%s", criteo_ok);
	char *p = strstr(line, "68fd1e64");
	p[0] = 'g';
	expect_bad(&c, line, "field 15 (C1)");
	snprintf(line, sizeof(line), "%s", criteo_ok);
	p = strstr(line, "9727dd16");
	memcpy(p, "9727dd1-", 8);
	expect_bad(&c, line, "field 40 (C26)");
}

static const char avazu_hdr[] = "id,click,hour,C1,banner_pos,site_id,site_domain,site_category,"
                                "app_id,app_domain,app_category,device_id,device_ip,device_model,"
                                "device_type,device_conn_type,C14,C15,C16,C17,C18,C19,C20,C21";
static const char avazu_line[] = "1000009418151094273,0,14102100,1005,0,1fbe01fe,f3845767,"
                                 "28905ebd,ecad2386,7801e8d9,07d7df22,a99f214a,ddd2926e,"
                                 "44956a24,1,2,15706,320,50,1722,0,35,-1,79";

static void test_avazu(void **state)
{
	(void)state;
	struct ds_parse_ctx c;
	struct ds_sample s, s2;
	char why[256];
	esd_ds_parse_init(&c, DS_FMT_AVAZU, NULL);
	assert_int_equal(parse(&c, avazu_line, &s, why), -EINVAL); /* header first */
	assert_int_equal(esd_ds_parse_header(&c, avazu_hdr, strlen(avazu_hdr), why, sizeof(why)),
	                 0);
	assert_int_equal(c.ncols, 24);
	assert_int_equal(parse(&c, avazu_line, &s, why), 0);
	assert_int_equal(s.label, 0);
	for (int t = 0; t < 18; t++) {
		assert_true(s.ids[t] < c.rows[t]);
		assert_true(s.ids[t] != 0 || c.rows[t] == 1);
	}
	/* columns are found by name, in any order */
	static const char hdr2[] = "click,id,hour,C1,banner_pos,site_id,site_domain,site_category,"
	                           "app_id,app_domain,app_category,device_id,device_ip,"
	                           "device_model,device_type,device_conn_type,C14,C15,C16,C17,"
	                           "C18,C19,C20,C21\r";
	static const char line2[] = "0,1000009418151094273,14102100,1005,0,1fbe01fe,f3845767,"
	                            "28905ebd,ecad2386,7801e8d9,07d7df22,a99f214a,ddd2926e,"
	                            "44956a24,1,2,15706,320,50,1722,0,35,-1,79\r";
	struct ds_parse_ctx c2;
	esd_ds_parse_init(&c2, DS_FMT_AVAZU, NULL);
	assert_int_equal(esd_ds_parse_header(&c2, hdr2, strlen(hdr2), why, sizeof(why)), 0);
	assert_int_equal(parse(&c2, line2, &s2, why), 0);
	assert_memory_equal(s.ids, s2.ids, 18 * sizeof(uint64_t));
	expect_bad(&c, "1,2,3", "3 comma-separated fields, the header has 24");
	char bad[sizeof(avazu_line)];
	snprintf(bad, sizeof(bad), "%s", avazu_line);
	bad[20] = 'x'; /* click */
	expect_bad(&c, bad, "field 2 (click)");
	assert_int_equal(esd_ds_parse_header(&c2, "id,hour,C1", 10, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "click"));
	/* regression: after a failed header, data lines must not use the old
	 * column map (it indexed column -1) */
	expect_bad(&c2, line2, "no header line seen");
	assert_int_equal(esd_ds_parse_header(&c2, "id,click,hour", 13, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "banner_pos"));
}

static const char search_line[] =
    "0\t-1\t-1\t1598891820\t1\t-1\t-1\t7E56C27BFF0305E788DA55A029EC4988\t-1\t-1\t"
    "9C6A33397C1C17DC5C72D3B80932D4B5\t-1\t-1\t-1\t-1\t-1\t-1\t-1\t"
    "57A2E38E5DB3F4E0B9D5E4A8F6E3A7F4\tD7D1FB49049702BF6338894757E0D959\t"
    "C4A6D46F7A51A0C12A6D6C7AEE5E9E1E\t1B2D1CB9F1E5ADDD0CD9E3F5F7AF13D8\t"
    "2E7A6A2F8F1C59E5A8DF1E16E1A1E9E2";

static void test_search(void **state)
{
	(void)state;
	struct ds_parse_ctx c;
	struct ds_sample s;
	char why[256];
	esd_ds_parse_init(&c, DS_FMT_SEARCH, NULL);
	assert_int_equal(parse(&c, search_line, &s, why), 0);
	assert_int_equal(s.label, 0);
	assert_true(fabsf(s.dense[0] - logf(2.0f)) < 1e-6f); /* nb_clicks_1week 1 */
	assert_true(s.dense[1] == 0.0f);                     /* price -1: unknown */
	assert_int_equal(s.ids[0], 0);                       /* -1: missing */
	assert_true(s.ids[1] != 0);                          /* device_type */
	for (int t = 0; t < 17; t++)
		assert_true(s.ids[t] < c.rows[t]);
	assert_true(esd_ds_is_search_header("Sale\tSalesAmountInEuro", 21));
	assert_false(esd_ds_is_search_header(search_line, strlen(search_line)));
	expect_bad(&c, "0\t1\t2", "3 tab-separated fields, expected 23");
	char bad[sizeof(search_line)];
	snprintf(bad, sizeof(bad), "%s", search_line);
	memcpy(bad + 5, "ab", 2); /* time_delay_for_conversion "-1" -> "ab" */
	expect_bad(&c, bad, "field 3 (time_delay_for_conversion)");
	snprintf(bad, sizeof(bad), "%s", search_line);
	bad[0] = '7';
	expect_bad(&c, bad, "field 1 (Sale)");
}

static void mh_init(struct ds_parse_ctx *c, struct ds_sample *s, char sep)
{
	esd_ds_parse_init_multi_hot(c, 3, 2, mh_rows, mh_max_bag, sep);
	s->bag_ids = mh_bags;
	s->bag_cap = sizeof(mh_bags) / sizeof(mh_bags[0]);
	s->bag_wts = mh_wts;
}

static void test_multi_hot(void **state)
{
	(void)state;
	struct ds_parse_ctx c, cc;
	struct ds_sample s, sc;
	char why[256];
	esd_ds_parse_init(&cc, DS_FMT_CRITEO, NULL);
	assert_int_equal(parse(&cc, criteo_ok, &sc, why), 0);
	mh_init(&c, &s, ',');
	assert_int_equal(c.ncols, 6);
	assert_int_equal(parse(&c, "1\t0.5\t\t68fd1e64,a,ff\t3,3\t", &s, why), 0);
	assert_int_equal(s.label, 1);
	assert_true(fabsf(s.dense[0] - log1pf(0.5f)) < 1e-6f);
	assert_true(s.dense[1] == 0.0f); /* empty: 0 */
	assert_int_equal(s.lens[0], 3);
	assert_int_equal(s.lens[1], 2);
	assert_int_equal(s.lens[2], 0);            /* empty field: empty bag */
	assert_int_equal(s.bag_ids[0], sc.ids[0]); /* hashed as criteo-kaggle's C1 */
	assert_int_equal(s.bag_ids[3], s.bag_ids[4]);
	for (int k = 0; k < 3; k++)
		assert_true(s.bag_ids[k] >= 1 && s.bag_ids[k] < 1460);
	assert_true(s.bag_ids[3] < 7);
	/* a trailing '\r' is ignored; a one-row table takes any ID as row 0 */
	assert_int_equal(parse(&c, "0\t1e2\t-4\t\t\t1,2,3\r", &s, why), 0);
	assert_int_equal(s.label, 0);
	assert_true(fabsf(s.dense[0] - logf(101.0f)) < 1e-5f);
	assert_true(s.dense[1] == 0.0f); /* negative clamps to 0 */
	assert_int_equal(s.lens[0], 0);
	assert_int_equal(s.lens[2], 3);
	assert_int_equal(s.bag_ids[0] | s.bag_ids[1] | s.bag_ids[2], 0);
	/* another separator: ',' is then a bad ID */
	mh_init(&c, &s, ';');
	assert_int_equal(parse(&c, "1\t\t\t68fd1e64;a\t1;2\t5", &s, why), 0);
	assert_int_equal(s.lens[0], 2);
	assert_int_equal(s.lens[1], 2);
	assert_int_equal(s.lens[2], 1);
	assert_int_equal(s.bag_ids[0], sc.ids[0]);
	expect_bad(&c, "1\t\t\t68fd1e64,a\t\t", "field 4 (table 0): '68fd1e64,a' (ID 1");
	/* the defaults: one table, no dense value, ',' */
	esd_ds_parse_init(&c, DS_FMT_MULTI_HOT, NULL);
	assert_int_equal(parse(&c, "1\ta,b", &s, why), 0);
	assert_int_equal(s.lens[0], 2);
	assert_int_equal(s.bag_ids[0] | s.bag_ids[1], 0); /* rows[0] 1 */
	expect_bad(&c, "1\ta\tb", "more than 2 tab-separated fields, expected 2");
}

static void test_multi_hot_bad(void **state)
{
	(void)state;
	struct ds_parse_ctx c;
	struct ds_sample s;
	char why[256];
	mh_init(&c, &s, ',');
	expect_bad(&c, "1\t2", "2 tab-separated fields, expected 6 (label, 2 dense, 3 tables)");
	expect_bad(&c, "1\t\t\t1\t1\t1\t1", "more than 6 tab-separated fields");
	expect_bad(&c, "2\t\t\t1\t1\t1", "field 1 (label): '2' is not 0 or 1");
	expect_bad(&c, "1\tx\t\t1\t1\t1", "field 2 (dense 0): 'x' is not a number");
	expect_bad(&c, "1\t0\t1.5.5\t1\t1\t1", "field 3 (dense 1): '1.5.5' is not a number");
	expect_bad(&c, "1\t\t\t3,zz\t1\t1",
	           "field 4 (table 0): 'zz' (ID 2 of the bag) is not a hex ID");
	expect_bad(&c, "1\t\t\t12345678901234567\t\t",
	           "field 4 (table 0): '12345678901234567' (ID 1");
	expect_bad(&c, "1\t\t\t-1\t\t", "'-1' (ID 1 of the bag) is not a hex ID");
	expect_bad(&c, "1\t\t\t3,,4\t\t", "field 4 (table 0): '3,,4': ID 2 of the bag is empty");
	expect_bad(&c, "1\t\t\t3,4,\t\t", "'3,4,': ID 3 of the bag is empty");
	expect_bad(&c, "1\t\t\t\t,\t", "field 5 (table 1): ',': ID 1 of the bag is empty");
	expect_bad(&c, "1\t\t\t\t1,2,3\t", "field 5 (table 1): a bag of 3 IDs, above --max-bag 2");
	assert_int_equal(parse(&c, "1\t\t\t\t1,2\t", &s, why), 0); /* the bound itself */
	s.bag_cap = 3; /* the caller's room for the line's IDs */
	expect_bad_in(&c, "1\t\t\t1,2\t\t3,4", &s,
	              "field 6 (table 2): more than 3 IDs in the line");
	assert_int_equal(parse(&c, "1\t\t\t1,2\t\t3", &s, why), 0);
}

/* --weighted: "id:weight" members (a member without one weighs 1), the
 * same IDs as unweighted; a weight that is not a finite number, or a ':'
 * without --weighted, is refused naming field, table and ID. */
static void test_multi_hot_weighted(void **state)
{
	(void)state;
	struct ds_parse_ctx c, u;
	struct ds_sample s, su;
	static float wts[64];
	static uint64_t plain[64];
	char why[256];
	mh_init(&u, &su, ',');
	su.bag_ids = plain;
	assert_int_equal(parse(&u, "1\t\t\t68fd1e64,a,ff\t3,3\t", &su, why), 0);
	mh_init(&c, &s, ',');
	c.weighted = 1;
	s.bag_wts = wts;
	assert_int_equal(parse(&c, "1\t\t\t68fd1e64:0.25,a:-2,ff\t3,3:1e-3\t", &s, why), 0);
	assert_int_equal(s.lens[0], 3);
	assert_int_equal(s.lens[1], 2);
	for (int k = 0; k < 5; k++)
		assert_int_equal(s.bag_ids[k], su.bag_ids[k]);
	assert_true(wts[0] == 0.25f && wts[1] == -2.0f && wts[2] == 1.0f && wts[3] == 1.0f &&
	            wts[4] == 1e-3f);
	expect_bad(&c, "1\t\t\t3:inf\t\t",
	           "field 4 (table 0): '3:inf' (ID 1 of the bag): the weight is not a finite");
	expect_bad(&c, "1\t\t\t3,4:\t\t", "'4:' (ID 2 of the bag): the weight is not a finite");
	expect_bad(&c, "1\t\t\t3:x\t\t", "'3:x' (ID 1 of the bag): the weight is not a finite");
	expect_bad(&c, "1\t\t\t3:1e39\t\t", "the weight is not a finite"); /* above float */
	expect_bad(&c, "1\t\t\t:2\t\t", "field 4 (table 0): ':2': ID 1 of the bag is empty");
	expect_bad(&u, "1\t\t\t3:0.5\t\t",
	           "field 4 (table 0): '3:0.5' (ID 1 of the bag) has a weight; convert with "
	           "--weighted");
}

static void test_formats(void **state)
{
	(void)state;
	enum ds_format f;
	assert_int_equal(esd_ds_format_parse("criteo-kaggle", &f), 0);
	assert_int_equal(f, DS_FMT_CRITEO);
	assert_int_equal(esd_ds_format_parse("avazu", &f), 0);
	assert_int_equal(f, DS_FMT_AVAZU);
	assert_int_equal(esd_ds_format_parse("criteo-search", &f), 0);
	assert_int_equal(f, DS_FMT_SEARCH);
	assert_int_equal(esd_ds_format_parse("tsv-multi-hot", &f), 0);
	assert_int_equal(f, DS_FMT_MULTI_HOT);
	assert_int_equal(esd_ds_format_parse("csv", &f), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_criteo),    cmocka_unit_test(test_criteo_bad),
	    cmocka_unit_test(test_avazu),     cmocka_unit_test(test_search),
	    cmocka_unit_test(test_multi_hot), cmocka_unit_test(test_multi_hot_bad),
	    cmocka_unit_test(test_multi_hot_weighted),
	    cmocka_unit_test(test_formats),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
