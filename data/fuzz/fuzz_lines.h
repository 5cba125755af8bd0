/*
 * fuzz_lines.h - shared body of the line-parser fuzz targets: split the
 * input at newlines and feed each line to the parser, checking the
 * parser's promises (IDs below their table's rows, label 0/1).
 */
#ifndef ESD_DATA_FUZZ_LINES_H
#define ESD_DATA_FUZZ_LINES_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_sample(const struct ds_parse_ctx *c, const struct ds_sample *s)
{
	if (s->label > 1)
		abort();
	for (uint32_t t = 0; t < c->ntables; t++)
		if (s->ids[t] >= c->rows[t])
			abort();
}

/* Parse every line of data with c; the first line goes to the header
 * parser when header is set (Avazu). */
static void fuzz_lines(struct ds_parse_ctx *c, const uint8_t *data, size_t size, int header)
{
	struct ds_sample s;
	char why[256];
	size_t start = 0;
	int first = 1;
	while (start <= size) {
		const uint8_t *nl = memchr(data + start, '\n', size - start);
		size_t end = nl ? (size_t)(nl - data) : size;
		const char *line = (const char *)data + start;
		size_t len = end - start;
		if (first && header) {
			if (ds_parse_header(c, line, len, why, sizeof(why)))
				return;
		} else if (ds_parse_line(c, line, len, &s, why, sizeof(why)) == 0) {
			check_sample(c, &s);
		} else if (!memchr(why, 0, sizeof(why))) {
			abort(); /* the reason must be a terminated string */
		}
		first = 0;
		if (!nl)
			break;
		start = end + 1;
	}
}

#endif
