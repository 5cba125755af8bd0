/* Configuration: INI load, overrides, typed getters, errors naming key and line. */
#include "testutil.h"

#include <esd/config.h>
#include <esd/err.h>
#include <string.h>
#include <unistd.h>

static char *dir;

static char *write_ini(const char *name, const char *text)
{
	char *p;
	assert_true(asprintf(&p, "%s/%s", dir, name) > 0);
	assert_int_equal(esd_test_write_file(p, text, strlen(text)), 0);
	return p;
}

static void test_load_and_get(void **state)
{
	(void)state;
	struct esd_config *c;
	char *p = write_ini("a.ini", "top = 1\n[cache]\nrows = 1000\npolicy = emark\n"
				     "size = 512M\n[link]\nrate = 0.5Gbit\nfast = yes\nalpha=0.25\n");
	assert_int_equal(esd_config_create(&c), 0);
	assert_int_equal(esd_config_load(c, p), 0);
	uint64_t u;
	const char *s;
	double d;
	bool b;
	int64_t i;
	assert_int_equal(esd_config_get_u64(c, "cache", "rows", 0, 1, 1 << 30, &u), 0);
	assert_int_equal(u, 1000);
	assert_int_equal(esd_config_get_str(c, "cache", "policy", "lru", &s), 0);
	assert_string_equal(s, "emark");
	assert_int_equal(esd_config_get_size(c, "cache", "size", 0, &u), 0);
	assert_int_equal(u, 512ull << 20);
	assert_int_equal(esd_config_get_rate(c, "link", "rate", 0, &u), 0);
	assert_int_equal(u, 500000000ull);
	assert_int_equal(esd_config_get_bool(c, "link", "fast", false, &b), 0);
	assert_true(b);
	assert_int_equal(esd_config_get_double(c, "link", "alpha", 1, 0, 1, &d), 0);
	assert_true(d == 0.25);
	assert_int_equal(esd_config_get_i64(c, "global", "top", 0, -5, 5, &i), 0);
	assert_int_equal(i, 1);
	/* defaults for unset keys */
	assert_int_equal(esd_config_get_u64(c, "cache", "nope", 42, 0, 100, &u), 0);
	assert_int_equal(u, 42);
	/* override from the command line replaces the file's value */
	assert_int_equal(esd_config_set(c, "cache.rows=77"), 0);
	assert_int_equal(esd_config_get_u64(c, "cache", "rows", 0, 0, 100, &u), 0);
	assert_int_equal(u, 77);
	assert_int_equal(esd_config_set(c, "verbose=1"), 0);
	assert_true(esd_config_has(c, "global", "verbose"));
	esd_config_free(c);
	free(p);
}

/* Lines longer than the INI parser's buffer (200 bytes): a value of 64
 * rates, an inline comment after it, a long comment line. */
static void test_long_lines(void **state)
{
	(void)state;
	char text[4096], list[2048] = "";
	for (int i = 0; i < 64; i++)
		strcat(list, i ? (i % 2 ? ",0.5G" : ",5G") : "5G");
	snprintf(text, sizeof(text), "; %0400d\n[workers]\nrates = %s   ; per worker\nn = 64\n",
		 0, list);
	char *p = write_ini("long.ini", text);
	struct esd_config *c;
	const char *s;
	uint64_t u;
	assert_int_equal(esd_config_create(&c), 0);
	assert_int_equal(esd_config_load(c, p), 0);
	assert_int_equal(esd_config_get_str(c, "workers", "rates", "", &s), 0);
	assert_string_equal(s, list);
	assert_int_equal(esd_config_get_u64(c, "workers", "n", 0, 0, 100, &u), 0);
	assert_int_equal(u, 64);
	esd_config_free(c);
	free(p);
}

static void test_errors(void **state)
{
	(void)state;
	struct esd_config *c;
	char *p = write_ini("b.ini", "[cache]\nrows = lots\nneg = -3\nbig = 5000\n");
	char *q = write_ini("c.ini", "[cache]\nrows = 1\nthis line is broken\n");
	uint64_t u;
	bool b;
	assert_int_equal(esd_config_create(&c), 0);
	assert_int_equal(esd_config_load(c, p), 0);
	assert_int_equal(esd_config_get_u64(c, "cache", "rows", 0, 0, 10, &u), -EINVAL);
	assert_int_equal(esd_config_get_u64(c, "cache", "neg", 0, 0, 10, &u), -EINVAL);
	assert_int_equal(esd_config_get_u64(c, "cache", "big", 0, 0, 10, &u), -ERANGE);
	assert_int_equal(esd_config_get_bool(c, "cache", "rows", 0, &b), -EINVAL);
	/* syntax error: nothing of c.ini is kept */
	assert_int_equal(esd_config_load(c, q), -EINVAL);
	assert_int_equal(esd_config_get_u64(c, "cache", "big", 0, 0, 1 << 20, &u), 0);
	assert_int_equal(u, 5000);
	assert_int_equal(esd_config_load(c, "/nonexistent/x.ini"), -ENOENT);
	/* a directory, an empty file, one of comments only: not a job */
	assert_int_equal(esd_config_load(c, dir), -EINVAL);
	char *e = write_ini("empty.ini", "");
	char *k = write_ini("comments.ini", "# nothing\n; at all\n");
	assert_int_equal(esd_config_load(c, e), -EINVAL);
	assert_int_equal(esd_config_load(c, k), -EINVAL);
	free(e);
	free(k);
	assert_int_equal(esd_config_set(c, "noequals"), -EINVAL);
	assert_int_equal(esd_config_set(c, ".x=1"), -EINVAL);
	assert_int_equal(esd_config_set(c, "=1"), -EINVAL);
	/* unknown keys */
	static const char *const known[] = {"cache.rows", "cache.neg", NULL};
	assert_int_equal(esd_config_check_keys(c, known), -EINVAL);
	static const char *const all[] = {"cache.*", NULL};
	assert_int_equal(esd_config_check_keys(c, all), 0);
	esd_config_free(c);
	esd_config_free(NULL);
	free(p);
	free(q);
}

static void test_parsers(void **state)
{
	(void)state;
	uint64_t u;
	int64_t i;
	assert_int_equal(esd_parse_rate("5G", &u), 0);
	assert_int_equal(u, 5000000000ull);
	assert_int_equal(esd_parse_rate("500Mbit", &u), 0);
	assert_int_equal(u, 500000000ull);
	assert_int_equal(esd_parse_rate("0", &u), 0);
	assert_int_equal(u, 0);
	assert_int_equal(esd_parse_rate("5 furlongs", &u), -EINVAL);
	assert_int_equal(esd_parse_rate("-1G", &u), -EINVAL);
	assert_int_equal(esd_parse_size("4k", &u), 0);
	assert_int_equal(u, 4096);
	assert_int_equal(esd_parse_size("2GiB", &u), 0);
	assert_int_equal(u, 2ull << 30);
	assert_int_equal(esd_parse_u64("010", &u), 0);
	assert_int_equal(u, 10); /* never octal */
	assert_int_equal(esd_parse_u64("0x10", &u), 0);
	assert_int_equal(u, 16);
	assert_int_equal(esd_parse_u64("99999999999999999999999", &u), -EINVAL);
	assert_int_equal(esd_parse_i64("-12", &i), 0);
	assert_int_equal(i, -12);
	assert_int_equal(esd_parse_i64("12x", &i), -EINVAL);
	assert_string_equal(esd_strerror(-ESD_EBADMAGIC), "bad magic");
	assert_string_equal(esd_strerror(-ENOENT), strerror(ENOENT));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_load_and_get),
		cmocka_unit_test(test_long_lines),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_parsers),
	};
	dir = esd_test_mkdtemp("esd-config");
	if (!dir)
		return 1;
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	esd_test_rmtree(dir);
	free(dir);
	return rc ? 1 : 0;
}
