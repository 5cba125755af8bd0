/* Test helpers: temporary directories, files, paths into the build tree. */
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <string.h>
#include <unistd.h>

#include <esd/types.h>

char *esd_test_mkdtemp(const char *prefix)
{
	const char *tmp = getenv("TMPDIR");
	char *p;
	if (!tmp || !*tmp)
		tmp = "/tmp";
	if (asprintf(&p, "%s/%s.XXXXXX", tmp, prefix) < 0)
		return NULL;
	if (!mkdtemp(p)) {
		free(p);
		return NULL;
	}
	return p;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

void esd_test_rmtree(const char *path)
{
	if (path)
		nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int esd_test_write_file(const char *path, const char *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return -errno;
	while (len) {
		ssize_t w = write(fd, data, len);
		if (w < 0) {
			int e = -errno;
			close(fd);
			return e;
		}
		data += w;
		len -= (size_t)w;
	}
	return close(fd) ? -errno : 0;
}

char *esd_test_bin(const char *name)
{
	char *p;
	if (asprintf(&p, "%s/%s", ESD_BIN_DIR, name) < 0)
		return NULL;
	return p;
}

char *esd_test_src(const char *rel)
{
	char *p;
	if (asprintf(&p, "%s/%s", ESD_SRC_DIR, rel) < 0)
		return NULL;
	return p;
}

uint64_t esd_test_rand(uint64_t *state)
{
	return esd_splitmix64_next(state);
}
