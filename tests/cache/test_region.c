/*
 * The cache region on 4 KiB pages (the fallback path): sizing, header
 * validation on attach (each bad field named in the error), row
 * accessors, gather/scatter, counters and DIRTY victims through
 * esd_cache_begin_iter, and the read-only trainer mapping.
 */
#include "testutil.h"

#include <esd/cache.h>
#include <esd/err.h>
#include <esd/log.h>

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- stderr capture, to check what an error names ------------------------- */

static int saved_stderr = -1;
static char cap_path[] = "/tmp/esd-test-region-XXXXXX";

static void capture_begin(void)
{
	int fd = mkstemp(cap_path);
	assert_true(fd >= 0);
	fflush(stderr);
	saved_stderr = dup(2);
	dup2(fd, 2);
	close(fd);
}

static char *capture_end(void)
{
	static char buf[8192];
	fflush(stderr);
	dup2(saved_stderr, 2);
	close(saved_stderr);
	int fd = open(cap_path, O_RDONLY);
	ssize_t r = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	unlink(cap_path);
	strcpy(cap_path + strlen(cap_path) - 6, "XXXXXX");
	buf[r > 0 ? r : 0] = 0;
	fputs(buf, stderr); /* keep it in the test log */
	return buf;
}

static struct esd_cache *make(uint32_t rows, uint32_t dim, enum esd_optimizer opt, uint32_t ntables)
{
	struct esd_cache_config cfg = {
	    .rows = rows,
	    .dim = dim,
	    .optimizer = opt,
	    .ntables = ntables,
	    .policy = ESD_POLICY_EMARK,
	    .pages = ESD_CACHE_PAGES_SMALL,
	    .generation = 7,
	};
	struct esd_cache *c = NULL;
	assert_int_equal(esd_cache_create(&cfg, &c), 0);
	return c;
}

static void test_sizes(void **state)
{
	(void)state;
	struct esd_cache_sizes sz;
	struct esd_cache_config cfg = {
	    .rows = 1000, .dim = 100, .optimizer = ESD_OPT_ADAM, .ntables = 26};

	assert_int_equal(esd_cache_size(&cfg, &sz), 0);
	assert_int_equal(sz.vec_stride, 448); /* 400 rounded to 64 */
	assert_int_equal(sz.state_stride, 832);
	assert_int_equal(sz.total % (2u << 20), 0);
	assert_true(sz.rows >= 1000u * (448 + 832));
	assert_true(sz.grads >= 1000u * 448 + 4096);
	assert_int_equal(sz.meta + sz.rows + sz.grads, sz.total);
	assert_true(sz.cmeta == esd_cmeta_bytes(1000));

	cfg.optimizer = ESD_OPT_SGD;
	assert_int_equal(esd_cache_size(&cfg, &sz), 0);
	assert_int_equal(sz.state_stride, 0);

	struct esd_cache_config bad = cfg;
	bad.rows = 0;
	assert_int_equal(esd_cache_size(&bad, &sz), -EINVAL);
	bad = cfg;
	bad.dim = 0;
	assert_int_equal(esd_cache_size(&bad, &sz), -EINVAL);
	bad = cfg;
	bad.ntables = 0;
	assert_int_equal(esd_cache_size(&bad, &sz), -EINVAL);
	bad = cfg;
	bad.optimizer = (enum esd_optimizer)5;
	assert_int_equal(esd_cache_size(&bad, &sz), -EINVAL);
}

/* The 4 KiB path: what was asked for, logged with the exact size. */
static void test_small_pages_and_log(void **state)
{
	(void)state;
	struct esd_cache_sizes sz;
	struct esd_cache_config cfg = {.rows = 64,
	                               .dim = 16,
	                               .optimizer = ESD_OPT_ADAGRAD,
	                               .ntables = 2,
	                               .pages = ESD_CACHE_PAGES_SMALL};
	struct esd_cache *c = NULL;
	char want[64];

	assert_int_equal(esd_cache_size(&cfg, &sz), 0);
	capture_begin();
	int rc = esd_cache_create(&cfg, &c);
	char *log = capture_end();
	assert_int_equal(rc, 0);
	snprintf(want, sizeof(want), "region: %llu bytes", (unsigned long long)sz.total);
	assert_non_null(strstr(log, want));

	struct esd_cache_info info;
	esd_cache_get_info(c, &info);
	assert_int_equal(info.page_size, 4096);
	assert_int_equal(info.bytes, sz.total);
	assert_int_equal(info.rows, 64);
	assert_true(info.generation != 0);
	assert_true(info.meta_writable);
	esd_cache_close(c);
	esd_cache_close(NULL);
}

static long meminfo(const char *field)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	long v = -1;
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, field, strlen(field)))
			v = strtol(line + strlen(field), NULL, 10);
	if (f)
		fclose(f);
	return v;
}

/* AUTO without enough huge pages: 4 KiB pages and a warning, never
 * silently. (With the pool big enough it takes huge pages; the huge-page
 * path itself is test_region_hugepages.) */
static void test_auto_fallback_warns(void **state)
{
	(void)state;
	struct esd_cache_config cfg = {
	    .rows = 64, .dim = 16, .ntables = 1, .pages = ESD_CACHE_PAGES_AUTO};
	struct esd_cache_sizes sz;
	struct esd_cache *c = NULL;
	struct esd_cache_info info;

	assert_int_equal(esd_cache_size(&cfg, &sz), 0);
	long free_pages = meminfo("HugePages_Free:");
	(void)free_pages;
	capture_begin();
	int rc = esd_cache_create(&cfg, &c);
	char *log = capture_end();
	assert_int_equal(rc, 0);
	esd_cache_get_info(c, &info);
	if (info.page_size == 4096) {
		assert_non_null(strstr(log, "WARN"));
		assert_non_null(strstr(log, "using 4 KiB pages"));
	} else {
		assert_null(strstr(log, "WARN"));
	}
	esd_cache_close(c);

	/* HUGE when the pool is too small: refused with the count to reserve.
	 * (Other processes resize the pool too: if it grew meanwhile, the
	 * region simply is in huge pages.) */
	if (free_pages < (long)(sz.total >> 21)) {
		cfg.pages = ESD_CACHE_PAGES_HUGE;
		capture_begin();
		rc = esd_cache_create(&cfg, &c);
		log = capture_end();
		if (rc == 0) {
			esd_cache_get_info(c, &info);
			assert_int_equal(info.page_size, 2u << 20);
			esd_cache_close(c);
		} else {
			assert_int_equal(rc, -ENOMEM);
			assert_non_null(strstr(log, "nr_hugepages"));
		}
	}
}

static void expect_refused(int fd, int want_rc, const char *field)
{
	struct esd_cache *a = NULL;
	capture_begin();
	int rc = esd_cache_attach_fd(fd, 0, &a);
	char *log = capture_end();
	assert_int_equal(rc, want_rc);
	assert_null(a);
	if (!strstr(log, field))
		fail_msg("error does not name '%s': %s", field, log);
}

/* Header: magic at 0, version at 8, total_bytes at 16, rows at 32,
 * vec_stride at 96, checksum at 144 (cache/region_impl.h). */
static uint64_t fnv(const uint8_t *p, size_t n)
{
	uint64_t x = UINT64_C(0xcbf29ce484222325);
	for (size_t i = 0; i < n; i++) {
		x ^= p[i];
		x *= UINT64_C(0x100000001b3);
	}
	return x;
}

static void reseal(uint8_t *hdr)
{
	uint64_t sum = fnv(hdr, 144);
	memcpy(hdr + 144, &sum, 8);
}

static void test_header_validation(void **state)
{
	(void)state;
	struct esd_cache *c = make(100, 8, ESD_OPT_SGD, 1);
	int fd = esd_cache_fd(c);
	struct esd_cache_info info;
	esd_cache_get_info(c, &info);
	uint8_t *hdr = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	uint8_t good[192];
	assert_true(hdr != MAP_FAILED);
	memcpy(good, hdr, sizeof(good));

	struct esd_cache *a = NULL;
	assert_int_equal(esd_cache_attach_fd(fd, 0, &a), 0);
	esd_cache_close(a);

	hdr[0] ^= 0xff;
	expect_refused(fd, -ESD_EBADMAGIC, "magic");
	memcpy(hdr, good, sizeof(good));

	hdr[8] = 99;
	expect_refused(fd, -ESD_EBADVERSION, "version");
	memcpy(hdr, good, sizeof(good));

	hdr[33] ^= 1; /* rows, checksum not updated: corruption */
	expect_refused(fd, -ESD_EBADSUM, "checksum");
	memcpy(hdr, good, sizeof(good));

	hdr[144] ^= 1; /* the checksum itself */
	expect_refused(fd, -ESD_EBADSUM, "checksum");
	memcpy(hdr, good, sizeof(good));

	/* a well-sealed header with a wrong size field */
	uint64_t v;
	memcpy(&v, hdr + 96, 8);
	v += 64;
	memcpy(hdr + 96, &v, 8);
	reseal(hdr);
	expect_refused(fd, -EINVAL, "vec_stride");
	memcpy(hdr, good, sizeof(good));

	memcpy(&v, hdr + 16, 8);
	v += 2u << 20;
	memcpy(hdr + 16, &v, 8);
	reseal(hdr);
	expect_refused(fd, -EINVAL, "total_bytes");
	memcpy(hdr, good, sizeof(good));

	/* the file is not the size the header says */
	assert_int_equal(ftruncate(fd, (off_t)info.bytes + (2 << 20)), 0);
	expect_refused(fd, -EINVAL, "total_bytes");
	assert_int_equal(ftruncate(fd, (off_t)info.bytes), 0);

	/* rows changed and resealed: the layout no longer matches */
	hdr[32] ^= 0x40;
	reseal(hdr);
	expect_refused(fd, -EINVAL, "header field");
	memcpy(hdr, good, sizeof(good));

	assert_int_equal(esd_cache_attach_fd(fd, 0, &a), 0);
	esd_cache_close(a);
	assert_int_equal(esd_cache_attach_fd(-1, 0, &a), -EBADF);
	int devnull = open("/dev/null", O_RDONLY);
	expect_refused(devnull, -EINVAL, "too small");
	close(devnull);
	munmap(hdr, 4096);
	esd_cache_close(c);
}

/* Random headers, some with a valid magic, version and checksum so the
 * deeper checks run: always refused, never a crash. */
static void test_garbage_headers(void **state)
{
	(void)state;
	struct esd_cache *c = make(100, 8, ESD_OPT_ADAM, 4), *a = NULL;
	int fd = esd_cache_fd(c);
	uint8_t *hdr = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	uint8_t good[192];
	uint64_t rng = 2024;
	assert_true(hdr != MAP_FAILED);
	memcpy(good, hdr, sizeof(good));

	capture_begin();
	for (int i = 0; i < 300; i++) {
		memcpy(hdr, good, sizeof(good));
		int nflip = 1 + (int)(esd_test_rand(&rng) % 8);
		for (int k = 0; k < nflip; k++) {
			uint64_t r = esd_test_rand(&rng);
			hdr[16 + r % (144 - 16)] ^= (uint8_t)(1u << ((r >> 32) % 8));
		}
		if (i % 2)
			reseal(hdr);
		int rc = esd_cache_attach_fd(fd, 0, &a);
		if (rc == 0) { /* a flip that changed nothing that matters */
			esd_cache_close(a);
			a = NULL;
		}
	}
	memcpy(hdr, good, sizeof(good));
	/* a good region header over a corrupt metadata block */
	uint64_t cmeta_off;
	memcpy(&cmeta_off, good + 64, 8);
	uint8_t *meta = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)cmeta_off);
	assert_true(meta != MAP_FAILED);
	meta[0] ^= 1;
	int rc = esd_cache_attach_fd(fd, 0, &a);
	meta[0] ^= 1;
	char *log = capture_end();
	(void)log;
	assert_int_equal(rc, -ESD_EBADMAGIC);
	assert_int_equal(esd_cache_attach_fd(fd, 0, &a), 0);
	esd_cache_close(a);
	munmap(meta, 4096);
	munmap(hdr, 4096);
	esd_cache_close(c);
}

static void test_rows_gather_scatter(void **state)
{
	(void)state;
	const uint32_t rows = 50, dim = 24;
	struct esd_cache *c = make(rows, dim, ESD_OPT_ADAM, 3);

	for (uint32_t s = 0; s < rows; s++) {
		float *v = esd_cache_vec(c, s), *st = esd_cache_state(c, s),
		      *g = esd_cache_grad(c, s);
		assert_non_null(v);
		assert_non_null(st);
		assert_int_equal((uintptr_t)v % 64, 0);
		for (uint32_t k = 0; k < dim; k++) {
			v[k] = (float)(s * 1000 + k);
			st[k] = -(float)(s * 1000 + k);
			st[dim + k] = 0.5f * (float)s;
			g[k] = 0.25f * (float)k;
		}
	}
	assert_null(esd_cache_vec(c, rows));
	assert_null(esd_cache_grad(c, rows));

	uint32_t slots[4] = {7, 0, 49, 7};
	size_t rb = esd_cache_row_bytes(c, ESD_CACHE_VEC | ESD_CACHE_STATE | ESD_CACHE_GRAD);
	assert_int_equal(rb, dim * 4 * (1 + 2 + 1));
	float *buf = calloc(4, rb);
	assert_int_equal(
	    esd_cache_gather(c, slots, 4, ESD_CACHE_VEC | ESD_CACHE_STATE | ESD_CACHE_GRAD, buf),
	    0);
	for (int i = 0; i < 4; i++) {
		float *r = buf + (size_t)i * (rb / 4);
		assert_true(r[0] == (float)(slots[i] * 1000));
		assert_true(r[dim + 1] == -(float)(slots[i] * 1000 + 1));
		assert_true(r[2 * dim] == 0.5f * (float)slots[i]);
		assert_true(r[3 * dim + 2] == 0.5f);
	}
	/* vectors only, then scattered to other slots */
	assert_int_equal(esd_cache_gather(c, slots, 3, ESD_CACHE_VEC, buf), 0);
	uint32_t to[3] = {1, 2, 3};
	assert_int_equal(esd_cache_scatter(c, to, 3, ESD_CACHE_VEC, buf), 0);
	assert_true(esd_cache_vec(c, 3)[5] == 49005.0f);
	assert_true(esd_cache_vec(c, 1)[0] == 7000.0f);

	uint32_t bad[2] = {1, rows};
	assert_int_equal(esd_cache_gather(c, bad, 2, ESD_CACHE_VEC, buf), -EINVAL);
	assert_int_equal(esd_cache_gather(c, slots, 1, 0, buf), -EINVAL);
	assert_int_equal(esd_cache_gather(c, slots, 1, 8, buf), -EINVAL);
	assert_int_equal(esd_cache_grad_zero(c, to, 3), 0);
	assert_true(esd_cache_grad(c, 2)[3] == 0.0f);
	assert_true(esd_cache_grad(c, 4)[3] == 0.75f);
	free(buf);
	esd_cache_close(c);

	/* SGD: no state */
	c = make(4, 4, ESD_OPT_SGD, 1);
	assert_null(esd_cache_state(c, 0));
	assert_int_equal(esd_cache_row_bytes(c, ESD_CACHE_STATE), 0);
	esd_cache_close(c);
}

/* Counters per table and DIRTY victims, through the daemon's begin_iter. */
static void test_counters_and_dirty_victims(void **state)
{
	(void)state;
	struct esd_cache *c = make(4, 8, ESD_OPT_SGD, 2);
	struct esd_cmeta *cm = esd_cache_meta(c);
	struct esd_cmeta_pull pulls[4];
	struct esd_cmeta_evict ev[4];
	uint32_t slots[4];
	struct esd_cmeta_fill f = {.pulls = pulls, .evicts = ev, .slots = slots};
	struct esd_cache_counters t0, t1, other, tot;

	uint64_t a[4] = {esd_key_make(0, 1), esd_key_make(0, 2), esd_key_make(1, 1),
	                 esd_key_make(5, 1)};
	assert_int_equal(esd_cache_begin_iter(c, 1, a, 4, &f), 0);
	esd_cache_meta_write_begin(c);
	for (int i = 0; i < 4; i++)
		esd_cmeta_set_state(cm, slots[i], i == 2 ? ESD_ROW_DIRTY : ESD_ROW_CLEAN, 3);
	esd_cmeta_mark_outdated(cm, a[1]);
	esd_cache_meta_write_end(c);

	/* needs (0,1) hit, (0,2) outdated, (1,7) absent -> evicts the
	 * lowest in Emark order among (1,1) DIRTY and (5,1) CLEAN */
	uint64_t b[3] = {esd_key_make(0, 1), esd_key_make(0, 2), esd_key_make(1, 7)};
	assert_int_equal(esd_cache_begin_iter(c, 2, b, 3, &f), 0);
	assert_int_equal(f.n_evicts, 1);
	assert_int_equal(f.evicts[0].key, esd_key_make(1, 1)); /* same mark/freq, lower key */
	assert_int_equal(f.evicts[0].dirty, 1);
	assert_int_equal(f.evicts[0].clock, 3);

	assert_int_equal(esd_cache_counters(c, 0, &t0), 0);
	assert_int_equal(esd_cache_counters(c, 1, &t1), 0);
	assert_int_equal(esd_cache_counters(c, 2, &other), 0);
	assert_int_equal(esd_cache_counters(c, 3, &other), -EINVAL);
	assert_int_equal(esd_cache_counters(c, 2, &other), 0);
	assert_int_equal(t0.miss_absent, 2); /* iteration 1 */
	assert_int_equal(t0.hits, 1);
	assert_int_equal(t0.miss_outdated, 1);
	assert_int_equal(t1.miss_absent, 2);
	assert_int_equal(t1.evict_dirty, 1);
	assert_int_equal(t1.evict_clean, 0);
	assert_int_equal(other.miss_absent, 1); /* table 5 >= ntables */
	esd_cache_counters_total(c, &tot);
	assert_int_equal(tot.hits + tot.miss_absent + tot.miss_outdated, 7);
	assert_int_equal(tot.evict_dirty + tot.evict_clean, 1);

	/* errors leave counters alone */
	uint64_t unsorted[2] = {5, 4};
	assert_int_equal(esd_cache_begin_iter(c, 3, unsorted, 2, &f), -EINVAL);
	esd_cache_counters_total(c, &tot);
	assert_int_equal(tot.hits + tot.miss_absent + tot.miss_outdated, 7);

	/* the seqlock is even (stable) between writes */
	uint64_t seq = esd_cache_meta_read_begin(c);
	assert_int_equal(seq % 2, 0);
	assert_false(esd_cache_meta_read_retry(c, seq));
	esd_cache_meta_write_begin(c);
	esd_cache_meta_write_end(c);
	assert_true(esd_cache_meta_read_retry(c, seq));
	esd_cache_close(c);
}

static void on_segv(int sig)
{
	(void)sig;
	_exit(42);
}

/* A trainer mapping: metadata and rows read-only (a write faults), the
 * gradients writable. */
static void test_trainer_mapping_read_only(void **state)
{
	(void)state;
	struct esd_cache *c = make(8, 8, ESD_OPT_SGD, 1), *t = NULL;
	uint32_t s = 3;
	float row[8] = {1, 2, 3, 4, 5, 6, 7, 8};

	assert_int_equal(esd_cache_attach_fd(esd_cache_fd(c), 0, &t), 0);
	assert_null(esd_cache_meta(t));
	assert_non_null(esd_cache_meta_ro(t));
	assert_int_equal(esd_cache_scatter(t, &s, 1, ESD_CACHE_VEC, row), -EPERM);
	assert_int_equal(esd_cache_scatter(t, &s, 1, ESD_CACHE_GRAD, row), 0);
	assert_true(esd_cache_grad(c, 3)[7] == 8.0f);
	assert_int_equal(esd_cache_begin_iter(t, 1, NULL, 0, &(struct esd_cmeta_fill){0}), -EPERM);

	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct sigaction sa = {.sa_handler = on_segv};
		sigaction(SIGSEGV, &sa, NULL);
		*(volatile float *)esd_cache_vec(t, 3) = 1.0f; /* must fault */
		_exit(0);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true((WIFEXITED(st) && WEXITSTATUS(st) == 42) ||
	            (WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV));
	esd_cache_close(t);
	esd_cache_close(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sizes),
	    cmocka_unit_test(test_small_pages_and_log),
	    cmocka_unit_test(test_auto_fallback_warns),
	    cmocka_unit_test(test_header_validation),
	    cmocka_unit_test(test_garbage_headers),
	    cmocka_unit_test(test_rows_gather_scatter),
	    cmocka_unit_test(test_counters_and_dirty_victims),
	    cmocka_unit_test(test_trainer_mapping_read_only),
	};
	return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
