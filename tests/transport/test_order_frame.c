/* The ORDER frame (one decider: worker 0's part of a decision for another
 * worker, relayed by shard 0): round trip, the relay's copy of a decoded
 * frame, the encoder's refusals and the decoder's strict checks. */
#include "testutil.h"

#include <esd/err.h>
#include <esd/proto.h>
#include <string.h>

static int decode(struct esd_buf *b, struct esd_msg *m, char *err)
{
	return esd_proto_decode(b->data, b->len, NULL, m, err, 160);
}

static const uint32_t assign[5] = {0, 3, 1, 63, 2};
static const esd_key_t upd[2] = {7, 0xffff000000000001ull};
static const esd_key_t pull[3] = {1, 2, 3};

static struct esd_order_msg sample(void)
{
	struct esd_order_msg o = {.iteration = 42, .digest = 0x1234567890abcdefull, .worker = 3,
				  .flags = ESD_ORDER_CHECKPOINT | ESD_ORDER_RATE, .policy = -1,
				  .k = 5, .rate_bps = 500000000, .pred_rows = {3, 2, 0, 9}, .pred_bytes = {3 * 80, 2 * 528, 0, 9 * 48},
				  .count = {2, 3, 0}};
	return o;
}

static void check_sample(const struct esd_msg *m)
{
	const struct esd_order_msg *d = &m->u.order;
	assert_int_equal(m->hdr.op, ESD_OP_ORDER);
	assert_int_equal(d->iteration, 42);
	assert_int_equal(d->digest, 0x1234567890abcdefull);
	assert_int_equal(d->worker, 3);
	assert_int_equal(d->flags, ESD_ORDER_CHECKPOINT | ESD_ORDER_RATE);
	assert_int_equal(d->policy, -1);
	assert_int_equal(d->k, 5);
	assert_int_equal(d->rate_bps, 500000000);
	assert_int_equal(d->pred_rows[3], 9);
	assert_int_equal(d->pred_bytes[1], 2 * 528);
	assert_int_equal(d->pred_bytes[3], 9 * 48);
	for (uint32_t i = 0; i < 5; i++)
		assert_int_equal(d->assign[i], assign[i]);
	assert_int_equal(d->count[0], 2);
	assert_int_equal(d->count[1], 3);
	assert_int_equal(d->count[2], 0);
	assert_int_equal(esd_order_key(d, 0, 1), upd[1]);
	assert_int_equal(esd_order_key(d, 1, 2), pull[2]);
}

static void test_order_roundtrip(void **state)
{
	(void)state;
	struct esd_buf b, r;
	struct esd_msg m, m2;
	char err[160] = "";
	const esd_key_t *lists[ESD_ORDER_NLISTS] = {upd, pull, NULL};
	struct esd_order_msg o = sample();
	esd_buf_init(&b);
	esd_buf_init(&r);
	assert_int_equal(esd_enc_order(&b, &o, assign, lists), 0);
	assert_int_equal(b.len % 4, 0);
	assert_int_equal(b.len, ESD_FRAME_HDR_SIZE + 120 + 8 + 8 * 5);
	assert_int_equal(decode(&b, &m, err), 0);
	assert_string_equal(esd_op_name(ESD_OP_ORDER), "ORDER");
	check_sample(&m);
	/* the relay's copy is the same frame */
	assert_int_equal(esd_enc_order_copy(&r, &m.u.order), 0);
	assert_int_equal(r.len, b.len);
	assert_memory_equal(r.data, b.data, b.len);
	assert_int_equal(decode(&r, &m2, err), 0);
	check_sample(&m2);
	esd_buf_free(&b);
	esd_buf_free(&r);
}

static void test_order_encoder_refuses(void **state)
{
	(void)state;
	struct esd_buf b;
	const esd_key_t *lists[ESD_ORDER_NLISTS] = {upd, pull, NULL};
	uint32_t bad[5] = {0, 1, 64, 0, 0};
	esd_buf_init(&b);
	struct esd_order_msg o = sample();
	assert_int_equal(esd_enc_order(&b, &o, bad, lists), -EINVAL);
	o = sample();
	o.flags = 0x10;
	assert_int_equal(esd_enc_order(&b, &o, assign, lists), -EINVAL);
	o = sample();
	o.worker = ESD_MAX_WORKERS;
	assert_int_equal(esd_enc_order(&b, &o, assign, lists), -EINVAL);
	o = sample();
	o.count[2] = 1; /* a list without keys */
	assert_int_equal(esd_enc_order(&b, &o, assign, lists), -EINVAL);
	assert_int_equal(b.len, 0);
	esd_buf_free(&b);
}

/* Patch a byte of the sample's body and expect a refusal naming why. */
static void expect_bad(size_t off, uint8_t val, int want, const char *why)
{
	struct esd_buf b;
	struct esd_msg m;
	char err[160] = "";
	const esd_key_t *lists[ESD_ORDER_NLISTS] = {upd, pull, NULL};
	struct esd_order_msg o = sample();
	esd_buf_init(&b);
	assert_int_equal(esd_enc_order(&b, &o, assign, lists), 0);
	b.data[ESD_FRAME_HDR_SIZE + off] = val;
	assert_int_equal(decode(&b, &m, err), want);
	if (!strstr(err, why))
		fail_msg("offset %zu: '%s' lacks '%s'", off, err, why);
	esd_buf_free(&b);
}

static void test_order_decoder_refuses(void **state)
{
	(void)state;
	expect_bad(20, 0x10, -EPROTO, "unknown flags");
	expect_bad(84, 1, -EPROTO, "reserved field");
	expect_bad(16, 64, -EPROTO, "out of range");
	expect_bad(120 + 2, 64, -EPROTO, "sample 2 to worker 64");
	expect_bad(120 + 5, 1, -EPROTO, "padding byte 0");
	expect_bad(72, 3, -EPROTO, "its fields need"); /* more keys than the body holds */
	expect_bad(31, 0x80, -E2BIG, "samples above maximum");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_order_roundtrip),
	    cmocka_unit_test(test_order_encoder_refuses),
	    cmocka_unit_test(test_order_decoder_refuses),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
