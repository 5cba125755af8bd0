/*
 * A sample source over a dataset stream (esd/dataset.h): the global batch
 * at cursor c is samples c, c + 1, ..., c + k - 1 of the file, each taken
 * modulo the file's sample count (past its end the stream wraps around to
 * its first sample, as every node daemon reads it), so the reference and
 * the runtime train on identical batches whatever the number of passes.
 */
#include "reftrain.h"

#include <errno.h>
#include <stdlib.h>

#include <esd/dataset.h>

static int64_t stream_next_w(void *arg, uint64_t cursor, uint32_t k, esd_key_t *keys,
                             uint32_t *bag_off, float *labels, float *dense, float *weights)
{
	struct esd_ds_reader *r = arg;
	const struct esd_ds_info *in = esd_ds_reader_info(r);
	uint64_t at = cursor % in->nsamples; /* nsamples > 0: checked at open */
	int rc;
	if (esd_ds_tell(r) != at) {
		rc = esd_ds_seek(r, at);
		if (rc)
			return rc;
	}
	rc = esd_ds_read_wrap_w(r, k, labels, in->ndense ? dense : NULL, keys,
	                        (uint64_t)k * esd_ds_keys_per_sample(in), bag_off, weights);
	return rc ? rc : (int64_t)k;
}

static int64_t stream_next(void *arg, uint64_t cursor, uint32_t k, esd_key_t *keys,
                           uint32_t *bag_off, float *labels, float *dense)
{
	return stream_next_w(arg, cursor, k, keys, bag_off, labels, dense, NULL);
}

int esd_ref_stream_source(const char *path, struct esd_ref_source *src)
{
	struct esd_ds_reader *r;
	int rc;
	if (!path || !src)
		return -EINVAL;
	rc = esd_ds_open(path, &r);
	if (rc)
		return rc;
	const struct esd_ds_info *in = esd_ds_reader_info(r);
	if (!in->nsamples) {
		esd_ds_close(r);
		return -ENODATA;
	}
	src->tables = in->ntables;
	src->dense = in->ndense;
	src->width = esd_ds_keys_per_sample(in);
	src->next = stream_next;
	src->next_w = in->weighted ? stream_next_w : NULL;
	src->arg = r;
	src->samples = in->nsamples;
	return 0;
}

void esd_ref_stream_close(struct esd_ref_source *src)
{
	if (src && src->next == stream_next) {
		esd_ds_close(src->arg);
		src->arg = NULL;
		src->next = NULL;
		src->next_w = NULL;
	}
}
