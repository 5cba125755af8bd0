/* How the rdma backend cuts frames in pieces into SENDs (gather_plan.c),
 * checked without a device on random batches the node's encoder makes:
 * the chunks carry the frames' bytes in order, none spans two frames or
 * passes the slot, each list fits the queue pair's limit, a piece is sent
 * in place only from registered memory and when long enough (with its
 * region's key), copies share entries, and a chunk ends early only when
 * its list is full. */
#include "testutil.h"

#include "link_internal.h"

#include <errno.h>
#include <esd/proto.h>
#include <stdlib.h>
#include <string.h>

enum { POOL = 1 << 20 };
static uint8_t pool_a[POOL], pool_b[POOL], pool_c[POOL]; /* c: not registered */
static uint8_t stage[256 << 10];

struct check {
	const struct plan_rules *r;
	const uint8_t *want; /* the frames' bytes */
	size_t want_len, at;
	const size_t *frame_end; /* each frame's end offset, in order */
	int nframes, frame;
	size_t chunks, in_place, early;
};

static int give_stage(void *ctx, uint8_t **out)
{
	(void)ctx;
	*out = stage;
	return 0;
}

static int take_chunk(void *ctx, struct esd_gather_plan_chunk *c)
{
	struct check *k = ctx;
	const struct plan_rules *r = k->r;
	assert_true(c->n >= 1 && c->n <= r->max_entries);
	assert_true(c->len >= 1 && c->len <= r->chunk_max);
	size_t frame_start = k->frame ? k->frame_end[k->frame - 1] : 0;
	size_t end = k->frame_end[k->frame];
	assert_true(k->at + c->len <= end); /* within one frame */
	if (k->at == frame_start)
		assert_true(c->len >= ESD_FRAME_HDR_SIZE); /* the receiver reads it */
	size_t sum = 0, staged = 0;
	unsigned inp = 0;
	for (int i = 0; i < c->n; i++) {
		const struct plan_entry *e = &c->e[i];
		const uint8_t *p = (const uint8_t *)(uintptr_t)e->addr;
		if (e->staged) {
			assert_int_equal(e->key, r->stage_key);
			assert_true(p >= stage && p + e->len <= stage + sizeof(stage));
			assert_true(p == stage + staged); /* copies packed in order */
			if (i)
				assert_false(c->e[i - 1].staged); /* consecutive copies: one entry */
			staged += e->len;
		} else {
			bool found = false;
			for (unsigned j = 0; j < r->nreg; j++) {
				const uint8_t *b = r->reg[j].base;
				if (p >= b && p + e->len <= b + r->reg[j].len) {
					assert_int_equal(e->key, r->reg[j].key);
					found = true;
				}
			}
			assert_true(found);
			assert_true(e->len >= r->min_in_place);
			inp++;
		}
		assert_memory_equal(p, k->want + k->at + sum, e->len);
		sum += e->len;
	}
	assert_int_equal(sum, c->len);
	assert_int_equal(staged, c->staged);
	assert_int_equal(inp, c->in_place);
	k->at += c->len;
	if (k->at < end && c->len < r->chunk_max) {
		assert_true(c->n + 2 > r->max_entries); /* ended early: the list was full */
		k->early++;
	}
	if (k->at == end)
		k->frame++;
	k->chunks++;
	k->in_place += inp;
	return 0;
}

static const float *pick_row(uint32_t floats)
{
	uint8_t *pools[3] = {pool_a, pool_b, pool_c};
	uint8_t *p = pools[rand() % 3];
	size_t off = (size_t)(rand() % (int)((POOL - 4 * floats) / 4)) * 4;
	return (const float *)(void *)(p + off);
}

/* A batch of row frames as the node encodes them, a barrier after each;
 * frame ends in ends[]. */
static int make_batch(struct esd_buf *b, struct esd_gather *g, size_t *ends, int max_frames)
{
	static const uint32_t dims[] = {4, 64, 128, 600};
	int nf = 0;
	int frames = 1 + rand() % 4;
	for (int f = 0; f < frames && nf + 2 <= max_frames; f++) {
		struct esd_rows_enc e;
		uint32_t dim = dims[rand() % 4];
		struct esd_rows r = {.iteration = 1, .worker = 0, .kind = ESD_XFER_EVICT_PUSH,
		                     .dim = dim, .state_dim = rand() % 2 ? dim : 0};
		assert_int_equal(esd_enc_rows_begin(&e, b, ESD_OP_PUSH_VALUE, &r), 0);
		int rows = 1 + rand() % 300;
		for (int i = 0; i < rows; i++) {
			const float *v = pick_row(dim), *s = r.state_dim ? pick_row(dim) : NULL;
			int rc = rand() % 8 ? esd_enc_row_ref(&e, g, (esd_key_t)i, 1, v, s)
			                    : esd_enc_row(&e, (esd_key_t)i, 1, v, s);
			if (rc == -E2BIG)
				break;
			assert_int_equal(rc, 0);
		}
		esd_enc_rows_end(&e);
		ends[nf] = b->len + g->ext; /* offsets in the flattened batch */
		nf++;
		struct esd_barrier br = {.iteration = 1};
		assert_int_equal(esd_enc_barrier(b, &br), 0);
		ends[nf] = b->len + g->ext;
		nf++;
	}
	return nf;
}

static void test_random_batches(void **state)
{
	(void)state;
	static const int max_entries[] = {1, 2, 3, 5, 16};
	static const size_t chunk_max[] = {1024, 4096, 65536, 256 << 10};
	struct plan_region reg[2] = {{pool_a, POOL, 0xa1}, {pool_b, POOL, 0xb2}};
	size_t chunks = 0, in_place = 0, early = 0;
	srand(11);
	for (size_t i = 0; i < sizeof(pool_a); i++) {
		pool_a[i] = (uint8_t)rand();
		pool_b[i] = (uint8_t)rand();
		pool_c[i] = (uint8_t)rand();
	}
	for (int round = 0; round < 200; round++) {
		struct esd_buf b, flat;
		struct esd_gather g;
		size_t ends[16];
		void *iov;
		int n;
		esd_buf_init(&b);
		esd_buf_init(&flat);
		esd_gather_init(&g);
		int nf = make_batch(&b, &g, ends, 16);
		assert_int_equal(esd_gather_iov(&g, &b, &iov, &n), 0);
		const struct iovec *v = iov;
		for (int i = 0; i < n; i++) {
			assert_int_equal(esd_buf_reserve(&flat, v[i].iov_len), 0);
			memcpy(flat.data + flat.len, v[i].iov_base, v[i].iov_len);
			flat.len += v[i].iov_len;
		}
		struct plan_rules r = {.reg = reg,
		                       .nreg = 2,
		                       .max_entries = max_entries[round % 5],
		                       .min_in_place = 256,
		                       .chunk_max = chunk_max[(round / 5) % 4],
		                       .stage_key = 0x5e};
		struct check k = {.r = &r, .want = flat.data, .want_len = flat.len,
		                  .frame_end = ends, .nframes = nf};
		struct plan_ops ops = {.stage = give_stage, .emit = take_chunk};
		size_t inp;
		assert_int_equal(esd_gather_plan_send(&r, iov, n, &ops, &k, &inp), 0);
		assert_int_equal(k.at, flat.len);
		assert_int_equal(k.frame, nf);
		assert_int_equal(inp, k.in_place);
		if (r.max_entries == 1)
			assert_int_equal(inp, 0); /* no room beside a copy: all copied */
		chunks += k.chunks;
		in_place += k.in_place;
		early += k.early;
		esd_gather_free(&g);
		esd_buf_free(&b);
		esd_buf_free(&flat);
	}
	printf("# 200 batches: %zu chunks, %zu entries in place, %zu chunks ended early\n",
	       chunks, in_place, early);
	assert_true(in_place > 1000 && early > 0);
}

/* Pieces that end inside a frame: -EINVAL before any of it is sent. */
static void test_short_pieces(void **state)
{
	(void)state;
	struct esd_buf b;
	esd_buf_init(&b);
	struct esd_barrier br = {.iteration = 1};
	assert_int_equal(esd_enc_barrier(&b, &br), 0);
	struct iovec v = {b.data, b.len - 1};
	struct plan_rules r = {.max_entries = 4, .min_in_place = 256, .chunk_max = 4096};
	size_t ends[1] = {b.len};
	struct check k = {.r = &r, .want = b.data, .want_len = b.len, .frame_end = ends,
	                  .nframes = 1};
	struct plan_ops ops = {.stage = give_stage, .emit = take_chunk};
	size_t inp;
	assert_int_equal(esd_gather_plan_send(&r, &v, 1, &ops, &k, &inp), -EINVAL);
	assert_int_equal(k.chunks, 0); /* no part of the frame went */
	esd_buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_random_batches),
	                                   cmocka_unit_test(test_short_pieces)};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
