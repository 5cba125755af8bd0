/* The frame codec: every op round-trips, and the decoder refuses every
 * malformed length, count, dimension, kind and field with -EPROTO, -E2BIG,
 * -EMSGSIZE, -ESD_EBADMAGIC or -ESD_EBADVERSION and a reason. */
#include "testutil.h"

#include <esd/err.h>
#include <esd/proto.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

static const struct esd_proto_limits lim = {.max_body = 1u << 20, .max_rows = 1024, .max_dim = 256};

static void put32(struct esd_buf *b, size_t off, uint32_t v)
{
	memcpy(b->data + off, &v, 4);
}

static int decode(struct esd_buf *b, struct esd_msg *m, char *err)
{
	return esd_proto_decode(b->data, b->len, &lim, m, err, 160);
}

static void test_roundtrip_rows(void **state)
{
	(void)state;
	struct esd_buf b;
	struct esd_rows_enc e;
	struct esd_msg m;
	char err[160];
	float v[8], s[8];
	esd_buf_init(&b);
	struct esd_rows r = {.iteration = 7,
	                     .sequence = 3,
	                     .worker = 2,
	                     .kind = ESD_XFER_EVICT_PUSH,
	                     .dim = 8,
	                     .state_dim = 8};
	assert_int_equal(esd_enc_rows_begin(&e, &b, ESD_OP_PUSH_VALUE, &r), 0);
	for (int i = 0; i < 5; i++) {
		for (int j = 0; j < 8; j++) {
			v[j] = (float)(i * 10 + j);
			s[j] = -(float)j;
		}
		assert_int_equal(
		    esd_enc_row(&e, esd_key_make(3, (uint64_t)i), (uint64_t)i + 100, v, s), 0);
	}
	esd_enc_rows_end(&e);
	assert_int_equal(b.len, esd_rows_frame_size(5, 8, 8));
	assert_int_equal(decode(&b, &m, err), 0);
	assert_int_equal(m.hdr.op, ESD_OP_PUSH_VALUE);
	assert_int_equal(m.u.rows.count, 5);
	assert_int_equal(m.u.rows.iteration, 7);
	assert_int_equal(m.u.rows.sequence, 3);
	assert_int_equal(m.u.rows.worker, 2);
	assert_int_equal(m.u.rows.kind, ESD_XFER_EVICT_PUSH);
	for (uint32_t i = 0; i < 5; i++) {
		struct esd_row_view rv;
		esd_rows_get(&m.u.rows, i, &rv);
		assert_int_equal(rv.key, esd_key_make(3, i));
		assert_int_equal(rv.clock, i + 100);
		assert_true(rv.value[7] == (float)(i * 10 + 7));
		assert_true(rv.state[3] == -3.0f);
	}
	enum esd_xfer_kind k;
	uint32_t rows;
	esd_proto_classify(b.data, b.len, &k, &rows);
	assert_int_equal(k, ESD_XFER_EVICT_PUSH);
	assert_int_equal(rows, 5);
	esd_buf_free(&b);
}

/* model.dims: tables 0 and 1 of dims 2 and 8 in rows of 8 floats with Adam
 * state (2 blocks): each row carries its table's floats, in place (zero
 * copy) or copied, and unpacks to the padded shape with a zero tail; a
 * receiver of the other kind, a key of no table and a cut body are
 * refused. */
static void test_table_dims_rows(void **state)
{
	(void)state;
	static const uint32_t dims[2] = {2, 8};
	const struct esd_proto_limits tl = {.max_body = 1u << 20, .max_rows = 1024, .max_dim = 256,
					    .table_dims = dims, .ntables = 2};
	struct esd_buf b;
	struct esd_gather g;
	struct esd_rows_enc e;
	struct esd_msg m;
	char err[160];
	float v[8], s[16], out[24];
	esd_buf_init(&b);
	esd_gather_init(&g);
	for (int j = 0; j < 8; j++) {
		v[j] = (float)(j + 1);
		s[j] = (float)(10 + j);
		s[8 + j] = (float)(20 + j);
	}
	struct esd_rows r = {.kind = ESD_XFER_UPDATE_PUSH, .dim = 8, .state_dim = 16,
			     .table_dims = dims, .ntables = 2};
	assert_int_equal(esd_enc_rows_begin(&e, &b, ESD_OP_PUSH_VALUE, &r), 0);
	assert_int_equal(esd_enc_row_size(&e, esd_key_make(0, 1)), 16 + 4 * 6);
	assert_int_equal(esd_enc_row(&e, esd_key_make(0, 1), 5, v, s), 0);
	assert_int_equal(esd_enc_row_ref(&e, &g, esd_key_make(1, 2), 6, v, s), 0);
	assert_int_equal(esd_enc_row_ref(&e, &g, esd_key_make(0, 3), 7, v, s), 0);
	esd_enc_rows_end(&e);
	/* the gathered frame, flattened */
	void *iov;
	int n;
	assert_int_equal(esd_gather_iov(&g, &b, &iov, &n), 0);
	static _Alignas(16) uint8_t flat[1024];
	size_t len = 0;
	for (int i = 0; i < n; i++) {
		const struct iovec *x = (const struct iovec *)iov + i;
		memcpy(flat + len, x->iov_base, x->iov_len);
		len += x->iov_len;
	}
	assert_int_equal(len, ESD_FRAME_HDR_SIZE + 40 + 2 * (16 + 4 * 6) + 16 + 4 * 24);
	assert_int_equal(esd_proto_decode(flat, len, &tl, &m, err, sizeof(err)), 0);
	const uint8_t *at = m.u.rows.data;
	for (uint32_t i = 0; i < 3; i++) {
		struct esd_row_view rv;
		at = esd_rows_next(&m.u.rows, at, &rv);
		const uint32_t d = i == 1 ? 8 : 2;
		assert_int_equal(rv.dim, d);
		assert_int_equal(rv.state_len, 2 * d);
		memset(out, 0x7f, sizeof(out));
		esd_row_view_unpack(&rv, 8, 16, out, out + 8);
		for (uint32_t j = 0; j < 8; j++) {
			assert_true(out[j] == (j < d ? v[j] : 0.0f));
			assert_true(out[8 + j] == (j < d ? s[j] : 0.0f));
			assert_true(out[16 + j] == (j < d ? s[8 + j] : 0.0f));
		}
	}
	assert_ptr_equal(at, flat + len);
	/* a receiver without model.dims, and one with, of the other frames */
	assert_int_equal(esd_proto_decode(flat, len, &lim, &m, err, sizeof(err)), -EPROTO);
	assert_non_null(strstr(err, "model.dims"));
	/* a key of a table the job does not have */
	memcpy(flat + ESD_FRAME_HDR_SIZE + 40, &(esd_key_t){esd_key_make(7, 1)}, 8);
	assert_int_equal(esd_proto_decode(flat, len, &tl, &m, err, sizeof(err)), -EPROTO);
	assert_non_null(strstr(err, "table 7"));
	/* table 0's row where table 1's (8 floats) was: the body does not fit */
	memcpy(flat + ESD_FRAME_HDR_SIZE + 40, &(esd_key_t){esd_key_make(1, 1)}, 8);
	assert_int_equal(esd_proto_decode(flat, len, &tl, &m, err, sizeof(err)), -EPROTO);
	esd_buf_reset(&b);
	struct esd_rows plain = {.kind = ESD_XFER_UPDATE_PUSH, .dim = 8};
	assert_int_equal(esd_enc_rows_begin(&e, &b, ESD_OP_PUSH_GRAD, &plain), 0);
	assert_int_equal(esd_enc_row(&e, esd_key_make(0, 1), 5, v, NULL), 0);
	esd_enc_rows_end(&e);
	assert_int_equal(esd_proto_decode(b.data, b.len, &tl, &m, err, sizeof(err)), -EPROTO);
	esd_gather_free(&g);
	esd_buf_free(&b);
}

static void test_roundtrip_small_ops(void **state)
{
	(void)state;
	struct esd_buf b;
	struct esd_msg m;
	char err[160];
	esd_buf_init(&b);

	struct esd_hello h = {.proto_version = 1,
	                      .worker = 4,
	                      .job_token = 0xfeedull,
	                      .shard = 1,
	                      .dim = 64,
	                      .state_dim = 64,
	                      .nworkers = 8,
	                      .stream_digest = 0x0123456789abcdefull};
	assert_int_equal(esd_enc_hello(&b, &h, 0), 0);
	assert_int_equal(decode(&b, &m, err), 0);
	assert_memory_equal(&m.u.hello, &h, sizeof(h));
	esd_buf_reset(&b);

	esd_key_t keys[3] = {1, 2, UINT64_MAX};
	assert_int_equal(esd_enc_pull(&b, 9, 77, 3, keys, 3), 0);
	assert_int_equal(decode(&b, &m, err), 0);
	assert_int_equal(m.u.pull.count, 3);
	assert_int_equal(m.u.pull.request, 77);
	assert_int_equal(esd_msg_key(&m, 2), UINT64_MAX);
	esd_buf_reset(&b);

	struct esd_barrier br = {.iteration = 5, .digest = 0xabcdef, .worker = 1, .npushes = 12};
	assert_int_equal(esd_enc_barrier(&b, &br), 0);
	assert_int_equal(decode(&b, &m, err), 0);
	assert_memory_equal(&m.u.barrier, &br, sizeof(br));
	esd_buf_reset(&b);

	struct esd_ack a = {.iteration = 5, .sequence = 6, .op = ESD_OP_PUSH_GRAD, .status = -EIO};
	assert_int_equal(esd_enc_ack(&b, &a), 0);
	assert_int_equal(decode(&b, &m, err), 0);
	assert_memory_equal(&m.u.ack, &a, sizeof(a));
	esd_buf_reset(&b);

	assert_int_equal(esd_enc_error(&b, -EPROTO, "bad thing"), 0);
	assert_int_equal(decode(&b, &m, err), 0);
	assert_int_equal(m.u.error.code, -EPROTO);
	assert_int_equal(m.u.error.len, 9);
	assert_memory_equal(m.u.error.text, "bad thing", 9);
	esd_buf_reset(&b);

	struct esd_stats_entry se[2] = {
	    {.kind = 0, .tx_bytes = 1, .tx_rows = 2, .rx_bytes = 3, .rx_rows = 4},
	    {.kind = 2, .tx_bytes = 5}};
	assert_int_equal(esd_enc_stats(&b, se, 2, ESD_FLAG_REPLY), 0);
	assert_int_equal(decode(&b, &m, err), 0);
	assert_int_equal(m.u.stats.count, 2);
	struct esd_stats_entry got;
	esd_stats_get(&m.u.stats, 1, &got);
	assert_int_equal(got.kind, 2);
	assert_int_equal(got.tx_bytes, 5);
	esd_buf_free(&b);
}

static void test_header_refusals(void **state)
{
	(void)state;
	struct esd_buf b;
	struct esd_msg m;
	char err[160];
	esd_buf_init(&b);
	assert_int_equal(esd_enc_barrier(&b, &(struct esd_barrier){.iteration = 1}), 0);

	b.data[0] ^= 1;
	assert_int_equal(decode(&b, &m, err), -ESD_EBADMAGIC);
	b.data[0] ^= 1;
	b.data[4] = ESD_PROTO_VERSION + 1;
	assert_int_equal(decode(&b, &m, err), -ESD_EBADVERSION);
	char want[32];
	snprintf(want, sizeof(want), "version %u", ESD_PROTO_VERSION + 1);
	assert_non_null(strstr(err, want));
	b.data[4] = ESD_PROTO_VERSION;
	b.data[5] = 200;
	assert_int_equal(decode(&b, &m, err), -EPROTO);
	assert_non_null(strstr(err, "unknown op 200"));
	b.data[5] = ESD_OP_BARRIER;
	b.data[7] = 0x80;
	assert_int_equal(decode(&b, &m, err), -EPROTO);
	b.data[7] = 0;
	put32(&b, 12, 1);
	assert_int_equal(decode(&b, &m, err), -EPROTO);
	put32(&b, 12, 0);

	struct esd_frame_hdr h;
	uint32_t lens[] = {lim.max_body + 4, lim.max_body + 1, UINT32_MAX};
	for (unsigned i = 0; i < 3; i++) {
		put32(&b, 8, lens[i]);
		assert_int_equal(esd_frame_hdr_parse(b.data, b.len, &lim, &h, err, 160), -EMSGSIZE);
	}
	put32(&b, 8, lim.max_body);
	assert_int_equal(esd_frame_hdr_parse(b.data, b.len, &lim, &h, err, 160), 0);
	assert_int_equal(decode(&b, &m, err), -EPROTO); /* frame shorter than its header says */
	put32(&b, 8, 22);
	assert_int_equal(decode(&b, &m, err), -EPROTO); /* not a multiple of 4 */
	put32(&b, 8, 0);
	b.len = ESD_FRAME_HDR_SIZE;
	assert_int_equal(decode(&b, &m, err), -EPROTO); /* BARRIER needs 24 bytes */
	assert_int_equal(esd_frame_hdr_parse(b.data, 10, &lim, &h, err, 160), -EAGAIN);
	assert_int_equal(esd_proto_decode(b.data, 10, &lim, &m, err, 160), -EPROTO);
	esd_buf_free(&b);
}

static void test_body_refusals(void **state)
{
	(void)state;
	struct esd_buf b;
	struct esd_msg m;
	struct esd_rows_enc e;
	char err[160];
	float v[4] = {0};
	esd_buf_init(&b);

	/* PULL count larger than the keys present, and above max_rows. */
	esd_key_t keys[2] = {1, 2};
	assert_int_equal(esd_enc_pull(&b, 1, 1, 1, keys, 2), 0);
	put32(&b, ESD_FRAME_HDR_SIZE + 20, 3);
	assert_int_equal(decode(&b, &m, err), -EPROTO);
	put32(&b, ESD_FRAME_HDR_SIZE + 20, 5000);
	assert_int_equal(decode(&b, &m, err), -E2BIG);
	put32(&b, ESD_FRAME_HDR_SIZE + 20, UINT32_MAX);
	assert_int_equal(decode(&b, &m, err), -E2BIG);
	esd_buf_reset(&b);

	/* Row op: count/dim mismatch, dim over limit, kind, grad with state. */
	struct esd_rows r = {.kind = ESD_XFER_UPDATE_PUSH, .dim = 4};
	assert_int_equal(esd_enc_rows_begin(&e, &b, ESD_OP_PUSH_GRAD, &r), 0);
	assert_int_equal(esd_enc_row(&e, 1, 0, v, NULL), 0);
	esd_enc_rows_end(&e);
	assert_int_equal(decode(&b, &m, err), 0);
	size_t body = ESD_FRAME_HDR_SIZE;
	put32(&b, body + 24, 2);
	assert_int_equal(decode(&b, &m, err), -EPROTO);
	put32(&b, body + 24, 1);
	put32(&b, body + 28, 1000);
	assert_int_equal(decode(&b, &m, err), -E2BIG);
	put32(&b, body + 28, 2);
	assert_int_equal(decode(&b, &m, err), -EPROTO);
	put32(&b, body + 28, 0);
	assert_int_equal(decode(&b, &m, err), -EPROTO);
	put32(&b, body + 28, 4);
	put32(&b, body + 20, ESD_XFER_EVICT_PUSH);
	assert_int_equal(decode(&b, &m, err), -EPROTO);
	put32(&b, body + 20, ESD_XFER_UPDATE_PUSH);
	put32(&b, body + 32, 4);
	assert_int_equal(decode(&b, &m, err), -EPROTO);
	assert_non_null(strstr(err, "state_dim"));
	esd_buf_reset(&b);

	/* PULL_RESP is a miss pull or other (dense table, recovery). */
	r.kind = ESD_XFER_MISS_PULL;
	assert_int_equal(esd_enc_rows_begin(&e, &b, ESD_OP_PULL_RESP, &r), 0);
	esd_enc_rows_end(&e);
	assert_int_equal(decode(&b, &m, err), 0);
	put32(&b, body + 20, ESD_XFER_OTHER);
	assert_int_equal(decode(&b, &m, err), 0);
	put32(&b, body + 20, ESD_XFER_EVICT_PUSH);
	assert_int_equal(decode(&b, &m, err), -EPROTO);
	put32(&b, body + 20, 9);
	assert_int_equal(decode(&b, &m, err), -EPROTO);
	esd_buf_reset(&b);

	/* ERROR: text longer than the frame, above the maximum, bad padding. */
	assert_int_equal(esd_enc_error(&b, -1, "abc"), 0);
	put32(&b, body + 4, 9);
	assert_int_equal(decode(&b, &m, err), -EPROTO);
	put32(&b, body + 4, 5000);
	assert_int_equal(decode(&b, &m, err), -E2BIG);
	put32(&b, body + 4, 3);
	b.data[body + 8 + 3] = 'x';
	assert_int_equal(decode(&b, &m, err), -EPROTO);
	esd_buf_reset(&b);

	/* STATS: count above maximum, bad kind. */
	struct esd_stats_entry se = {.kind = 1};
	assert_int_equal(esd_enc_stats(&b, &se, 1, 0), 0);
	put32(&b, body, 17);
	assert_int_equal(decode(&b, &m, err), -E2BIG);
	put32(&b, body, 1);
	put32(&b, body + 8, 9);
	assert_int_equal(decode(&b, &m, err), -EPROTO);

	/* Encoders refuse what the decoder would refuse. */
	esd_buf_reset(&b);
	r.kind = ESD_XFER_MISS_PULL;
	assert_int_equal(esd_enc_rows_begin(&e, &b, ESD_OP_PUSH_VALUE, &r), -EINVAL);
	r.kind = ESD_XFER_UPDATE_PUSH;
	r.dim = 0;
	assert_int_equal(esd_enc_rows_begin(&e, &b, ESD_OP_PUSH_VALUE, &r), -EINVAL);
	assert_int_equal(esd_enc_rows_begin(&e, &b, ESD_OP_BARRIER, &r), -EINVAL);
	esd_buf_free(&b);
}

static void test_classify(void **state)
{
	(void)state;
	struct esd_buf b;
	enum esd_xfer_kind k;
	uint32_t rows;
	esd_buf_init(&b);
	esd_key_t key = 5;
	esd_enc_pull(&b, 1, 1, 1, &key, 1);
	esd_proto_classify(b.data, b.len, &k, &rows);
	assert_int_equal(k, ESD_XFER_MISS_PULL);
	assert_int_equal(rows, 0);
	esd_buf_reset(&b);
	esd_enc_barrier(&b, &(struct esd_barrier){0});
	esd_proto_classify(b.data, b.len, &k, &rows);
	assert_int_equal(k, ESD_XFER_OTHER);
	esd_proto_classify(b.data, 3, &k, &rows);
	assert_int_equal(k, ESD_XFER_OTHER);
	esd_buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_roundtrip_rows),  cmocka_unit_test(test_roundtrip_small_ops),
	    cmocka_unit_test(test_header_refusals), cmocka_unit_test(test_body_refusals),
	    cmocka_unit_test(test_classify),        cmocka_unit_test(test_table_dims_rows),
	};
	return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
