/* Replays the esd-solve parser's fuzz corpus: files named good-* parse,
 * bad-* are refused with an error naming a line; none may crash (the
 * sanitizer build runs this too). */
#include "testutil.h"

#include "parse.h"

#include <dirent.h>
#include <string.h>

static void test_corpus(void **state)
{
	(void)state;
	char *dir = esd_test_src("tests/dispatch/corpus/esd-solve");
	DIR *d = opendir(dir);
	assert_non_null(d);
	struct dirent *e;
	unsigned files = 0;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char *path;
		assert_true(asprintf(&path, "%s/%s", dir, e->d_name) > 0);
		FILE *f = fopen(path, "rb");
		assert_non_null(f);
		char buf[1 << 16];
		size_t len = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[len] = 0;
		struct esd_solve_input in = {0};
		char err[256] = "";
		int rc = esd_solve_parse(buf, len, &in, err, sizeof(err));
		if (!strncmp(e->d_name, "good-", 5)) {
			if (rc)
				fail_msg("%s: %s", e->d_name, err);
		} else if (!strncmp(e->d_name, "bad-", 4)) {
			if (!rc)
				fail_msg("%s parsed", e->d_name);
			/* the message starts with the line number */
			assert_true(err[0] >= '1' && err[0] <= '9');
		}
		if (!rc) /* the fuzzer's inputs (neither good- nor bad-) parse too */
			free(in.cost);
		free(path);
		files++;
	}
	closedir(d);
	assert_true(files >= 10);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_corpus),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
