/* Fuzz target of the checkpoint reader: any bytes given as a file are
 * either refused with an error or fully readable (rows and dense table),
 * never a crash. Built with libFuzzer under ESD_FUZZ; its corpus replays
 * as the test test_fuzz_ckpt_corpus in every build. */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <esd/ckpt.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int count_row(void *arg, esd_key_t key, uint64_t clock, const float *v, const float *s)
{
	(void)key, (void)clock, (void)s;
	*(volatile float *)arg += v[0];
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct esd_ckpt_reader *r;
	struct esd_ckpt_error err;
	int fd = memfd_create("fuzz-ckpt", MFD_CLOEXEC);
	if (fd < 0)
		return 0;
	size_t off = 0;
	while (off < size) {
		ssize_t w = write(fd, data + off, size - off);
		if (w <= 0)
			goto out;
		off += (size_t)w;
	}
	if (esd_ckpt_open_fd(fd, &r, &err) == 0) {
		const struct esd_ckpt_info *in = esd_ckpt_info(r);
		float sink = 0;
		esd_ckpt_read_rows(r, count_row, &sink);
		uint64_t n =
		    in->meta.dense_len * (1 + esd_optimizer_state_floats(in->meta.optimizer));
		if (n < (1u << 20)) {
			float *d = malloc((n + 1) * sizeof(float));
			if (d)
				esd_ckpt_read_dense(r, d, d + in->meta.dense_len);
			free(d);
		}
		esd_ckpt_close(r);
	}
out:
	close(fd);
	return 0;
}
