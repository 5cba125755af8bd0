/* Fuzz target: the tsv-multi-hot line parser (parse.c): 2 dense values and
 * 3 bag tables, with ',' and with ';' between a bag's IDs, and weighted
 * (id:weight members, --weighted). */
#include "fuzz_lines.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint64_t rows[3] = {1000, 7, 1};
	static const uint32_t max_bag[3] = {64, 2, 300};
	struct ds_parse_ctx c;
	esd_ds_parse_init_multi_hot(&c, 3, 2, rows, max_bag, ',');
	fuzz_lines(&c, data, size, 0);
	esd_ds_parse_init_multi_hot(&c, 3, 2, rows, max_bag, ';');
	fuzz_lines(&c, data, size, 0);
	esd_ds_parse_init_multi_hot(&c, 3, 2, rows, max_bag, ',');
	c.weighted = 1;
	fuzz_lines(&c, data, size, 0);
	return 0;
}
