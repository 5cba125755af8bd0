/*
 * fuzz_replay.c - runs a fuzz target's LLVMFuzzerTestOneInput over every file
 * of the corpus directories (or files) given on the command line, so the
 * committed corpus is a regression test in every build, sanitizers
 * included. Fails when it finds no input at all.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return -1;
	}
	size_t cap = 1 << 16, n = 0;
	uint8_t *buf = malloc(cap);
	size_t g;
	while (buf && (g = fread(buf + n, 1, cap - n, f)) > 0) {
		n += g;
		if (n == cap) {
			uint8_t *nb = realloc(buf, cap *= 2);
			if (!nb) {
				free(buf);
				buf = NULL;
			}
			buf = nb;
		}
	}
	fclose(f);
	if (!buf)
		return -1;
	LLVMFuzzerTestOneInput(buf, n);
	free(buf);
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
	int count = 0;
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st)) {
			perror(argv[i]);
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			if (run_file(argv[i]))
				return 1;
			count++;
			continue;
		}
		struct dirent **ents;
		int n = scandir(argv[i], &ents, NULL, NULL);
		if (n < 0) {
			perror(argv[i]);
			return 1;
		}
		char **names = calloc((size_t)n + 1, sizeof(char *));
		int m = 0;
		for (int e = 0; e < n; e++) {
			if (ents[e]->d_name[0] != '.' &&
			    asprintf(&names[m], "%s/%s", argv[i], ents[e]->d_name) > 0)
				m++;
			free(ents[e]);
		}
		free(ents);
		qsort(names, (size_t)m, sizeof(char *), by_name);
		for (int e = 0; e < m; e++) {
			if (run_file(names[e]))
				return 1;
			free(names[e]);
			count++;
		}
		free(names);
	}
	printf("replayed %d inputs\n", count);
	return count ? 0 : 1;
}
