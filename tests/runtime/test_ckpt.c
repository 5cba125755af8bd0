/* Checkpoint file: round trip, truncation at every offset, single-bit
 * corruption anywhere, atomic replace with an interrupted writer, random
 * garbage, and the model comparison used by the correctness bar. */
#include "testutil.h"

#include <errno.h>
#include <esd/ckpt.h>
#include <esd/err.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char *dir;

static char *path_in(const char *name)
{
	char *p;
	assert_true(asprintf(&p, "%s/%s", dir, name) > 0);
	return p;
}

/* Row i of a test model: key, clock and floats all derived from i. */
static esd_key_t key_of(uint64_t i)
{
	return esd_key_make((uint32_t)(i / 10000), i * 7 + 1); /* ascending in i */
}

static void fill_row(uint64_t i, unsigned n, float *out)
{
	for (unsigned c = 0; c < n; c++)
		out[c] = (float)(i * 1000 + c) * 0.001f - 3.0f;
}

struct model_spec {
	uint64_t rows;
	unsigned dim;
	enum esd_optimizer opt;
	uint64_t dense_len;
	int reverse;          /* write rows in descending key order */
	uint64_t first, step; /* write rows first, first+step, ... (sharding) */
};

static void write_model(const char *path, const struct model_spec *s, uint64_t iteration)
{
	struct esd_ckpt_meta m = {.seed = 77,
	                          .iteration = iteration,
	                          .data_cursor = iteration * 64,
	                          .dim = s->dim,
	                          .optimizer = s->opt,
	                          .shard = 0,
	                          .nshards = 1,
	                          .dense_len = s->dense_len,
	                          .dense_clock = iteration};
	unsigned sf = esd_optimizer_state_floats(s->opt);
	struct esd_ckpt_writer *w;
	float *v = malloc(sizeof(float) * s->dim * (1 + sf) + 4);
	assert_int_equal(esd_ckpt_writer_open(path, &m, &w), 0);
	uint64_t step = s->step ? s->step : 1;
	for (uint64_t j = s->first; j < s->rows; j += step) {
		uint64_t i = s->reverse ? s->rows - 1 - j : j;
		fill_row(i, s->dim * (1 + sf), v);
		assert_int_equal(esd_ckpt_write_row(w, key_of(i), i + 5, v, sf ? v + s->dim : NULL),
		                 0);
	}
	if (s->dense_len) {
		float *d = malloc(sizeof(float) * s->dense_len * (1 + sf));
		fill_row(999999, (unsigned)(s->dense_len * (1 + sf)), d);
		assert_int_equal(esd_ckpt_write_dense(w, d, sf ? d + s->dense_len : NULL), 0);
		free(d);
	}
	assert_int_equal(esd_ckpt_writer_commit(w), 0);
	free(v);
}

struct check {
	const struct model_spec *s;
	uint64_t seen;
	uint64_t next; /* expected i */
};

static int check_row(void *arg, esd_key_t key, uint64_t clock, const float *value,
                     const float *state)
{
	struct check *c = arg;
	unsigned sf = esd_optimizer_state_floats(c->s->opt);
	uint64_t i = c->s->reverse ? c->s->rows - 1 - c->next : c->next;
	float want[64 * 3];
	fill_row(i, c->s->dim * (1 + sf), want);
	if (key != key_of(i) || clock != i + 5 || memcmp(value, want, c->s->dim * sizeof(float)))
		return -1;
	if (sf && memcmp(state, want + c->s->dim, c->s->dim * sf * sizeof(float)))
		return -2;
	if (!sf && state)
		return -3;
	c->next++;
	c->seen++;
	return 0;
}

static void test_round_trip(void **state)
{
	(void)state;
	char *p = path_in("rt.ckpt");
	/* enough rows to cross the 1 MiB I/O buffers several times */
	struct model_spec specs[] = {
	    {.rows = 20000, .dim = 16, .opt = ESD_OPT_ADAGRAD, .dense_len = 1000},
	    {.rows = 33, .dim = 5, .opt = ESD_OPT_ADAM, .dense_len = 7, .reverse = 1},
	    {.rows = 10, .dim = 1, .opt = ESD_OPT_SGD, .dense_len = 0},
	    {.rows = 0, .dim = 64, .opt = ESD_OPT_SGD, .dense_len = 3},
	};
	for (size_t k = 0; k < sizeof(specs) / sizeof(specs[0]); k++) {
		const struct model_spec *s = &specs[k];
		write_model(p, s, 42);
		struct esd_ckpt_reader *r;
		struct esd_ckpt_error err;
		assert_int_equal(esd_ckpt_open(p, &r, &err), 0);
		const struct esd_ckpt_info *in = esd_ckpt_info(r);
		unsigned sf = esd_optimizer_state_floats(s->opt);
		assert_int_equal(in->row_count, s->rows);
		assert_int_equal(in->meta.seed, 77);
		assert_int_equal(in->meta.iteration, 42);
		assert_int_equal(in->meta.data_cursor, 42 * 64);
		assert_int_equal(in->meta.dim, s->dim);
		assert_int_equal(in->meta.optimizer, s->opt);
		assert_int_equal(in->meta.dense_len, s->dense_len);
		assert_int_equal(in->meta.dense_clock, 42);
		assert_int_equal(in->sorted, !s->reverse || s->rows < 2);
		struct stat sb;
		assert_int_equal(stat(p, &sb), 0);
		assert_int_equal(in->file_size, (uint64_t)sb.st_size);
		assert_int_equal(sb.st_size, ESD_CKPT_HEADER_SIZE + ESD_CKPT_TRAILER_SIZE +
		                                 s->rows * (16 + 4 * s->dim * (1 + sf)) +
		                                 s->dense_len * 4 * (1 + sf));
		struct check c = {.s = s};
		assert_int_equal(esd_ckpt_read_rows(r, check_row, &c), 0);
		assert_int_equal(c.seen, s->rows);
		/* a second walk works too; a callback's error stops the walk */
		c.next = 0;
		assert_int_equal(esd_ckpt_read_rows(r, check_row, &c), 0);
		if (s->dense_len) {
			float *d = malloc(sizeof(float) * s->dense_len * (1 + sf));
			float *want = malloc(sizeof(float) * s->dense_len * (1 + sf));
			fill_row(999999, (unsigned)(s->dense_len * (1 + sf)), want);
			assert_int_equal(esd_ckpt_read_dense(r, d, sf ? d + s->dense_len : NULL),
			                 0);
			assert_memory_equal(d, want, sizeof(float) * s->dense_len * (1 + sf));
			free(d);
			free(want);
		}
		esd_ckpt_close(r);
	}
	esd_ckpt_close(NULL);
	free(p);
}

static int stop_at_3(void *arg, esd_key_t key, uint64_t clock, const float *v, const float *s)
{
	(void)key, (void)clock, (void)v, (void)s;
	return ++*(int *)arg == 3 ? 99 : 0;
}

static void test_writer_errors(void **state)
{
	(void)state;
	char *p = path_in("we.ckpt");
	struct esd_ckpt_meta m = {.dim = 2, .optimizer = ESD_OPT_SGD, .nshards = 1, .dense_len = 2};
	struct esd_ckpt_writer *w;
	float v[2] = {1, 2};
	m.dim = 0;
	assert_int_equal(esd_ckpt_writer_open(p, &m, &w), -EINVAL);
	m.dim = 2;
	m.shard = 1;
	assert_int_equal(esd_ckpt_writer_open(p, &m, &w), -EINVAL);
	m.shard = 0;
	m.optimizer = (enum esd_optimizer)3;
	assert_int_equal(esd_ckpt_writer_open(p, &m, &w), -EINVAL);
	m.optimizer = ESD_OPT_SGD;
	char *bad = path_in("");
	assert_int_equal(esd_ckpt_writer_open(bad, &m, &w), -EINVAL);
	free(bad);
	assert_int_equal(esd_ckpt_writer_open("/nonexistent/dir/x.ckpt", &m, &w), -ENOENT);

	assert_int_equal(esd_ckpt_writer_open(p, &m, &w), 0);
	assert_int_equal(esd_ckpt_write_row(w, 5, 0, v, NULL), 0);
	assert_int_equal(esd_ckpt_write_row(w, 5, 0, v, NULL), -EINVAL); /* duplicate */
	assert_int_equal(esd_ckpt_write_row(w, 3, 0, v, NULL), 0);       /* unsorted is fine */
	/* the dense table is due: commit refuses, nothing is left behind */
	assert_int_equal(esd_ckpt_writer_commit(w), -EINVAL);
	assert_int_equal(access(p, F_OK), -1);
	assert_int_equal(esd_ckpt_remove_temps(p), 0);

	assert_int_equal(esd_ckpt_writer_open(p, &m, &w), 0);
	assert_int_equal(esd_ckpt_write_dense(w, v, NULL), 0);
	assert_int_equal(esd_ckpt_write_dense(w, v, NULL), -EINVAL);     /* twice */
	assert_int_equal(esd_ckpt_write_row(w, 9, 0, v, NULL), -EINVAL); /* rows after dense */
	assert_int_equal(esd_ckpt_writer_commit(w), 0);
	assert_int_equal(esd_ckpt_writer_commit(NULL), -EINVAL);
	esd_ckpt_writer_abort(NULL);

	/* batch writes; a callback's non-zero return stops the walk */
	m.dense_len = 0;
	assert_int_equal(esd_ckpt_writer_open(p, &m, &w), 0);
	esd_key_t keys[4] = {1, 2, 3, 4};
	uint64_t clocks[4] = {0};
	float vals[8] = {0};
	assert_int_equal(esd_ckpt_write_rows(w, 4, keys, clocks, vals, NULL), 0);
	assert_int_equal(esd_ckpt_writer_commit(w), 0);
	struct esd_ckpt_reader *r;
	assert_int_equal(esd_ckpt_open(p, &r, NULL), 0);
	int n = 0;
	assert_int_equal(esd_ckpt_read_rows(r, stop_at_3, &n), 99);
	esd_ckpt_close(r);
	free(p);
}

static void read_file(const char *p, unsigned char **buf, size_t *len)
{
	struct stat sb;
	assert_int_equal(stat(p, &sb), 0);
	*len = (size_t)sb.st_size;
	*buf = malloc(*len + 1);
	int fd = open(p, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(read(fd, *buf, *len), (ssize_t)*len);
	close(fd);
}

static int open_bytes(const char *p, const unsigned char *b, size_t len, struct esd_ckpt_error *err)
{
	struct esd_ckpt_reader *r = NULL;
	assert_int_equal(esd_test_write_file(p, (const char *)b, len), 0);
	int rc = esd_ckpt_open(p, &r, err);
	esd_ckpt_close(r);
	return rc;
}

static const struct model_spec small = {.rows = 9, .dim = 3, .opt = ESD_OPT_ADAM, .dense_len = 5};

static void test_truncation(void **state)
{
	(void)state;
	char *p = path_in("tr.ckpt"), *q = path_in("tr2.ckpt");
	unsigned char *b;
	size_t len;
	struct esd_ckpt_error err;
	write_model(p, &small, 3);
	read_file(p, &b, &len);
	assert_int_equal(open_bytes(q, b, len, &err), 0);
	for (size_t cut = 0; cut < len; cut++) {
		int rc = open_bytes(q, b, cut, &err);
		if (rc != -ENODATA)
			fail_msg("cut at %zu: rc %d (%s)", cut, rc, err.msg);
		assert_int_equal(err.code, -ENODATA);
		assert_int_equal(err.offset, cut);
		assert_non_null(strstr(err.msg, "truncated"));
	}
	/* trailing garbage is refused too */
	b = realloc(b, len + 1);
	b[len] = 0;
	assert_int_equal(open_bytes(q, b, len + 1, &err), -EBADMSG);
	assert_int_equal(err.offset, len);
	assert_non_null(strstr(err.msg, "trailing"));
	free(b);
	free(p);
	free(q);
}

static void test_bit_flips(void **state)
{
	(void)state;
	char *p = path_in("bf.ckpt"), *q = path_in("bf2.ckpt");
	unsigned char *b;
	size_t len;
	struct esd_ckpt_error err;
	write_model(p, &small, 3);
	read_file(p, &b, &len);
	/* every bit of every byte */
	for (size_t i = 0; i < len; i++) {
		for (int bit = 0; bit < 8; bit++) {
			b[i] ^= (unsigned char)(1u << bit);
			int rc = open_bytes(q, b, len, &err);
			b[i] ^= (unsigned char)(1u << bit);
			if (rc == 0)
				fail_msg("flip of bit %d at byte %zu went undetected", bit, i);
			assert_true(rc == -ESD_EBADSUM || rc == -ESD_EBADMAGIC ||
			            rc == -ESD_EBADVERSION || rc == -EBADMSG || rc == -ENODATA);
			assert_true(err.msg[0] != '\0');
			assert_true(err.offset <= len);
		}
	}
	/* what each region reports */
	b[0] ^= 1;
	assert_int_equal(open_bytes(q, b, len, &err), -ESD_EBADMAGIC);
	b[0] ^= 1;
	b[8] ^= 2;
	assert_int_equal(open_bytes(q, b, len, &err), -ESD_EBADVERSION);
	assert_int_equal(err.offset, 8);
	b[8] ^= 2;
	b[ESD_CKPT_HEADER_SIZE + 20] ^= 4; /* inside the first row's value */
	assert_int_equal(open_bytes(q, b, len, &err), -ESD_EBADSUM);
	assert_int_equal(err.offset, ESD_CKPT_HEADER_SIZE);
	assert_non_null(strstr(err.msg, "body checksum"));
	b[ESD_CKPT_HEADER_SIZE + 20] ^= 4;
	b[len - 48] ^= 8; /* trailer magic */
	assert_int_equal(open_bytes(q, b, len, &err), -ESD_EBADMAGIC);
	assert_int_equal(err.offset, len - 48);
	b[len - 48] ^= 8;
	b[len - 20] ^= 8; /* trailer's copy of the header checksum */
	assert_int_equal(open_bytes(q, b, len, &err), -ESD_EBADSUM);
	b[len - 20] ^= 8;
	assert_int_equal(open_bytes(q, b, len, &err), 0);
	free(b);
	free(p);
	free(q);
}

/* A writer killed before commit (here: a child that _exits mid-write)
 * leaves the previous checkpoint readable and untouched. */
static void test_atomic_replace(void **state)
{
	(void)state;
	char *p = path_in("at.ckpt");
	unsigned char *before, *after;
	size_t lb, la;
	write_model(p, &small, 1);
	read_file(p, &before, &lb);

	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct esd_ckpt_meta m = {
		    .seed = 77, .iteration = 2, .dim = 3, .optimizer = ESD_OPT_ADAM, .nshards = 1};
		struct esd_ckpt_writer *w;
		float v[9] = {0};
		if (esd_ckpt_writer_open(p, &m, &w))
			_exit(1);
		for (uint64_t i = 0; i < 200000; i++) /* > 1 MiB: some of it reaches the file */
			if (esd_ckpt_write_row(w, i, 0, v, v + 3))
				_exit(1);
		_exit(0); /* "crash": no commit, no abort */
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	read_file(p, &after, &la);
	assert_int_equal(la, lb);
	assert_memory_equal(before, after, lb);
	struct esd_ckpt_reader *r;
	assert_int_equal(esd_ckpt_open(p, &r, NULL), 0);
	assert_int_equal(esd_ckpt_info(r)->meta.iteration, 1);
	esd_ckpt_close(r);
	/* the interrupted temporary is there, and is cleared */
	assert_int_equal(esd_ckpt_remove_temps(p), 1);
	assert_int_equal(esd_ckpt_remove_temps(p), 0);

	/* an aborted writer changes nothing either; a committed one replaces */
	struct esd_ckpt_meta m = {
	    .seed = 77, .iteration = 9, .dim = 3, .optimizer = ESD_OPT_ADAM, .nshards = 1};
	struct esd_ckpt_writer *w;
	assert_int_equal(esd_ckpt_writer_open(p, &m, &w), 0);
	esd_ckpt_writer_abort(w);
	assert_int_equal(esd_ckpt_open(p, &r, NULL), 0);
	assert_int_equal(esd_ckpt_info(r)->meta.iteration, 1);
	esd_ckpt_close(r);
	write_model(p, &small, 2);
	assert_int_equal(esd_ckpt_open(p, &r, NULL), 0);
	assert_int_equal(esd_ckpt_info(r)->meta.iteration, 2);
	esd_ckpt_close(r);
	assert_int_equal(esd_ckpt_remove_temps(p), 0);
	free(before);
	free(after);
	free(p);
}

static void test_garbage(void **state)
{
	(void)state;
	char *p = path_in("gb.ckpt"), *good = path_in("gb-good.ckpt");
	unsigned char *valid, *b = malloc(4096);
	size_t lv;
	struct esd_ckpt_error err;
	uint64_t rng = 1234;
	write_model(good, &small, 3);
	read_file(good, &valid, &lv);
	assert_true(lv < 4096);
	for (int it = 0; it < 600; it++) {
		size_t len = (size_t)(esd_test_rand(&rng) % 2048);
		for (size_t i = 0; i < len; i++)
			b[i] = (unsigned char)esd_test_rand(&rng);
		int mode = it % 3;
		if (mode >= 1 && len >= 8)
			memcpy(b, "ESDCKPT\0", 8); /* passes the magic check */
		if (mode == 2 && len >= ESD_CKPT_HEADER_SIZE)
			memcpy(b, valid, ESD_CKPT_HEADER_SIZE); /* a valid header, random rest */
		int rc = open_bytes(p, b, len, &err);
		if (rc == 0)
			fail_msg("garbage of %zu bytes accepted (iteration %d)", len, it);
		assert_true(err.msg[0] != '\0');
	}
	/* the valid file with random runs overwritten */
	for (int it = 0; it < 300; it++) {
		memcpy(b, valid, lv);
		size_t at = (size_t)(esd_test_rand(&rng) % lv);
		size_t n = 1 + (size_t)(esd_test_rand(&rng) % 16);
		int changed = 0;
		for (size_t i = at; i < at + n && i < lv; i++) {
			unsigned char c = (unsigned char)esd_test_rand(&rng);
			changed |= c != b[i];
			b[i] = c;
		}
		int rc = open_bytes(p, b, lv, &err);
		assert_true(changed ? rc != 0 : rc == 0);
	}
	/* not a regular file; missing file */
	struct esd_ckpt_reader *r;
	assert_int_equal(esd_ckpt_open(dir, &r, &err), -EINVAL);
	char *missing = path_in("missing.ckpt");
	assert_int_equal(esd_ckpt_open(missing, &r, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "missing.ckpt"));
	free(missing);
	free(valid);
	free(b);
	free(p);
	free(good);
}

struct copy_ctx {
	struct esd_ckpt_writer *w;
	esd_key_t target;
	float scale;
	esd_key_t drop;
	unsigned dim;
};

static int copy_row(void *arg, esd_key_t key, uint64_t clock, const float *v, const float *s)
{
	struct copy_ctx *c = arg;
	float tmp[64];
	if (key == c->drop)
		return 0;
	memcpy(tmp, v, c->dim * sizeof(float));
	if (key == c->target)
		tmp[1] *= c->scale;
	return esd_ckpt_write_row(c->w, key, clock, tmp, s);
}

/* Copy src to dst, scaling value[1] of key target and dropping key drop. */
static void copy_model(const char *src, const char *dst, esd_key_t target, float scale,
                       esd_key_t drop)
{
	struct esd_ckpt_reader *r;
	assert_int_equal(esd_ckpt_open(src, &r, NULL), 0);
	const struct esd_ckpt_info *in = esd_ckpt_info(r);
	struct copy_ctx c = {.target = target, .scale = scale, .drop = drop, .dim = in->meta.dim};
	assert_int_equal(esd_ckpt_writer_open(dst, &in->meta, &c.w), 0);
	assert_int_equal(esd_ckpt_read_rows(r, copy_row, &c), 0);
	if (in->meta.dense_len) {
		unsigned sf = esd_optimizer_state_floats(in->meta.optimizer);
		float *d = malloc(sizeof(float) * in->meta.dense_len * (1 + sf));
		assert_int_equal(esd_ckpt_read_dense(r, d, d + in->meta.dense_len), 0);
		assert_int_equal(esd_ckpt_write_dense(c.w, d, d + in->meta.dense_len), 0);
		free(d);
	}
	assert_int_equal(esd_ckpt_writer_commit(c.w), 0);
	esd_ckpt_close(r);
}

/* Write rows ids[] (value from vals[], clock vals[]) as a file of
 * iteration it; an increment of parent (iteration, header checksum) when
 * parent is not NULL. Returns the file's header checksum. */
static uint64_t write_rows(const char *path, const uint64_t *ids, const uint64_t *vals, size_t n,
                           uint64_t it, const char *parent, uint64_t parent_it)
{
	struct esd_ckpt_meta m = {.seed = 5, .iteration = it, .data_cursor = it, .dim = 3,
	                          .optimizer = ESD_OPT_ADAGRAD, .shard = 1, .nshards = 2,
	                          .dense_len = 2, .dense_clock = it};
	uint64_t sum = 0;
	if (parent) {
		m.increment = true;
		m.parent_iteration = parent_it;
		assert_int_equal(esd_ckpt_file_sum(parent, &m.parent_sum), 0);
	}
	struct esd_ckpt_writer *w;
	float v[6], d[4] = {(float)it, 1, 2, 3};
	assert_int_equal(esd_ckpt_writer_open(path, &m, &w), 0);
	for (size_t i = 0; i < n; i++) {
		fill_row(vals[i], 6, v);
		assert_int_equal(esd_ckpt_write_row(w, ids[i], vals[i], v, v + 3), 0);
	}
	assert_int_equal(esd_ckpt_write_dense(w, d, d + 2), 0);
	assert_int_equal(esd_ckpt_writer_commit(w), 0);
	assert_int_equal(esd_ckpt_file_sum(path, &sum), 0);
	return sum;
}

struct seen_rows {
	uint64_t key[16], clock[16];
	size_t n;
};

static int note_row(void *arg, esd_key_t key, uint64_t clock, const float *v, const float *s)
{
	struct seen_rows *sr = arg;
	float want[6];
	fill_row(clock, 6, want);
	assert_memory_equal(v, want, 12);
	assert_memory_equal(s, want + 3, 12);
	sr->key[sr->n] = key;
	sr->clock[sr->n++] = clock;
	return 0;
}

/* Per-table dims (version 2): rows at their table's dim, handed out
 * padded to dim with zeros. */
static const uint32_t tdims[2] = {3, 8};

static esd_key_t dims_key(uint64_t i)
{
	return esd_key_make((uint32_t)(i % 2), i);
}

/* Row i (padded to 8 floats of value and Adam's 16 of state: the value's
 * tail zero, the state's not, which the writer drops). */
static void dims_row(uint64_t i, float *v)
{
	fill_row(i, 24, v);
	for (unsigned c = tdims[i % 2]; c < 8; c++)
		v[c] = 0.0f;
}

static void write_dims(const char *path, uint64_t rows, uint64_t it, const char *parent,
                       const uint64_t *ids, size_t nids)
{
	struct esd_ckpt_meta m = {.seed = 5, .iteration = it, .dim = 8, .ntables = 2,
	                          .table_dims = tdims, .optimizer = ESD_OPT_ADAM, .nshards = 1,
	                          .dense_len = 2};
	if (parent) {
		m.increment = true;
		m.parent_iteration = it / 2;
		assert_int_equal(esd_ckpt_file_sum(parent, &m.parent_sum), 0);
	}
	struct esd_ckpt_writer *w;
	float v[24], packed[24], d[6] = {1, 2, 3, 4, 5, 6};
	assert_int_equal(esd_ckpt_writer_open(path, &m, &w), 0);
	for (uint64_t j = 0; j < (ids ? nids : rows); j++) {
		uint64_t i = ids ? ids[j] : j;
		dims_row(i, v);
		const unsigned dt = tdims[i % 2];
		if (i % 3) { /* padded */
			assert_int_equal(esd_ckpt_write_row(w, dims_key(i), i + it, v, v + 8), 0);
			continue;
		}
		memcpy(packed, v, dt * sizeof(float)); /* at the table's dim */
		for (unsigned b = 0; b < 2; b++)
			memcpy(packed + dt + b * dt, v + 8 + b * 8, dt * sizeof(float));
		assert_int_equal(esd_ckpt_write_row_packed(w, dims_key(i), i + it, packed,
		                                           packed + dt),
		                 0);
	}
	assert_int_equal(esd_ckpt_write_dense(w, d, d + 2), 0);
	assert_int_equal(esd_ckpt_writer_commit(w), 0);
}

static int check_dims_row(void *arg, esd_key_t key, uint64_t clock, const float *value,
                          const float *state)
{
	uint64_t *n = arg;
	const uint64_t i = esd_key_id(key);
	float v[24];
	dims_row(i, v);
	const unsigned dt = tdims[i % 2];
	for (unsigned b = 0; b < 2; b++) /* the state past dt reads back zero */
		for (unsigned c = dt; c < 8; c++)
			v[8 + b * 8 + c] = 0.0f;
	if (key != dims_key(i) || memcmp(value, v, 8 * sizeof(float)) ||
	    memcmp(state, v + 8, 16 * sizeof(float)))
		return -1;
	(void)clock;
	(*n)++;
	return 0;
}

static void test_table_dims(void **state)
{
	(void)state;
	char *p = path_in("dims.ckpt"), *q = path_in("dims2.ckpt");
	struct esd_ckpt_reader *r;
	struct esd_ckpt_error err;
	write_dims(p, 3000, 7, NULL, NULL, 0);
	assert_int_equal(esd_ckpt_open(p, &r, &err), 0);
	const struct esd_ckpt_info *in = esd_ckpt_info(r);
	assert_int_equal(in->meta.ntables, 2);
	assert_int_equal(in->meta.table_dims[0], 3);
	assert_int_equal(in->meta.table_dims[1], 8);
	/* header, table block, 1500 rows of 3 and of 8 floats (Adam: 3 a
	 * float), the dense table and its state, the trailer */
	assert_int_equal(in->file_size, 128 + 32 + 1500 * (16 + 36) + 1500 * (16 + 96) + 24 + 48);
	uint64_t n = 0;
	assert_int_equal(esd_ckpt_read_rows(r, check_dims_row, &n), 0);
	assert_int_equal(n, 3000);
	esd_ckpt_close(r);

	/* a small one cut or with one bit flipped is refused: every byte of
	 * the header and the table block, every few past them */
	unsigned char *b;
	size_t len;
	write_dims(p, 5, 7, NULL, NULL, 0);
	read_file(p, &b, &len);
	for (size_t i = 0; i < len; i += i < 200 ? 1 : 3) {
		assert_int_not_equal(open_bytes(q, b, i, &err), 0);
		b[i] ^= (unsigned char)(1u << (i % 8));
		if (!open_bytes(q, b, len, &err))
			fail_msg("flip of bit %zu at byte %zu went undetected", i % 8, i);
		b[i] ^= (unsigned char)(1u << (i % 8));
	}
	b[8] = 3; /* a version this code does not read */
	assert_int_equal(open_bytes(q, b, len, &err), -ESD_EBADVERSION);
	assert_non_null(strstr(err.msg, "version 3, this code reads versions 1 and 2"));
	assert_non_null(strstr(err.msg, "dims2.ckpt"));
	free(b);

	/* the writer refuses a value past its table's dim, an unknown table
	 * and a table dim past dim */
	struct esd_ckpt_meta m = {.dim = 8, .ntables = 2, .table_dims = tdims, .nshards = 1};
	struct esd_ckpt_writer *w;
	float v[8] = {1, 1, 1, 1, 0, 0, 0, 0};
	assert_int_equal(esd_ckpt_writer_open(q, &m, &w), 0);
	assert_int_equal(esd_ckpt_write_row(w, esd_key_make(0, 1), 0, v, NULL), -EINVAL);
	assert_int_equal(esd_ckpt_write_row(w, esd_key_make(2, 1), 0, v, NULL), -EINVAL);
	assert_int_equal(esd_ckpt_write_row(w, esd_key_make(1, 1), 0, v, NULL), 0);
	esd_ckpt_writer_abort(w);
	m.dim = 7;
	assert_int_equal(esd_ckpt_writer_open(q, &m, &w), -EINVAL);

	/* a chain of version-2 files reads as the full one */
	char *base = path_in("ps-shard0.ckpt.base4"), *inc = path_in("ps-shard0.ckpt.inc8");
	const uint64_t changed[] = {1, 3, 4, 9, 10};
	write_dims(base, 9, 4, NULL, NULL, 0);
	write_dims(inc, 0, 8, base, changed, 5);
	assert_int_equal(esd_ckpt_open(inc, &r, &err), 0);
	assert_int_equal(esd_ckpt_info(r)->row_count, 11);
	n = 0;
	assert_int_equal(esd_ckpt_read_rows(r, check_dims_row, &n), 0);
	assert_int_equal(n, 11);
	esd_ckpt_close(r);
	unlink(base), unlink(inc), unlink(p), unlink(q);
	free(base), free(inc), free(p), free(q);
}

/* A base and two increments read as the one full file of the same rows,
 * in the same order; a missing parent and an fd open are refused. */
static void test_increments(void **state)
{
	(void)state;
	char *base = path_in("ps-shard1.ckpt.base10"), *i1 = path_in("ps-shard1.ckpt.inc20"),
	     *i2 = path_in("ps-shard1.ckpt.inc30"), *full = path_in("full.ckpt");
	const uint64_t k0[] = {30, 10, 20}, v0[] = {1, 2, 3};
	const uint64_t k1[] = {10, 40}, v1[] = {4, 5};
	const uint64_t k2[] = {30, 50, 40}, v2[] = {6, 7, 8};
	const uint64_t kf[] = {30, 10, 20, 40, 50}, vf[] = {6, 4, 3, 8, 7};
	write_rows(base, k0, v0, 3, 10, NULL, 0);
	write_rows(i1, k1, v1, 2, 20, base, 10);
	write_rows(i2, k2, v2, 3, 30, i1, 20);
	write_rows(full, kf, vf, 5, 30, NULL, 0);

	struct esd_ckpt_reader *r;
	struct esd_ckpt_error err;
	assert_int_equal(esd_ckpt_open(i2, &r, &err), 0);
	const struct esd_ckpt_info *in = esd_ckpt_info(r);
	assert_int_equal(in->row_count, 5);
	assert_int_equal(in->chain, 3);
	assert_int_equal(in->meta.iteration, 30);
	struct seen_rows sr = {0};
	assert_int_equal(esd_ckpt_read_rows(r, note_row, &sr), 0);
	assert_int_equal(sr.n, 5);
	for (size_t i = 0; i < 5; i++) {
		assert_int_equal(sr.key[i], kf[i]);
		assert_int_equal(sr.clock[i], vf[i]);
	}
	float d[4];
	assert_int_equal(esd_ckpt_read_dense(r, d, d + 2), 0);
	assert_true(d[0] == 30.0f);
	esd_ckpt_close(r);

	const char *pa[] = {i2}, *pb[] = {full};
	struct esd_ckpt_cmp_opts exact = {.exact = true, .state = true, .clocks = true};
	struct esd_ckpt_cmp_result res;
	assert_int_equal(esd_ckpt_compare(pa, 1, pb, 1, &exact, &res, &err), 0);
	assert_true(res.equal);

	int fd = open(i2, O_RDONLY);
	assert_int_equal(esd_ckpt_open_fd(fd, &r, &err), -EINVAL);
	close(fd);
	char buf[512];
	assert_int_equal(esd_ckpt_parent(i2, buf, sizeof(buf), &err), 1);
	assert_string_equal(buf, i1);
	assert_int_equal(esd_ckpt_parent(base, buf, sizeof(buf), &err), 0);
	/* a parent rewritten (another header) is not this increment's */
	write_rows(i1, k1, v0, 2, 20, base, 10);
	assert_int_equal(esd_ckpt_open(i2, &r, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "missing"));
	unlink(base), unlink(i1), unlink(i2), unlink(full);
	free(base), free(i1), free(i2), free(full);
}

static void test_compare(void **state)
{
	(void)state;
	char *a = path_in("cmp-a.ckpt"), *b = path_in("cmp-b.ckpt");
	char *s0 = path_in("cmp-s0.ckpt"), *s1 = path_in("cmp-s1.ckpt");
	struct esd_ckpt_cmp_result res;
	struct esd_ckpt_error err;
	struct model_spec spec = {.rows = 50, .dim = 4, .opt = ESD_OPT_ADAGRAD, .dense_len = 6};
	write_model(a, &spec, 10);
	const char *pa[1] = {a}, *pb[2] = {b, NULL};
	const struct esd_ckpt_cmp_opts exact = {.exact = true, .state = true, .clocks = true};

	copy_model(a, b, ~0ull, 1, ~0ull);
	assert_int_equal(esd_ckpt_compare(pa, 1, pb, 1, &exact, &res, &err), 0);
	assert_true(res.equal);
	assert_int_equal(res.rows_a, 50);
	assert_int_equal(res.rows_b, 50);
	assert_true(res.max_abs == 0);

	/* a rounding-sized difference: equal within 1e-5, not bit-identical */
	copy_model(a, b, key_of(17), 1.0f + 1e-6f, ~0ull);
	assert_int_equal(esd_ckpt_compare(pa, 1, pb, 1, NULL, &res, &err), 0);
	assert_true(res.equal);
	assert_true(res.max_rel > 0 && res.max_rel < 1e-5);
	assert_int_equal(esd_ckpt_compare(pa, 1, pb, 1, &exact, &res, &err), 0);
	assert_false(res.equal);
	assert_int_equal(res.rows_differ, 1);
	assert_true(res.has_first && res.first_key == key_of(17));

	/* a real difference, in two rows: the smallest key is reported */
	copy_model(a, b, key_of(40), 1.01f, key_of(3));
	assert_int_equal(esd_ckpt_compare(pa, 1, pb, 1, NULL, &res, &err), 0);
	assert_false(res.equal);
	assert_int_equal(res.only_a, 1);
	assert_int_equal(res.rows_differ, 1);
	esd_key_t lo = key_of(3) < key_of(40) ? key_of(3) : key_of(40);
	assert_int_equal(res.first_key, lo);
	assert_true(res.max_rel > 0.009 && res.max_rel < 0.011);
	print_message("first difference: %s\n", res.first_what);

	/* two shards (rows split, dense table in shard 0) vs one file */
	struct model_spec sh0 = spec, sh1 = spec;
	sh0.first = 0;
	sh0.step = 2;
	sh1.first = 1;
	sh1.step = 2;
	sh1.dense_len = 0;
	write_model(s0, &sh0, 10);
	write_model(s1, &sh1, 10);
	const char *shards[2] = {s0, s1};
	assert_int_equal(esd_ckpt_compare(shards, 2, pa, 1, &exact, &res, &err), 0);
	assert_true(res.equal);
	assert_int_equal(res.rows_a, 50);
	/* the dense table in two files of a side is an error */
	const char *twice[2] = {s0, s0};
	assert_int_equal(esd_ckpt_compare(pa, 1, twice, 2, NULL, &res, &err), -EINVAL);
	assert_int_equal(esd_ckpt_compare(twice, 2, pa, 1, NULL, &res, &err), -EINVAL);
	/* a shard given twice: duplicate rows */
	const char *dup[3] = {s0, s1, s1};
	assert_int_equal(esd_ckpt_compare(pa, 1, dup, 3, NULL, &res, &err), 0);
	assert_false(res.equal);
	assert_int_equal(res.duplicates, 25);
	assert_int_equal(esd_ckpt_compare(dup, 3, pa, 1, NULL, &res, &err), 0);
	assert_false(res.equal);
	assert_int_equal(res.duplicates, 25);
	/* one shard only: rows missing */
	assert_int_equal(esd_ckpt_compare(pa, 1, shards, 1, NULL, &res, &err), 0);
	assert_false(res.equal);
	assert_int_equal(res.only_a, 25);

	/* another iteration: metadata differs */
	write_model(b, &spec, 11);
	assert_int_equal(esd_ckpt_compare(pa, 1, pb, 1, NULL, &res, &err), 0);
	assert_false(res.equal);
	assert_true(res.meta_differ);
	assert_non_null(strstr(res.first_what, "iteration"));

	/* a corrupt file is an error, not a verdict */
	assert_int_equal(truncate(b, 100), 0);
	assert_int_equal(esd_ckpt_compare(pa, 1, pb, 1, NULL, &res, &err), -ENODATA);
	assert_int_equal(esd_ckpt_compare(pa, 0, pb, 1, NULL, &res, &err), -EINVAL);
	free(a);
	free(b);
	free(s0);
	free(s1);
}

static int setup(void **state)
{
	(void)state;
	dir = esd_test_mkdtemp("esd-ckpt");
	return dir ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	esd_test_rmtree(dir);
	free(dir);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip),     cmocka_unit_test(test_writer_errors),
	    cmocka_unit_test(test_truncation),     cmocka_unit_test(test_bit_flips),
	    cmocka_unit_test(test_atomic_replace), cmocka_unit_test(test_garbage),
	    cmocka_unit_test(test_compare),        cmocka_unit_test(test_increments),
	    cmocka_unit_test(test_table_dims),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
