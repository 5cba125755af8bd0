/* Fuzz target: the Avazu CSV header and line parsers (parse.c). The first
 * line of the input is the header, the others data lines. */
#include "fuzz_lines.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ds_parse_ctx c;
	esd_ds_parse_init(&c, DS_FMT_AVAZU, NULL);
	fuzz_lines(&c, data, size, 1);
	return 0;
}
