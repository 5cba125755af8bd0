/*
 * fuzz_lines.h - shared body of the line-parser fuzz targets: split the
 * input at newlines and feed each line to the parser, checking the
 * parser's promises (IDs below their table's rows, label 0/1, bags within
 * their bound).
 */
#ifndef ESD_DATA_FUZZ_LINES_H
#define ESD_DATA_FUZZ_LINES_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* tsv-multi-hot: every bag within its bound and the line's room, every ID
 * below its table's rows, every weight (--weighted) finite. */
static void check_bags(const struct ds_parse_ctx *c, const struct ds_sample *s)
{
	size_t k = 0;
	for (uint32_t t = 0; t < c->ntables; t++) {
		if (s->lens[t] > c->max_bag[t] || s->lens[t] > s->bag_cap - k)
			abort();
		for (uint32_t j = 0; j < s->lens[t]; j++, k++)
			if (s->bag_ids[k] >= c->rows[t] || (c->weighted && !isfinite(s->bag_wts[k])))
				abort();
	}
}

static void check_sample(const struct ds_parse_ctx *c, const struct ds_sample *s)
{
	if (s->label > 1)
		abort();
	if (c->fmt == DS_FMT_MULTI_HOT) {
		check_bags(c, s);
		return;
	}
	for (uint32_t t = 0; t < c->ntables; t++)
		if (s->ids[t] >= c->rows[t])
			abort();
}

/* Parse every line of data with c; the first line goes to the header
 * parser when header is set (Avazu). */
static void fuzz_lines(struct ds_parse_ctx *c, const uint8_t *data, size_t size, int header)
{
	static uint64_t bag_ids[256]; /* tsv-multi-hot's bags: a small room, so it fills */
	static float bag_wts[256];
	struct ds_sample s;
	char why[256];
	size_t start = 0;
	s.bag_ids = bag_ids;
	s.bag_wts = bag_wts;
	s.bag_cap = sizeof(bag_ids) / sizeof(bag_ids[0]);
	int first = 1;
	while (start <= size) {
		const uint8_t *nl = memchr(data + start, '\n', size - start);
		size_t end = nl ? (size_t)(nl - data) : size;
		const char *line = (const char *)data + start;
		size_t len = end - start;
		if (first && header) {
			if (esd_ds_parse_header(c, line, len, why, sizeof(why)))
				return;
		} else if (esd_ds_parse_line(c, line, len, &s, why, sizeof(why)) == 0) {
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
