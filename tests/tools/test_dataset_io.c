/*
 * Dataset stream reader and writer: round trips (f32 and bf16 dense, u32
 * and u64 IDs, zstd), batches across blocks, the data cursor (tell, seek,
 * rewind), and refusal of corrupt, truncated and unfinished files with a
 * message naming the file and the block or byte offset.
 */
#include "testutil.h"

#include <esd/dataset.h>
#include <esd/err.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

static char *dir;

struct sample_set {
	uint64_t n;
	uint32_t nt, nd;
	uint8_t *labels;
	float *dense;
	uint64_t *ids;
};

static char *path_of(const char *name)
{
	char *p;
	assert_true(asprintf(&p, "%s/%s", dir, name) > 0);
	return p;
}

static void info_init(struct esd_ds_info *in, uint32_t nt, uint32_t nd, uint64_t big)
{
	memset(in, 0, sizeof(*in));
	snprintf(in->shape, sizeof(in->shape), "test");
	in->ntables = nt;
	in->ndense = nd;
	for (uint32_t t = 0; t < nt; t++)
		in->rows[t] = t == 0 ? big : 10 + 97 * t;
	in->block_samples = 100;
	in->scale = 1;
}

/* Write n random samples; keep them in *ss. */
static void write_set(const char *path, const struct esd_ds_info *in, uint64_t n,
                      struct sample_set *ss, uint64_t seed)
{
	struct esd_ds_writer *w;
	ss->n = n;
	ss->nt = in->ntables;
	ss->nd = in->ndense;
	ss->labels = malloc(n);
	ss->dense = malloc(sizeof(float) * (n * in->ndense + 1));
	ss->ids = malloc(sizeof(uint64_t) * n * in->ntables);
	assert_int_equal(esd_ds_writer_open(path, in, &w), 0);
	for (uint64_t i = 0; i < n; i++) {
		ss->labels[i] = esd_test_rand(&seed) & 1;
		for (uint32_t j = 0; j < in->ndense; j++)
			ss->dense[i * in->ndense + j] = (float)(esd_test_rand(&seed) % 1000) / 8.0f;
		for (uint32_t t = 0; t < in->ntables; t++)
			ss->ids[i * in->ntables + t] = esd_test_rand(&seed) % in->rows[t];
		assert_int_equal(esd_ds_writer_append(w, ss->labels[i], ss->dense + i * in->ndense,
		                                      ss->ids + i * in->ntables),
		                 0);
	}
	assert_int_equal(esd_ds_writer_count(w), n);
	assert_int_equal(esd_ds_writer_close(w), 0);
}

static void free_set(struct sample_set *ss)
{
	free(ss->labels);
	free(ss->dense);
	free(ss->ids);
}

/* Read [from, from + k) in batches of b and compare with the set. */
static void check_range(struct esd_ds_reader *r, const struct sample_set *ss, uint64_t from,
                        uint64_t k, uint64_t b, int bf16)
{
	float *labels = malloc(sizeof(float) * b);
	float *dense = malloc(sizeof(float) * (b * ss->nd + 1));
	esd_key_t *keys = malloc(sizeof(esd_key_t) * b * ss->nt);
	assert_int_equal(esd_ds_seek(r, from), 0);
	uint64_t done = 0;
	while (done < k) {
		uint64_t want = k - done < b ? k - done : b;
		int64_t got = esd_ds_read(r, want, labels, dense, keys);
		assert_int_equal(got, (int64_t)want);
		for (uint64_t s = 0; s < want; s++) {
			uint64_t i = from + done + s;
			assert_true(labels[s] == (float)ss->labels[i]);
			for (uint32_t j = 0; j < ss->nd; j++) {
				float e = ss->dense[i * ss->nd + j], g = dense[s * ss->nd + j];
				if (bf16)
					assert_true(g == e || (g - e) * (g - e) <= e * e / 1e4);
				else
					assert_true(g == e);
			}
			for (uint32_t t = 0; t < ss->nt; t++) {
				esd_key_t key = keys[s * ss->nt + t];
				assert_int_equal(esd_key_table(key), t);
				assert_int_equal(esd_key_id(key), ss->ids[i * ss->nt + t]);
			}
		}
		done += want;
		assert_int_equal(esd_ds_tell(r), from + done);
	}
	free(labels);
	free(dense);
	free(keys);
}

static void roundtrip(uint64_t big, uint32_t dense_format, int zstd)
{
	struct esd_ds_info in;
	struct sample_set ss;
	struct esd_ds_reader *r;
	char *p = path_of("rt.esd");
	info_init(&in, 5, 3, big);
	in.dense_format = dense_format;
	in.zstd_level = zstd;
	in.seed = 42;
	in.zipf[2] = 1.5;
	snprintf(in.source, sizeof(in.source), "unit test");
	write_set(p, &in, 1234, &ss, 7);
	assert_int_equal(esd_ds_open(p, &r), 0);
	const struct esd_ds_info *ri = esd_ds_reader_info(r);
	assert_int_equal(ri->nsamples, 1234);
	assert_int_equal(ri->ntables, 5);
	assert_int_equal(ri->ndense, 3);
	assert_int_equal(ri->rows[0], big);
	assert_int_equal(ri->seed, 42);
	assert_true(ri->zipf[2] == 1.5);
	assert_string_equal(ri->shape, "test");
	assert_string_equal(ri->source, "unit test");
	int bf = dense_format == ESD_DS_DENSE_BF16;
	check_range(r, &ss, 0, 1234, 64, bf); /* batches straddle blocks of 100 */
	check_range(r, &ss, 0, 1234, 1000, bf);
	check_range(r, &ss, 1000, 234, 7, bf); /* the short last block */
	check_range(r, &ss, 99, 2, 2, bf);     /* across one block boundary */
	/* end of stream: 0, then short reads only at the end */
	float lab[10];
	assert_int_equal(esd_ds_seek(r, 1230), 0);
	assert_int_equal(esd_ds_read(r, 10, lab, NULL, NULL), 4);
	assert_int_equal(esd_ds_read(r, 10, lab, NULL, NULL), 0);
	assert_int_equal(esd_ds_seek(r, 1235), -EINVAL);
	assert_int_equal(esd_ds_seek(r, 1234), 0);
	esd_ds_rewind(r);
	assert_int_equal(esd_ds_tell(r), 0);
	check_range(r, &ss, 0, 10, 10, bf);
	esd_ds_close(r);
	free_set(&ss);
	free(p);
}

static void test_roundtrip_f32(void **state)
{
	(void)state;
	roundtrip(1000, ESD_DS_DENSE_F32, 0);
}

static void test_roundtrip_bf16_u64_zstd(void **state)
{
	(void)state;
	roundtrip(UINT64_C(1) << 40, ESD_DS_DENSE_BF16, 3); /* table 0 stores u64 IDs */
}

/* A checkpoint stores the cursor; a fresh reader seeks to it and continues
 * with exactly the samples the first reader would have read next. */
static void test_cursor_restart(void **state)
{
	(void)state;
	struct esd_ds_info in;
	struct sample_set ss;
	struct esd_ds_reader *a, *b;
	char *p = path_of("cursor.esd");
	info_init(&in, 3, 0, 50);
	write_set(p, &in, 777, &ss, 9);
	assert_int_equal(esd_ds_open(p, &a), 0);
	esd_key_t ka[3 * 128], kb[3 * 128];
	for (int it = 0; it < 3; it++)
		assert_int_equal(esd_ds_read(a, 128, NULL, NULL, ka), 128);
	uint64_t cursor = esd_ds_tell(a);
	assert_int_equal(cursor, 384);
	assert_int_equal(esd_ds_open(p, &b), 0);
	assert_int_equal(esd_ds_seek(b, cursor), 0);
	for (int it = 0; it < 4; it++) {
		int64_t ga = esd_ds_read(a, 128, NULL, NULL, ka);
		int64_t gb = esd_ds_read(b, 128, NULL, NULL, kb);
		assert_int_equal(ga, gb);
		assert_memory_equal(ka, kb, (size_t)ga * 3 * sizeof(esd_key_t));
	}
	assert_int_equal(esd_ds_tell(a), 777);
	esd_ds_close(a);
	esd_ds_close(b);
	free_set(&ss);
	free(p);
}

static uint64_t digest_of(const char *p)
{
	struct esd_ds_reader *r;
	uint64_t d = 0;
	assert_int_equal(esd_ds_open(p, &r), 0);
	assert_int_equal(esd_ds_digest(r, &d), 0);
	assert_string_equal(esd_ds_path(r), p);
	esd_ds_close(r);
	return d;
}

/* The content digest: the same samples written twice give the same digest
 * (whatever the path), one sample more or one label changed another. */
static void test_digest(void **state)
{
	(void)state;
	struct esd_ds_info in;
	struct sample_set a, b, c, d;
	char *pa = path_of("dig-a.esd"), *pb = path_of("dig-b.esd"), *pc = path_of("dig-c.esd"),
	     *pd = path_of("dig-d.esd");
	info_init(&in, 3, 2, 50);
	write_set(pa, &in, 450, &a, 21);
	write_set(pb, &in, 450, &b, 21);
	write_set(pc, &in, 451, &c, 21);
	write_set(pd, &in, 450, &d, 22);
	uint64_t da = digest_of(pa);
	assert_int_not_equal(da, 0);
	assert_int_equal(digest_of(pb), da);
	assert_int_not_equal(digest_of(pc), da);
	assert_int_not_equal(digest_of(pd), da);
	free_set(&a);
	free_set(&b);
	free_set(&c);
	free_set(&d);
	free(pa);
	free(pb);
	free(pc);
	free(pd);
}

static void flip_byte(const char *p, off_t off)
{
	int fd = open(p, O_RDWR);
	uint8_t c;
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &c, 1, off), 1);
	c ^= 0x5a;
	assert_int_equal(pwrite(fd, &c, 1, off), 1);
	close(fd);
}

static off_t file_size(const char *p)
{
	struct stat st;
	assert_int_equal(stat(p, &st), 0);
	return st.st_size;
}

static void test_corrupt_block(void **state)
{
	(void)state;
	struct esd_ds_info in;
	struct sample_set ss;
	struct esd_ds_reader *r;
	char *p = path_of("corrupt.esd");
	info_init(&in, 2, 1, 100);
	write_set(p, &in, 500, &ss, 3);
	/* header 208 + 2 tables * 16 + 8 = 248; a block: 40 + 100 * (1 label + 4 dense +
	 * 2 x 4 IDs) */
	off_t block2 = 248 + 2 * (40 + 1300);
	flip_byte(p, block2 + 40 + 17);
	assert_int_equal(esd_ds_open(p, &r), 0); /* the index is intact */
	esd_key_t keys[2 * 300];
	assert_int_equal(esd_ds_read(r, 150, NULL, NULL, keys), 150);
	assert_int_equal(esd_ds_read(r, 100, NULL, NULL, keys), -ESD_EBADSUM);
	assert_non_null(strstr(esd_ds_last_error(), "corrupt.esd"));
	assert_non_null(strstr(esd_ds_last_error(), "block 2"));
	char at[64];
	snprintf(at, sizeof(at), "byte %lld", (long long)block2);
	assert_non_null(strstr(esd_ds_last_error(), at));
	assert_int_equal(esd_ds_tell(r), 150); /* nothing returned twice */
	/* blocks after the bad one still read */
	assert_int_equal(esd_ds_seek(r, 300), 0);
	assert_int_equal(esd_ds_read(r, 200, NULL, NULL, NULL), 200);
	esd_ds_close(r);
	/* a damaged header is refused at open */
	flip_byte(p, 60);
	assert_int_equal(esd_ds_open(p, &r), -ESD_EBADSUM);
	assert_non_null(strstr(esd_ds_last_error(), "header checksum"));
	flip_byte(p, 60);
	flip_byte(p, 0);
	assert_int_equal(esd_ds_open(p, &r), -ESD_EBADMAGIC);
	free_set(&ss);
	free(p);
}

static void test_truncated(void **state)
{
	(void)state;
	struct esd_ds_info in;
	struct sample_set ss;
	struct esd_ds_reader *r;
	char *p = path_of("trunc.esd");
	info_init(&in, 2, 1, 100);
	write_set(p, &in, 500, &ss, 4);
	off_t size = file_size(p);
	off_t cuts[] = {size - 1, size - 20, size / 2, 300, 248, 100, 7, 0};
	for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
		assert_int_equal(truncate(p, cuts[i]), 0);
		int rc = esd_ds_open(p, &r);
		assert_true(rc == -EPROTO || rc == -ESD_EBADMAGIC);
		assert_non_null(strstr(esd_ds_last_error(), "trunc.esd"));
		if (cuts[i] >= 248)
			assert_non_null(strstr(esd_ds_last_error(), "truncated"));
	}
	/* a file that is not a stream */
	assert_int_equal(esd_test_write_file(p, "label\tI1\n1\t2\n", 13), 0);
	assert_int_equal(esd_ds_open(p, &r), -ESD_EBADMAGIC);
	assert_int_equal(esd_ds_open("/nonexistent/x.esd", &r), -ENOENT);
	free_set(&ss);
	free(p);
}

/* A writer that never closed (crash) leaves a file readers refuse. */
static void test_unfinished_writer(void **state)
{
	(void)state;
	struct esd_ds_info in;
	struct esd_ds_writer *w;
	struct esd_ds_reader *r;
	char *p = path_of("open.esd");
	info_init(&in, 2, 0, 100);
	assert_int_equal(esd_ds_writer_open(p, &in, &w), 0);
	uint64_t ids[2] = {1, 2};
	for (int i = 0; i < 250; i++)
		assert_int_equal(esd_ds_writer_append(w, 1, NULL, ids), 0);
	/* blocks 0 and 1 are on disk, no index yet */
	assert_int_equal(esd_ds_open(p, &r), -EPROTO);
	assert_non_null(strstr(esd_ds_last_error(), "never closed"));
	esd_ds_writer_discard(w);
	assert_int_equal(access(p, F_OK), -1);
	free(p);
}

static void test_writer_ranges(void **state)
{
	(void)state;
	struct esd_ds_info in;
	struct esd_ds_writer *w;
	struct esd_ds_reader *r;
	char *p = path_of("ranges.esd");
	info_init(&in, 2, 0, 100);
	assert_int_equal(esd_ds_writer_open(p, &in, &w), 0);
	uint64_t ok[2] = {99, 10}, big[2] = {100, 0};
	assert_int_equal(esd_ds_writer_append(w, 0, NULL, ok), 0);
	assert_int_equal(esd_ds_writer_append(w, 0, NULL, big), -ERANGE);
	assert_int_equal(esd_ds_writer_append(w, 2, NULL, ok), -ERANGE);
	assert_int_equal(esd_ds_writer_count(w), 1);
	assert_int_equal(esd_ds_writer_close(w), 0);
	assert_int_equal(esd_ds_open(p, &r), 0);
	assert_int_equal(esd_ds_reader_info(r)->nsamples, 1);
	esd_ds_close(r);
	/* an empty stream is valid */
	assert_int_equal(esd_ds_writer_open(p, &in, &w), 0);
	assert_int_equal(esd_ds_writer_close(w), 0);
	assert_int_equal(esd_ds_open(p, &r), 0);
	assert_int_equal(esd_ds_read(r, 10, NULL, NULL, NULL), 0);
	esd_ds_close(r);
	/* bad descriptions */
	in.ntables = 0;
	assert_int_equal(esd_ds_writer_open(p, &in, &w), -EINVAL);
	info_init(&in, 2, 0, 0);
	assert_int_equal(esd_ds_writer_open(p, &in, &w), -EINVAL);
	info_init(&in, 2, ESD_DS_MAX_DENSE + 1, 5);
	assert_int_equal(esd_ds_writer_open(p, &in, &w), -EINVAL);
	esd_ds_writer_close(NULL);
	esd_ds_writer_discard(NULL);
	esd_ds_close(NULL);
	free(p);
}

/* Regression: a header claiming 2^64-1 samples and no blocks made the
 * block count wrap to 0 and the first read index past the block index. */
static void test_nsamples_overflow_header(void **state)
{
	(void)state;
	struct esd_ds_info in;
	struct esd_ds_writer *w;
	struct esd_ds_reader *r;
	char *p = path_of("overflow.esd");
	info_init(&in, 1, 0, 10);
	assert_int_equal(esd_ds_writer_open(p, &in, &w), 0);
	assert_int_equal(esd_ds_writer_close(w), 0);
	int fd = open(p, O_RDWR);
	uint8_t h[208 + 16 + 8];
	assert_int_equal(pread(fd, h, sizeof(h), 0), (ssize_t)sizeof(h));
	uint64_t n = UINT64_MAX;
	memcpy(h + 72, &n, 8); /* samples */
	uint64_t sum = XXH64(h, sizeof(h) - 8, 0);
	memcpy(h + sizeof(h) - 8, &sum, 8);
	assert_int_equal(pwrite(fd, h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);
	assert_int_equal(esd_ds_open(p, &r), -EPROTO);
	assert_non_null(strstr(esd_ds_last_error(), "blocks for"));
	free(p);
}

/* A stream with bags: table 0 one ID, table 1 bags of 0..5 IDs (u8
 * lengths), table 2 bags of 0..300 (u16 lengths), over several blocks. */
static void test_bags(void **state)
{
	(void)state;
	struct esd_ds_info in;
	struct esd_ds_writer *w;
	struct esd_ds_reader *r;
	char *p = path_of("bags.esd");
	info_init(&in, 3, 2, 100);
	in.block_samples = 64;
	in.max_bag[1] = 5;
	in.max_bag[2] = 300;
	enum { N = 200, MAXK = 1 + 5 + 300 };
	static uint32_t lens[N][3];
	static uint64_t ids[N][MAXK];
	static float dense[N][2];
	uint8_t labels[N];
	uint64_t seed = 11, total = 0;
	assert_int_equal(esd_ds_writer_open(p, &in, &w), 0);
	for (int i = 0; i < N; i++) {
		labels[i] = esd_test_rand(&seed) & 1;
		dense[i][0] = (float)i;
		dense[i][1] = -(float)i / 3;
		lens[i][0] = 1;
		lens[i][1] = (uint32_t)(esd_test_rand(&seed) % 6);
		lens[i][2] = i % 50 == 7 ? 300 : (uint32_t)(esd_test_rand(&seed) % 4);
		uint32_t k = 0;
		for (uint32_t t = 0; t < 3; t++)
			for (uint32_t j = 0; j < lens[i][t]; j++)
				ids[i][k++] = esd_test_rand(&seed) % in.rows[t];
		total += k;
		assert_int_equal(esd_ds_writer_append_bags(w, labels[i], dense[i], lens[i], ids[i]), 0);
	}
	/* out of range: a bag over its table's max, a second ID in a one-ID table */
	uint32_t bad[3] = {1, 6, 0}, two[3] = {2, 0, 0};
	assert_int_equal(esd_ds_writer_append_bags(w, 0, dense[0], bad, ids[0]), -ERANGE);
	assert_non_null(strstr(esd_ds_last_error(), "table 1: 6 IDs"));
	assert_int_equal(esd_ds_writer_append_bags(w, 0, dense[0], two, ids[0]), -ERANGE);
	assert_int_equal(esd_ds_writer_close(w), 0);

	assert_int_equal(esd_ds_open(p, &r), 0);
	assert_int_equal(esd_ds_reader_info(r)->max_bag[2], 300);
	/* table 1's bound came down to its longest bag (at least 2) at close */
	uint32_t longest = 2;
	for (int i = 0; i < N; i++)
		longest = lens[i][1] > longest ? lens[i][1] : longest;
	assert_int_equal(esd_ds_reader_info(r)->max_bag[1], longest);
	esd_key_t one[3];
	assert_int_equal(esd_ds_read(r, 1, NULL, NULL, one), -ENOTSUP);
	assert_non_null(strstr(esd_ds_last_error(), "table 1 has bags"));
	/* all of it, 37 samples a call */
	esd_key_t *keys = malloc(sizeof(esd_key_t) * total);
	uint32_t off[37 * 3 + 1];
	float lab[37], den[37 * 2];
	uint64_t at = 0;
	while (at < N) {
		int64_t got = esd_ds_read_bags(r, 37, lab, den, keys, total, off);
		assert_true(got > 0);
		for (int64_t s2 = 0; s2 < got; s2++) {
			uint64_t i = at + (uint64_t)s2;
			assert_true(lab[s2] == labels[i] && den[2 * s2 + 1] == dense[i][1]);
			uint32_t k = 0;
			for (uint32_t t = 0; t < 3; t++) {
				const uint32_t *b = off + s2 * 3 + t;
				assert_int_equal(b[1] - b[0], lens[i][t]);
				for (uint32_t j = 0; j < lens[i][t]; j++, k++)
					assert_true(keys[b[0] + j] == esd_key_make(t, ids[i][k]));
			}
		}
		at += (uint64_t)got;
	}
	assert_int_equal(esd_ds_read_bags(r, 5, NULL, NULL, keys, total, off), 0);
	/* a small key array: it stops before the sample that does not fit */
	assert_int_equal(esd_ds_seek(r, 7), 0); /* sample 7 has a bag of 300 */
	assert_int_equal(esd_ds_read_bags(r, 4, NULL, NULL, keys, 10, off), -ENOSPC);
	assert_int_equal(esd_ds_tell(r), 7);
	assert_int_equal(esd_ds_seek(r, 8), 0);
	int64_t got = esd_ds_read_bags(r, 60, NULL, NULL, keys, 20, off);
	assert_true(got >= 1 && got < 60 && off[got * 3] <= 20);
	assert_int_equal(esd_ds_tell(r), 8 + (uint64_t)got);
	/* a global batch over the end of the stream: samples 150..199 then 0..49 */
	enum { WK = 100 };
	esd_key_t *wk = malloc(sizeof(esd_key_t) * WK * MAXK);
	static uint32_t woff[WK * 3 + 1];
	float wlab[WK];
	assert_int_equal(esd_ds_seek(r, 150), 0);
	assert_int_equal(esd_ds_read_wrap(r, WK, wlab, NULL, wk, (uint64_t)WK * MAXK, woff), 0);
	assert_int_equal(esd_ds_tell(r), 50);
	assert_int_equal(woff[0], 0);
	for (uint32_t s2 = 0; s2 < WK; s2++) {
		uint32_t i = (150 + s2) % N, k = 0;
		assert_true(wlab[s2] == labels[i]);
		for (uint32_t t = 0; t < 3; t++) {
			const uint32_t *b = woff + s2 * 3 + t;
			assert_int_equal(b[1] - b[0], lens[i][t]);
			for (uint32_t j = 0; j < lens[i][t]; j++, k++)
				assert_true(wk[b[0] + j] == esd_key_make(t, ids[i][k]));
		}
	}
	free(wk);
	/* labels only: esd_ds_read serves them */
	esd_ds_rewind(r);
	assert_int_equal(esd_ds_read(r, 10, lab, NULL, NULL), 10);
	esd_ds_close(r);
	/* the version: 2 with bags; a stream without stays version 1 (test_corrupt_block's offsets) */
	int fd = open(p, O_RDONLY);
	uint32_t ver = 0;
	assert_int_equal(pread(fd, &ver, 4, 8), 4);
	close(fd);
	assert_int_equal(ver, 2);
	free(keys);
	free(p);
}

static void test_shapes(void **state)
{
	(void)state;
	struct esd_ds_info in;
	memset(&in, 0, sizeof(in));
	assert_int_equal(esd_ds_shape("criteo-kaggle", &in), 0);
	assert_int_equal(in.ntables, 26);
	assert_int_equal(in.ndense, 13);
	assert_int_equal(in.rows[2], 10131227);
	assert_int_equal(in.rows[25], 142572);
	assert_int_equal(esd_ds_shape("avazu", &in), 0);
	assert_int_equal(in.ntables, 18);
	assert_int_equal(esd_ds_shape("criteo-search", &in), 0);
	assert_int_equal(in.ntables, 17);
	assert_int_equal(esd_ds_shape("movielens", &in), -ENOENT);
	assert_string_equal(esd_ds_shape_name(0), "criteo-kaggle");
	assert_null(esd_ds_shape_name(3));
	assert_string_equal(esd_ds_shape_table_name("avazu", 7), "device_id");
	assert_null(esd_ds_shape_table_name("avazu", 18));
	esd_ds_shape("criteo-kaggle", &in);
	assert_int_equal(esd_ds_scale_rows(&in, 100, 50000), 0);
	assert_int_equal(in.rows[2], 50000); /* capped */
	assert_int_equal(in.rows[0], 15);    /* ceil(1460 / 100) */
	assert_int_equal(in.rows[8], 1);     /* never below 1 */
	assert_int_equal(esd_ds_scale_rows(&in, 0.5, 0), -EINVAL);
}

int main(void)
{
	dir = esd_test_mkdtemp("esd-dsio");
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_roundtrip_f32),  cmocka_unit_test(test_roundtrip_bf16_u64_zstd),
	    cmocka_unit_test(test_cursor_restart), cmocka_unit_test(test_corrupt_block),
	    cmocka_unit_test(test_truncated),      cmocka_unit_test(test_unfinished_writer),
	    cmocka_unit_test(test_writer_ranges),  cmocka_unit_test(test_shapes),
	    cmocka_unit_test(test_nsamples_overflow_header), cmocka_unit_test(test_digest),
	    cmocka_unit_test(test_bags),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	esd_test_rmtree(dir);
	free(dir);
	return rc;
}
