/*
 * A sample source over a dataset stream (esd/dataset.h): the global batch
 * at cursor c is samples [c, c + k) of the file, the same samples every
 * node daemon reads for that iteration, so the reference and the runtime
 * train on identical batches.
 */
#include "reftrain.h"

#include <errno.h>
#include <stdlib.h>

#include <esd/dataset.h>

static int64_t stream_next(void *arg, uint64_t cursor, uint32_t k, esd_key_t *keys,
                           uint32_t *bag_off, float *labels, float *dense)
{
	struct esd_ds_reader *r = arg;
	int rc;
	if (esd_ds_tell(r) != cursor) {
		rc = esd_ds_seek(r, cursor);
		if (rc)
			return rc == -EINVAL ? 0 : rc; /* past the end: no samples */
	}
	const struct esd_ds_info *in = esd_ds_reader_info(r);
	return esd_ds_read_bags(r, k, labels, in->ndense ? dense : NULL, keys,
	                        (uint64_t)k * esd_ds_keys_per_sample(in), bag_off);
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
	src->tables = in->ntables;
	src->dense = in->ndense;
	src->width = esd_ds_keys_per_sample(in);
	src->next = stream_next;
	src->arg = r;
	return 0;
}

void esd_ref_stream_close(struct esd_ref_source *src)
{
	if (src && src->next == stream_next) {
		esd_ds_close(src->arg);
		src->arg = NULL;
		src->next = NULL;
	}
}
