/* esd-solve: output format, --repeat timing line, every method, and a
 * clear error naming the line (non-zero exit) for each kind of malformed
 * input. */
#include "testutil.h"

#include <esd/dispatch_solve.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char *dir, *bin;

/* Run esd-solve with args on a file holding text; returns the exit code,
 * stdout and stderr (caller frees). */
static int run(const char *args, const char *text, char **out, char **err)
{
	static int seq;
	char *in, *po, *pe, *cmd;
	assert_true(asprintf(&in, "%s/in%d.txt", dir, seq) > 0);
	assert_true(asprintf(&po, "%s/out%d.txt", dir, seq) > 0);
	assert_true(asprintf(&pe, "%s/err%d.txt", dir, seq++) > 0);
	assert_int_equal(esd_test_write_file(in, text, strlen(text)), 0);
	assert_true(asprintf(&cmd, "%s %s %s >%s 2>%s", bin, args, in, po, pe) > 0);
	int st = system(cmd);
	assert_true(WIFEXITED(st));
	size_t cap = 1 << 20;
	char *bufs[2] = {calloc(1, cap), calloc(1, cap)};
	const char *paths[2] = {po, pe};
	for (int q = 0; q < 2; q++) {
		FILE *f = fopen(paths[q], "r");
		assert_non_null(f);
		size_t r = fread(bufs[q], 1, cap - 1, f);
		bufs[q][r] = 0;
		fclose(f);
	}
	*out = bufs[0];
	*err = bufs[1];
	free(in);
	free(po);
	free(pe);
	free(cmd);
	return WEXITSTATUS(st);
}

static void test_good_input(void **state)
{
	(void)state;
	char *out, *err;
	const char *m = "6 3 2\n5 1 9\n5 1 9\n0 7 7\n3 3 3\n2 8 1\n9 9 0\n";
	assert_int_equal(run("", m, &out, &err), 0);
	assert_string_equal(out, "cost 6\n1\n1\n0\n0\n2\n2\n");
	free(out);
	free(err);
	assert_int_equal(run("--method hungarian", m, &out, &err), 0);
	assert_string_equal(out, "cost 6\n1\n1\n0\n0\n2\n2\n");
	free(out);
	free(err);
	assert_int_equal(run("--method hybrid --alpha 1", m, &out, &err), 0);
	assert_string_equal(out, "cost 6\n1\n1\n0\n0\n2\n2\n");
	free(out);
	free(err);
	assert_int_equal(run("--method heu --repeat 5", m, &out, &err), 0);
	assert_true(!strncmp(out, "cost ", 5));
	assert_true(!strncmp(err, "solve_us ", 9));
	free(out);
	free(err);
	/* CRLF, trailing blanks and a final blank line are accepted */
	assert_int_equal(run("", "2 2 1\r\n1 2 \r\n 3 0\r\n\r\n", &out, &err), 0);
	assert_string_equal(out, "cost 1\n0\n1\n");
	free(out);
	free(err);
}

static void expect_error(const char *args, const char *text, const char *needle)
{
	char *out, *err;
	int rc = run(args, text, &out, &err);
	if (rc == 0 || !strstr(err, needle))
		fail_msg("input %s: rc %d, stderr '%s', wanted '%s'", text, rc, err, needle);
	free(out);
	free(err);
}

static void test_bad_input(void **state)
{
	(void)state;
	expect_error("", "", ":1: header");
	expect_error("", "4 2\n", ":1: header");
	expect_error("", "4 2 2 9\n", ":1: header");
	expect_error("", "5 2 2\n", ":1: k = 5 but m * n");
	expect_error("", "2 0 2\n", ":1: n = 0");
	expect_error("", "x 2 1\n", ":1: header: value 'x'");
	expect_error("", "2 2 1\n1 2\n3 -4\n", ":3: row 1, column 1: value '-4' is negative");
	expect_error("", "2 2 1\n1 2\n3 4x\n", ":3: row 1, column 1: value '4x' is not");
	expect_error("", "2 2 1\n1 2\n3 99999999999999999999999\n", ":3: row 1, column 1: value");
	expect_error("", "2 2 1\n1 2\n3 17592186044416\n", "overflows");
	expect_error("", "2 2 1\n1 2\n3\n", ":3: row 1: expected 2 values, found 1");
	expect_error("", "2 2 1\n1 2\n3 4 5\n", ":3: row 1: expected 2 values, found more");
	expect_error("", "2 2 1\n1 2\n", ":3: file ends after 1 of 2 rows");
	expect_error("", "2 2 1\n1 2\n\n3 4\n", ":3: row 1: expected 2 values, found 0");
	expect_error("", "2 2 1\n1 2\n3 4\n5 6\n", ":4: unexpected data after the 2 rows");
	expect_error("--method nope", "2 2 1\n1 2\n3 4\n", "unknown method");
	expect_error("--alpha 2", "2 2 1\n1 2\n3 4\n", "--alpha");
	expect_error("--repeat 0", "2 2 1\n1 2\n3 4\n", "--repeat");
}

int main(void)
{
	dir = esd_test_mkdtemp("esd-solve");
	bin = esd_test_bin("esd-solve");
	if (access(bin, X_OK))
		ESD_TEST_SKIP("%s not built", bin);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_good_input),
	    cmocka_unit_test(test_bad_input),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	esd_test_rmtree(dir);
	free(dir);
	free(bin);
	return rc;
}
