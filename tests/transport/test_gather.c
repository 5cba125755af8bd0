/* Frames in pieces (zero copy): rows encoded by reference give, piece by
 * piece, the bytes esd_enc_row() gives, across full frames and frames of
 * other encoders appended between rows; esd_link_sendv() delivers them over
 * tcp in place (a writev) and, where the link must copy (the reliable
 * layer), the same frames; pieces that break a frame are refused naming
 * the piece; the table of memory links may send from refuses overlaps. */
#include "testutil.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <esd/proto.h>
#include <esd/transport.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

/* The rows of a test: nrows of dim value and dim state floats. */
static uint32_t dim, nrows;
static float *vals, *states;

static void fill_rows(uint32_t d, uint32_t n)
{
	free(vals);
	free(states);
	dim = d;
	nrows = n;
	vals = malloc(sizeof(float) * d * n);
	states = malloc(sizeof(float) * d * n);
	assert_non_null(vals);
	assert_non_null(states);
	for (uint32_t i = 0; i < n * d; i++) {
		vals[i] = (float)i / 7.0f;
		states[i] = -(float)i / 11.0f;
	}
}

static const float *val(uint32_t i)
{
	return vals + (size_t)i * dim;
}

static const float *st(uint32_t i)
{
	return states + (size_t)i * dim;
}

/* The rows for one shard as the node encodes them: by reference when g,
 * copied otherwise; a barrier after each half and one row copied among
 * the referenced ones (as the node's dense rows are); a frame that fills
 * up (-E2BIG) is closed and the rows go on in the next. The frames. */
static int encode(struct esd_buf *b, struct esd_gather *g)
{
	struct esd_rows_enc e;
	struct esd_rows r = {.iteration = 3, .sequence = 1, .worker = 1,
	                     .kind = ESD_XFER_EVICT_PUSH, .dim = dim, .state_dim = dim};
	int frames = 0;
	for (uint32_t half = 0; half < 2; half++) {
		assert_int_equal(esd_enc_rows_begin(&e, b, ESD_OP_PUSH_VALUE, &r), 0);
		for (uint32_t i = half * nrows / 2; i < (half + 1) * nrows / 2; i++) {
			bool ref = g && i != 5;
			int rc = ref ? esd_enc_row_ref(&e, g, i, 7, val(i), st(i))
			             : esd_enc_row(&e, i, 7, val(i), st(i));
			if (rc == -E2BIG) {
				esd_enc_rows_end(&e);
				frames++;
				assert_int_equal(esd_enc_rows_begin(&e, b, ESD_OP_PUSH_VALUE, &r), 0);
				rc = ref ? esd_enc_row_ref(&e, g, i, 7, val(i), st(i))
				         : esd_enc_row(&e, i, 7, val(i), st(i));
			}
			assert_int_equal(rc, 0);
		}
		esd_enc_rows_end(&e);
		frames++;
		struct esd_barrier br = {.iteration = 3, .worker = 1, .npushes = (uint32_t)frames};
		assert_int_equal(esd_enc_barrier(b, &br), 0);
	}
	return frames;
}

/* The pieces' bytes in one buffer. */
static void flatten(const struct iovec *iov, int n, struct esd_buf *out)
{
	for (int i = 0; i < n; i++) {
		assert_int_equal(esd_buf_reserve(out, iov[i].iov_len), 0);
		memcpy(out->data + out->len, iov[i].iov_base, iov[i].iov_len);
		out->len += iov[i].iov_len;
	}
}

static void test_ref_rows_equal_copies(void **state)
{
	(void)state;
	struct esd_buf copy, buf, flat;
	struct esd_gather g;
	void *iov;
	int n;
	esd_buf_init(&copy);
	esd_buf_init(&buf);
	esd_buf_init(&flat);
	esd_gather_init(&g);
	fill_rows(1, 2 * ESD_PROTO_DEFAULT_MAX_ROWS + 2000); /* the row count fills frames */
	assert_int_equal(encode(&copy, NULL), 4);
	assert_int_equal(encode(&buf, &g), 4);
	assert_true(buf.len < copy.len); /* the floats stayed out of buf */
	assert_int_equal(esd_gather_iov(&g, &buf, &iov, &n), 0);
	assert_true(n > (int)nrows);
	flatten(iov, n, &flat);
	assert_int_equal(flat.len, copy.len);
	assert_memory_equal(flat.data, copy.data, copy.len);
	/* reset: the next batch starts clean */
	esd_buf_reset(&buf);
	esd_gather_reset(&g);
	assert_int_equal(encode(&buf, &g), 4);
	esd_buf_reset(&flat);
	assert_int_equal(esd_gather_iov(&g, &buf, &iov, &n), 0);
	flatten(iov, n, &flat);
	assert_memory_equal(flat.data, copy.data, copy.len);
	esd_gather_free(&g);
	esd_buf_free(&copy);
	esd_buf_free(&buf);
	esd_buf_free(&flat);
}

static void test_memory_table(void **state)
{
	(void)state;
	static uint8_t mem[ESD_TRANSPORT_MAX_REGIONS + 1][4096];
	assert_int_equal(esd_transport_register_memory(NULL, 10), -EINVAL);
	assert_int_equal(esd_transport_register_memory(mem[0], 0), -EINVAL);
	assert_int_equal(esd_transport_register_memory(mem[0], 4096), 0);
	assert_int_equal(esd_transport_register_memory(mem[0] + 100, 10), -EEXIST);
	for (int i = 1; i < ESD_TRANSPORT_MAX_REGIONS; i++)
		assert_int_equal(esd_transport_register_memory(mem[i], 4096), 0);
	assert_int_equal(esd_transport_register_memory(mem[ESD_TRANSPORT_MAX_REGIONS], 4096),
	                 -ENOSPC);
	for (int i = 0; i < ESD_TRANSPORT_MAX_REGIONS; i++)
		assert_int_equal(esd_transport_unregister_memory(mem[i]), 0);
	assert_int_equal(esd_transport_unregister_memory(mem[0]), -ENOENT);
}

/* ---- over a tcp link ----------------------------------------------------- */

struct server {
	struct esd_listener *ls;
	int rows, barriers, bad, rc;
};

/* Take frames until the client closes: rows checked against the table. */
static void *serve(void *arg)
{
	struct server *s = arg;
	struct esd_link *l;
	struct esd_msg m;
	if ((s->rc = esd_listener_accept(s->ls, 5 * ESD_NS_PER_S, &l)))
		return NULL;
	while (!(s->rc = esd_link_recv(l, &m, 5 * ESD_NS_PER_S))) {
		if (m.hdr.op == ESD_OP_BARRIER) {
			s->barriers++;
			continue;
		}
		if (m.hdr.op != ESD_OP_PUSH_VALUE || m.u.rows.dim != dim ||
		    m.u.rows.state_dim != dim) {
			s->bad++;
			continue;
		}
		for (uint32_t i = 0; i < m.u.rows.count; i++) {
			struct esd_row_view rv;
			esd_rows_get(&m.u.rows, i, &rv);
			if (rv.key != (esd_key_t)s->rows || rv.clock != 7 ||
			    memcmp(rv.value, val((uint32_t)s->rows), 4 * dim) ||
			    memcmp(rv.state, st((uint32_t)s->rows), 4 * dim))
				s->bad++;
			s->rows++;
		}
	}
	if (s->rc == -ECONNRESET)
		s->rc = 0;
	esd_link_close(l);
	return NULL;
}

/* A server thread on loopback and a link to it with options o. */
static void connect_to_server(struct esd_link_opts *o, struct server *s, pthread_t *t,
                              struct esd_link **l)
{
	char addr[64];
	o->addr = "127.0.0.1:0";
	assert_int_equal(esd_listener_open(o, &s->ls), 0);
	esd_listener_addr(s->ls, addr, sizeof(addr));
	assert_int_equal(pthread_create(t, NULL, serve, s), 0);
	o->addr = addr;
	assert_int_equal(esd_link_connect(o, l), 0);
	o->addr = NULL; /* addr is this frame's */
}

/* Send the encoded rows in pieces over a link with options o: the server
 * gets every row, in order, bit for bit. */
static void sendv_over(struct esd_link_opts *o, int want_in_place)
{
	struct server s = {0};
	struct esd_link *l;
	struct esd_buf buf;
	struct esd_gather g;
	pthread_t t;
	void *iov;
	int n;
	esd_buf_init(&buf);
	esd_gather_init(&g);
	fill_rows(64, 700);
	assert_int_equal(encode(&buf, &g), 2);
	connect_to_server(o, &s, &t, &l);
	assert_int_equal(esd_link_zero_copy(l), want_in_place);
	assert_int_equal(esd_gather_iov(&g, &buf, &iov, &n), 0);
	assert_int_equal(esd_link_sendv(l, iov, n), 0);
	struct esd_link_stats ls;
	esd_link_stats(l, &ls);
	assert_int_equal(ls.in_place_bytes, want_in_place ? buf.len + g.ext : 0);
	assert_int_equal(ls.kind[ESD_XFER_EVICT_PUSH].tx_rows, nrows);
	esd_link_close(l);
	pthread_join(t, NULL);
	assert_int_equal(s.rc, 0);
	assert_int_equal(s.rows, (int)nrows);
	assert_int_equal(s.barriers, 2);
	assert_int_equal(s.bad, 0);
	esd_listener_close(s.ls);
	esd_gather_free(&g);
	esd_buf_free(&buf);
}

static void test_sendv_tcp_in_place(void **state)
{
	(void)state;
	struct esd_link_opts o;
	esd_link_opts_init(&o);
	sendv_over(&o, 1);
}

static void test_sendv_reliable_copies(void **state)
{
	(void)state;
	struct esd_link_opts o;
	esd_link_opts_init(&o);
	o.reliable = 1;
	sendv_over(&o, 0);
}

/* Pieces that split a header, or end inside a frame: -EINVAL, named. */
static void test_sendv_refuses_broken_frames(void **state)
{
	(void)state;
	struct server s = {0};
	struct esd_link_opts o;
	struct esd_link *l;
	struct esd_buf b;
	pthread_t t;
	esd_buf_init(&b);
	struct esd_barrier br = {.iteration = 1};
	assert_int_equal(esd_enc_barrier(&b, &br), 0);
	esd_link_opts_init(&o);
	connect_to_server(&o, &s, &t, &l);
	struct iovec split[2] = {{b.data, 8}, {b.data + 8, b.len - 8}};
	assert_int_equal(esd_link_sendv(l, split, 2), -EINVAL);
	assert_non_null(strstr(esd_link_last_error(l), "piece 0"));
	struct iovec short_[1] = {{b.data, b.len - 1}};
	assert_int_equal(esd_link_sendv(l, short_, 1), -EINVAL);
	assert_non_null(strstr(esd_link_last_error(l), "short of a frame"));
	struct iovec whole[2] = {{b.data, ESD_FRAME_HDR_SIZE}, {b.data + ESD_FRAME_HDR_SIZE,
	                                                        b.len - ESD_FRAME_HDR_SIZE}};
	assert_int_equal(esd_link_sendv(l, whole, 2), 0); /* the link is still good */
	esd_link_close(l);
	pthread_join(t, NULL);
	assert_int_equal(s.rc, 0);
	assert_int_equal(s.barriers, 1);
	esd_listener_close(s.ls);
	esd_buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_ref_rows_equal_copies),
	    cmocka_unit_test(test_memory_table),
	    cmocka_unit_test(test_sendv_tcp_in_place),
	    cmocka_unit_test(test_sendv_reliable_copies),
	    cmocka_unit_test(test_sendv_refuses_broken_frames),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	free(vals);
	free(states);
	return rc;
}
