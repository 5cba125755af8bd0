/* Fuzz target: the Criteo Sponsored Search TSV line parser (parse.c). */
#include "fuzz_lines.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint64_t small[ESD_DS_MAX_TABLES] = {[0 ... ESD_DS_MAX_TABLES - 1] = 7};
	struct ds_parse_ctx c;
	esd_ds_parse_init(&c, DS_FMT_SEARCH, NULL);
	fuzz_lines(&c, data, size, 0);
	esd_ds_parse_init(&c, DS_FMT_SEARCH, small); /* tiny tables: hashing bounds */
	fuzz_lines(&c, data, size, 0);
	return 0;
}
