/* Replays the checkpoint fuzz corpus through LLVMFuzzerTestOneInput (the
 * test test_fuzz_ckpt_corpus): every file once; a crash fails the test.
 * Usage: fuzz_ckpt_replay DIR... */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "%s: cannot open\n", path);
		return -1;
	}
	uint8_t *buf = malloc(1u << 20);
	size_t n = buf ? fread(buf, 1, 1u << 20, f) : 0;
	fclose(f);
	if (!buf)
		return -1;
	/* an exact-size copy, so ASan sees reads past the input */
	uint8_t *exact = malloc(n ? n : 1);
	memcpy(exact, buf, n);
	LLVMFuzzerTestOneInput(exact, n);
	free(exact);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	int files = 0;
	for (int i = 1; i < argc; i++) {
		DIR *d = opendir(argv[i]);
		if (!d) {
			fprintf(stderr, "%s: not a directory\n", argv[i]);
			return 1;
		}
		struct dirent *e;
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.')
				continue;
			char path[4096];
			snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
			if (replay_file(path)) {
				closedir(d);
				return 1;
			}
			files++;
		}
		closedir(d);
	}
	printf("replayed %d inputs\n", files);
	return files ? 0 : 1;
}
