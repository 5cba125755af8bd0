/*
 * hot.c - hot-row files: FAE's static hot set, profiled offline from the
 * stream before training (the most frequent keys of its first samples)
 * and read by every process of the job (dispatch.replicate).
 *
 * Format (text, one key per line as esd-data dump prints keys):
 *
 *     # esd hot rows v1
 *     # any comment lines
 *     TABLE:ID
 *     ...
 *
 * Keys ascending, no duplicates; blank lines and lines starting with '#'
 * are ignored. The loader names file and line of every error.
 */
#include "format.h"
#include "stat.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HOT_MAGIC "# esd hot rows v1"

struct kc {
	uint32_t count;
	esd_key_t key;
};

/* most frequent first, ties to the smaller key */
static int cmp_kc(const void *a, const void *b)
{
	const struct kc *x = a, *y = b;
	if (x->count != y->count)
		return x->count > y->count ? -1 : 1;
	return (x->key > y->key) - (x->key < y->key);
}

static int cmp_key(const void *a, const void *b)
{
	esd_key_t x = *(const esd_key_t *)a, y = *(const esd_key_t *)b;
	return (x > y) - (x < y);
}

int esd_ds_hot_profile(const char *path, uint64_t limit, uint64_t count, esd_key_t **keys,
                       uint64_t *n, uint64_t *samples)
{
	if (!path || !keys || !n)
		return esd_ds_fail(-EINVAL, "hot profile: NULL argument");
	struct esd_ds_reader *r;
	int rc = esd_ds_open(path, &r);
	if (rc)
		return rc;
	const struct esd_ds_info *in = esd_ds_reader_info(r);
	const uint32_t nt = in->ntables;
	uint64_t total = 0, seen = 0, pos = 0, distinct = 0;
	for (uint32_t t = 0; t < nt; t++)
		total += in->rows[t];
	uint32_t *cnt[ESD_DS_MAX_TABLES] = {0};
	struct kc *all = NULL;
	if (total > DS_STAT_MAX_ROWS) {
		rc = esd_ds_fail(-ENOMEM,
		                 "%s: %" PRIu64 " rows in all, the profile counts at most %" PRIu64,
		                 path, total, (uint64_t)DS_STAT_MAX_ROWS);
		goto out;
	}
	rc = -ENOMEM;
	for (uint32_t t = 0; t < nt; t++)
		if (!(cnt[t] = calloc(in->rows[t] ? in->rows[t] : 1, sizeof(uint32_t))))
			goto out;
	if ((rc = esd_ds_count_accesses(r, limit, cnt, NULL, &seen, &pos)))
		goto out;
	for (uint32_t t = 0; t < nt; t++)
		for (uint64_t i = 0; i < in->rows[t]; i++)
			distinct += cnt[t][i] != 0;
	rc = -ENOMEM;
	if (!(all = malloc((distinct ? distinct : 1) * sizeof(*all))))
		goto out;
	uint64_t d = 0;
	for (uint32_t t = 0; t < nt; t++)
		for (uint64_t i = 0; i < in->rows[t]; i++)
			if (cnt[t][i])
				all[d++] = (struct kc){cnt[t][i], esd_key_make(t, i)};
	qsort(all, d, sizeof(*all), cmp_kc);
	if (count > d)
		count = d; /* never a key the profile did not see */
	esd_key_t *k = malloc((count ? count : 1) * sizeof(*k));
	if (!k)
		goto out;
	for (uint64_t i = 0; i < count; i++)
		k[i] = all[i].key;
	qsort(k, count, sizeof(*k), cmp_key);
	*keys = k;
	*n = count;
	if (samples)
		*samples = seen;
	rc = 0;
out:
	for (uint32_t t = 0; t < nt; t++)
		free(cnt[t]);
	free(all);
	esd_ds_close(r);
	return rc;
}

int esd_ds_hot_write(const char *path, const esd_key_t *keys, uint64_t n, const char *comment)
{
	char tmp[4096];
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return esd_ds_fail(-ENAMETOOLONG, "%s: path too long", path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return esd_ds_fail(-errno, "%s: %s", tmp, strerror(errno));
	fprintf(f, "%s\n", HOT_MAGIC);
	if (comment && *comment)
		fprintf(f, "# %s\n", comment);
	for (uint64_t i = 0; i < n; i++)
		fprintf(f, "%u:%" PRIu64 "\n", esd_key_table(keys[i]), esd_key_id(keys[i]));
	int err = ferror(f);
	if (fclose(f) || err) {
		unlink(tmp);
		return esd_ds_fail(-EIO, "%s: write failed", tmp);
	}
	if (rename(tmp, path)) {
		int e = errno;
		unlink(tmp);
		return esd_ds_fail(-e, "%s: %s", path, strerror(e));
	}
	return 0;
}

int esd_ds_hot_load(const char *path, esd_key_t **keys, uint64_t *n)
{
	if (!path || !keys || !n)
		return esd_ds_fail(-EINVAL, "hot rows: NULL argument");
	FILE *f = fopen(path, "r");
	if (!f)
		return esd_ds_fail(-errno, "%s: %s", path, strerror(errno));
	char line[256];
	uint64_t lineno = 0, cnt = 0, cap = 0;
	esd_key_t *k = NULL;
	int rc = 0;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		size_t len = strlen(line);
		if (len == sizeof(line) - 1 && line[len - 1] != '\n') {
			rc = esd_ds_fail(-EINVAL, "%s:%" PRIu64 ": line too long", path, lineno);
			goto out;
		}
		if (lineno == 1 && strncmp(line, HOT_MAGIC, strlen(HOT_MAGIC))) {
			rc = esd_ds_fail(-EINVAL, "%s:1: not a hot-row file (expected '%s')", path,
			                 HOT_MAGIC);
			goto out;
		}
		char *p = line;
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == '#' || *p == '\n' || *p == '\0')
			continue;
		char *end;
		errno = 0;
		unsigned long long t = strtoull(p, &end, 10);
		if (end == p || *end != ':' || errno || t >= ESD_MAX_TABLES) {
			rc = esd_ds_fail(-EINVAL,
			                 "%s:%" PRIu64 ": expected TABLE:ID with TABLE < %u", path,
			                 lineno, ESD_MAX_TABLES);
			goto out;
		}
		p = end + 1;
		errno = 0;
		unsigned long long id = strtoull(p, &end, 10);
		while (*end == ' ' || *end == '\t' || *end == '\r')
			end++;
		if (end == p || (*end != '\n' && *end) || errno || id > ESD_KEY_ID_MASK) {
			rc =
			    esd_ds_fail(-EINVAL, "%s:%" PRIu64 ": expected TABLE:ID with ID < 2^%d",
			                path, lineno, ESD_KEY_ID_BITS);
			goto out;
		}
		esd_key_t key = esd_key_make((uint32_t)t, id);
		if (cnt && key <= k[cnt - 1]) {
			rc = esd_ds_fail(
			    -EINVAL, "%s:%" PRIu64 ": key %llu:%llu %s", path, lineno, t, id,
			    key == k[cnt - 1] ? "repeated" : "out of order (keys ascend)");
			goto out;
		}
		if (cnt == cap) {
			cap = cap ? 2 * cap : 1024;
			esd_key_t *q = realloc(k, cap * sizeof(*k));
			if (!q) {
				rc = -ENOMEM;
				goto out;
			}
			k = q;
		}
		k[cnt++] = key;
	}
	if (ferror(f)) {
		rc = esd_ds_fail(-EIO, "%s: read error", path);
		goto out;
	}
	if (lineno == 0) {
		rc = esd_ds_fail(-EINVAL, "%s: empty file (not a hot-row file)", path);
		goto out;
	}
	*keys = k;
	*n = cnt;
	k = NULL;
out:
	free(k);
	fclose(f);
	return rc;
}
