/* Fuzz target: the dataset stream reader (reader.c) on arbitrary bytes:
 * open, read everything in odd-sized batches, seek back and read again. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <esd/dataset.h>
#include <esd/log.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("fuzz-stream", MFD_CLOEXEC);
	if (fd < 0)
		return 0;
	if (write(fd, data, size) != (ssize_t)size) {
		close(fd);
		return 0;
	}
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	struct esd_ds_reader *r;
	if (esd_ds_open(path, &r) == 0) {
		const struct esd_ds_info *in = esd_ds_reader_info(r);
		enum { K = 37 };
		float *labels = malloc(K * sizeof(float));
		float *dense = malloc((size_t)K * (in->ndense + 1) * sizeof(float));
		esd_key_t *keys = malloc((size_t)K * in->ntables * sizeof(esd_key_t));
		if (labels && dense && keys) {
			for (int pass = 0; pass < 2; pass++) {
				int64_t got;
				while ((got = esd_ds_read(r, K, labels, dense, keys)) > 0)
					for (int64_t i = 0; i < got * in->ntables; i++)
						if (esd_key_id(keys[i]) >=
						    in->rows[esd_key_table(keys[i])])
							abort();
				esd_ds_seek(r, in->nsamples / 2);
			}
		}
		free(labels);
		free(dense);
		free(keys);
		esd_ds_close(r);
	}
	close(fd);
	return 0;
}
