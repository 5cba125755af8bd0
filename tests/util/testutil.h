/*
 * Helpers shared by the test programs (not installed).
 *
 * Exit codes follow automake/ctest: 0 pass, 1 fail, 77 skip. A test that
 * needs what the machine lacks calls ESD_TEST_SKIP("reason").
 */
#ifndef ESD_TESTUTIL_H
#define ESD_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#define ESD_TEST_SKIP_CODE 77

#define ESD_TEST_SKIP(...)                                                                         \
	do {                                                                                       \
		fprintf(stderr, "SKIP: " __VA_ARGS__);                                             \
		fputc('\n', stderr);                                                               \
		exit(ESD_TEST_SKIP_CODE);                                                          \
	} while (0)

/* Make a fresh private directory under $TMPDIR (or /tmp) and return its
 * path (static buffer per call site is not needed: caller frees). */
char *esd_test_mkdtemp(const char *prefix);
/* rm -rf of a directory made by esd_test_mkdtemp. */
void esd_test_rmtree(const char *path);
/* Write a whole file; returns 0 or -errno. */
int esd_test_write_file(const char *path, const char *data, size_t len);
/* Path of a built program in the build tree (ESD_BIN_DIR/name), or of a
 * source file (ESD_SRC_DIR/rel); caller frees. */
char *esd_test_bin(const char *name);
char *esd_test_src(const char *rel);
/* A small deterministic PRNG for tests (splitmix64). */
uint64_t esd_test_rand(uint64_t *state);

#endif
