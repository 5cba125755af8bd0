/*
 * libFuzzer target for the esd-solve file parser (built with -DESD_FUZZ=ON
 * and clang). Its corpus, tests/dispatch/corpus/esd-solve, replays as the
 * test test_esd_solve_corpus in every build.
 */
#include "parse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = 0;
	struct esd_solve_input in = {0};
	char err[256];
	if (esd_solve_parse(text, size, &in, err, sizeof(err)) == 0)
		free(in.cost);
	free(text);
	return 0;
}
