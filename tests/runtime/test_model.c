/* Reference model: gradients against finite differences (sign and scale,
 * global-batch normalisation, shared rows), split invariance, bit
 * determinism, and training a tiny separable problem. */
#include "testutil.h"

#include <errno.h>
#include <esd/model.h>
#include <esd/optim.h>
#include <math.h>
#include <string.h>

enum { T = 2, DIM = 3, D = 2, H = 4, M = 3, K = 5 };

struct fixture {
	struct esd_model *m;
	float *params;
	size_t np;
	float rows[3][DIM]; /* sample i table t uses rows[idx[i][t]] */
	const float *rowp[M * T];
	float labels[M];
	float dense[M * D];
};

static const int idx[M][T] = {{0, 1}, {2, 1}, {0, 2}}; /* row 0 in samples 0, 2; row 1 in 0, 1 */

static void fixture_init(struct fixture *f, uint64_t seed)
{
	struct esd_model_shape s = {.tables = T, .dim = DIM, .dense = D, .hidden = H};
	assert_int_equal(esd_model_create(&s, &f->m), 0);
	f->np = esd_model_dense_len(f->m);
	assert_int_equal(f->np, (size_t)H * (T * DIM + D) + 2 * H + 1 + D);
	f->params = calloc(f->np, sizeof(float));
	esd_model_dense_init(f->m, seed, f->params);
	/* non-zero biases and wide weights so their gradients are exercised */
	for (size_t i = (size_t)H * (T * DIM + D); i < f->np; i++)
		f->params[i] += 0.1f * (float)((i % 5) + 1) - 0.25f;
	for (int r = 0; r < 3; r++)
		esd_uniform_fill(seed, 100 + (uint64_t)r, 0, 1.0f, DIM, f->rows[r]);
	for (int i = 0; i < M; i++)
		for (int t = 0; t < T; t++)
			f->rowp[i * T + t] = f->rows[idx[i][t]];
	f->labels[0] = 1;
	f->labels[1] = 0;
	f->labels[2] = 1;
	esd_uniform_fill(seed, 200, 0, 1.0f, M * D, f->dense);
}

static void fixture_fini(struct fixture *f)
{
	esd_model_free(f->m);
	free(f->params);
}

static double loss_of(struct fixture *f)
{
	struct esd_model_batch b = {
	    .m = M, .rows = f->rowp, .labels = f->labels, .dense = f->dense};
	double l;
	assert_int_equal(esd_model_step(f->m, f->params, &b, K, &l, NULL, NULL), 0);
	return l;
}

static void check_close(double analytic, double numeric, const char *what, size_t i)
{
	double tol = 2e-3 * fmax(fabs(analytic), fabs(numeric)) + 2e-5;
	if (fabs(analytic - numeric) > tol)
		fail_msg("%s[%zu]: analytic %.8g, finite difference %.8g", what, i, analytic,
		         numeric);
}

static void test_gradcheck(void **state)
{
	(void)state;
	struct fixture f;
	fixture_init(&f, 3);
	double rg[3][DIM] = {{0}};
	double *rgp[M * T];
	for (int i = 0; i < M; i++)
		for (int t = 0; t < T; t++)
			rgp[i * T + t] = rg[idx[i][t]];
	double *dg = calloc(f.np, sizeof(double));
	struct esd_model_batch b = {
	    .m = M, .rows = f.rowp, .row_grads = rgp, .labels = f.labels, .dense = f.dense};
	double loss;
	float logits[M];
	assert_int_equal(esd_model_step(f.m, f.params, &b, K, &loss, dg, logits), 0);
	/* the loss is the per-sample mean over the GLOBAL batch k, not m */
	double want = 0;
	for (int i = 0; i < M; i++)
		want += esd_model_logloss(logits[i], f.labels[i]);
	assert_float_equal(loss, want / K, 1e-12);

	/* no hidden unit near its ReLU kink, or finite differences lie */
	const float h = 1e-3f;
	for (size_t p = 0; p < f.np; p++) {
		float keep = f.params[p];
		f.params[p] = keep + h;
		double lp = loss_of(&f);
		f.params[p] = keep - h;
		double lm = loss_of(&f);
		f.params[p] = keep;
		check_close(dg[p], (lp - lm) / (2.0 * ((double)(keep + h) - (double)keep)), "dense",
		            p);
	}
	/* rows 0 and 1 appear in two samples each: gradients accumulate */
	for (int r = 0; r < 3; r++)
		for (int c = 0; c < DIM; c++) {
			float keep = f.rows[r][c];
			f.rows[r][c] = keep + h;
			double lp = loss_of(&f);
			f.rows[r][c] = keep - h;
			double lm = loss_of(&f);
			f.rows[r][c] = keep;
			check_close(rg[r][c], (lp - lm) / (2.0 * h), "row", (size_t)(r * DIM + c));
		}
	free(dg);
	fixture_fini(&f);
}

/* One unit, by hand: z = v * relu(w * r), y = 1, k = 2:
 * dL/dr = (sigmoid(z) - 1) / 2 * v * w; the step goes down the loss. */
static void test_sign_and_scale_by_hand(void **state)
{
	(void)state;
	struct esd_model_shape s = {.tables = 1, .dim = 1, .dense = 0, .hidden = 1};
	struct esd_model *m;
	assert_int_equal(esd_model_create(&s, &m), 0);
	assert_int_equal(esd_model_dense_len(m), 4); /* W1, b1, w2, b2 */
	float params[4] = {0.5f, 0.0f, 2.0f, 0.0f};
	float row[1] = {1.0f};
	double g[1] = {0}, dg[4] = {0};
	const float *rp[1] = {row};
	double *gp[1] = {g};
	float y[1] = {1.0f};
	struct esd_model_batch b = {.m = 1, .rows = rp, .row_grads = gp, .labels = y};
	double loss;
	assert_int_equal(esd_model_step(m, params, &b, 2, &loss, dg, NULL), 0);
	double z = 2.0 * 0.5, dz = (1.0 / (1.0 + exp(-z)) - 1.0) / 2.0;
	assert_float_equal(loss, log1p(exp(-z)) / 2.0, 1e-7);
	assert_float_equal(g[0], dz * 2.0 * 0.5, 1e-7);
	assert_true(g[0] < 0); /* raising r raises z and lowers the loss for y = 1 */
	assert_float_equal(dg[0], dz * 2.0 * 1.0, 1e-7); /* dW1 = dz * w2 * r */
	assert_float_equal(dg[1], dz * 2.0, 1e-7);       /* db1 */
	assert_float_equal(dg[2], dz * 0.5, 1e-7);       /* dw2 = dz * h */
	assert_float_equal(dg[3], dz, 1e-7);             /* db2 */
	/* a dead unit (w r < 0) passes no gradient to the row or W1 */
	params[0] = -0.5f;
	g[0] = 0;
	memset(dg, 0, sizeof(dg));
	assert_int_equal(esd_model_step(m, params, &b, 2, &loss, dg, NULL), 0);
	assert_true(g[0] == 0.0f && dg[0] == 0.0f && dg[1] == 0.0f && dg[2] == 0.0f);
	assert_float_equal(dg[3], (0.5 - 1.0) / 2.0, 1e-7);
	esd_model_free(m);
}

/* Splitting the global batch into micro-batches and summing their
 * gradients gives the same gradient within rounding; the same call twice
 * gives the same bits. */
static void test_split_and_determinism(void **state)
{
	(void)state;
	struct fixture f;
	fixture_init(&f, 11);
	double *all = calloc(f.np, sizeof(double)), *part = calloc(f.np, sizeof(double));
	double *again = calloc(f.np, sizeof(double));
	double rg_all[3][DIM] = {{0}}, rg_a[3][DIM] = {{0}}, rg_b[3][DIM] = {{0}};
	double rg_again[3][DIM] = {{0}};
	double *pa[M * T], *pb[M * T], *pall[M * T], *pagain[M * T];
	for (int i = 0; i < M; i++)
		for (int t = 0; t < T; t++) {
			pall[i * T + t] = rg_all[idx[i][t]];
			pagain[i * T + t] = rg_again[idx[i][t]];
			pa[i * T + t] = rg_a[idx[i][t]];
			pb[i * T + t] = rg_b[idx[i][t]];
		}
	struct esd_model_batch b = {
	    .m = M, .rows = f.rowp, .row_grads = pall, .labels = f.labels, .dense = f.dense};
	double l_all, l_again, l0, l1;
	assert_int_equal(esd_model_step(f.m, f.params, &b, K, &l_all, all, NULL), 0);
	b.row_grads = pagain;
	assert_int_equal(esd_model_step(f.m, f.params, &b, K, &l_again, again, NULL), 0);
	assert_memory_equal(all, again, f.np * sizeof(double));
	assert_memory_equal(rg_all, rg_again, sizeof(rg_all));
	assert_true(l_all == l_again);

	/* worker 0: sample 0; worker 1: samples 1, 2; each into its own
	 * buffers, then summed in rank order as the PS does */
	double *part1 = calloc(f.np, sizeof(double));
	struct esd_model_batch b0 = {
	    .m = 1, .rows = f.rowp, .row_grads = pa, .labels = f.labels, .dense = f.dense};
	struct esd_model_batch b1 = {.m = 2,
	                             .rows = f.rowp + T,
	                             .row_grads = pb + T,
	                             .labels = f.labels + 1,
	                             .dense = f.dense + D};
	assert_int_equal(esd_model_step(f.m, f.params, &b0, K, &l0, part, NULL), 0);
	assert_int_equal(esd_model_step(f.m, f.params, &b1, K, &l1, part1, NULL), 0);
	esd_optim_grad_add((unsigned)f.np, part, part1);
	for (size_t p = 0; p < f.np; p++)
		assert_float_equal(part[p], all[p], 1e-14 * fabs(all[p]) + 1e-18);
	for (int r = 0; r < 3; r++) {
		esd_optim_grad_add(DIM, rg_a[r], rg_b[r]);
		for (int c = 0; c < DIM; c++)
			assert_float_equal(rg_a[r][c], rg_all[r][c],
			                   1e-14 * fabs(rg_all[r][c]) + 1e-18);
	}
	assert_float_equal(l0 + l1, l_all, 1e-12);
	free(all);
	free(part);
	free(part1);
	free(again);
	fixture_fini(&f);
}

/* Per-table dims: table t reads and writes only the first dims[t] floats
 * of its rows; the model's input is the dims summed; dims of 0 or above
 * dim are refused. */
static void test_table_dims(void **state)
{
	(void)state;
	const uint32_t dims[2] = {2, 4}, bad[2] = {2, 5}, zero[2] = {0, 4};
	struct esd_model *m;
	struct esd_model_shape s = {.tables = 2, .dim = 4, .dense = 1, .hidden = 3, .dims = bad};
	assert_int_equal(esd_model_create(&s, &m), -EINVAL);
	s.dims = zero;
	assert_int_equal(esd_model_create(&s, &m), -EINVAL);
	s.dims = dims;
	assert_int_equal(esd_model_create(&s, &m), 0);
	assert_int_equal(esd_model_dense_len(m), 3 * (2 + 4 + 1) + 3 + 3 + 1 + 1);
	float params[64];
	esd_model_dense_init(m, 5, params);
	float r0[4] = {0.5f, -0.25f, 0, 0}, r1[4] = {0.1f, 0.2f, -0.3f, 0.4f}, label = 1, d = 0.7f;
	const float *rows[2] = {r0, r1};
	double g0[4] = {0}, g1[4] = {0};
	double *grads[2] = {g0, g1};
	struct esd_model_batch b = {.m = 1, .rows = rows, .row_grads = grads, .labels = &label,
				    .dense = &d};
	double loss;
	assert_int_equal(esd_model_step(m, params, &b, 1, &loss, NULL, NULL), 0);
	assert_true(g0[2] == 0.0 && g0[3] == 0.0); /* table 0's padding gets no gradient */
	assert_true(g0[0] != 0.0 || g0[1] != 0.0 || g1[0] != 0.0);
	/* the padding is not read: a non-zero tail changes nothing */
	r0[3] = 100.0f;
	double loss2;
	memset(g1, 0, sizeof(g1));
	assert_int_equal(esd_model_step(m, params, &b, 1, &loss2, NULL, NULL), 0);
	assert_true(loss2 == loss);
	esd_model_free(m);
}

static void test_errors(void **state)
{
	(void)state;
	struct esd_model *m;
	struct esd_model_shape s = {.tables = 0, .dim = 4};
	assert_int_equal(esd_model_create(&s, &m), -EINVAL);
	s.tables = 1;
	s.dim = 0;
	assert_int_equal(esd_model_create(&s, &m), -EINVAL);
	s.dim = ESD_MODEL_MAX_DIM + 1;
	assert_int_equal(esd_model_create(&s, &m), -EINVAL);
	assert_int_equal(esd_model_create(NULL, &m), -EINVAL);
	s.dim = 2;
	s.dense = 1;
	assert_int_equal(esd_model_create(&s, &m), 0);
	assert_int_equal(esd_model_shape(m)->hidden, ESD_MODEL_DEFAULT_HIDDEN);
	assert_int_equal(esd_model_dense_len(m), 16 * 3 + 16 + 16 + 1 + 1);
	float params[128] = {0}, row[2] = {0}, y[2] = {0}, dense[2] = {0};
	const float *rp[2] = {row, row};
	struct esd_model_batch b = {.m = 2, .rows = rp, .labels = y, .dense = dense};
	assert_int_equal(esd_model_step(m, params, &b, 1, NULL, NULL, NULL), -EINVAL); /* k < m */
	assert_int_equal(esd_model_step(m, params, &b, 0, NULL, NULL, NULL), -EINVAL);
	assert_int_equal(esd_model_step(m, NULL, &b, 2, NULL, NULL, NULL), -EINVAL);
	b.dense = NULL;
	assert_int_equal(esd_model_step(m, params, &b, 2, NULL, NULL, NULL), -EINVAL);
	b.dense = dense;
	rp[1] = NULL;
	assert_int_equal(esd_model_step(m, params, &b, 2, NULL, NULL, NULL), -EINVAL);
	rp[1] = row;
	double l;
	assert_int_equal(esd_model_step(m, params, &b, 2, &l, NULL, NULL), 0);
	assert_float_equal(l, log(2.0), 1e-7); /* all-zero model: p = 1/2 */
	esd_model_free(m);
	esd_model_free(NULL);
}

/* A tiny separable problem: 2 tables of 8 IDs, label = (ID of table 0 <
 * 4) xor (dense feature > 0). Full-batch training with each optimizer
 * must drive the loss well below its start. */
static void test_training_decreases_loss(void **state)
{
	(void)state;
	enum { TT = 2, NID = 8, DD = 4, NS = 64 };
	struct esd_model_shape s = {.tables = TT, .dim = DD, .dense = 1, .hidden = 16};
	struct esd_model *m;
	assert_int_equal(esd_model_create(&s, &m), 0);
	size_t np = esd_model_dense_len(m);
	uint64_t rng = 5;
	int ids[NS][TT];
	float labels[NS], dense[NS];
	for (int i = 0; i < NS; i++) {
		for (int t = 0; t < TT; t++)
			ids[i][t] = (int)(esd_test_rand(&rng) % NID);
		dense[i] = (float)((int)(esd_test_rand(&rng) % 200) - 100) / 100.0f;
		labels[i] = (float)((ids[i][0] < 4) ^ (dense[i] > 0));
	}
	for (int o = 0; o < 3; o++) {
		struct esd_optim_params p;
		esd_optim_params_default(&p, (enum esd_optimizer)o);
		p.lr = o == ESD_OPT_SGD ? 1.0f : o == ESD_OPT_ADAGRAD ? 0.1f : 0.02f;
		unsigned sf = esd_optimizer_state_floats(p.opt);
		float rows[TT][NID][DD], rstate[TT][NID][2 * DD];
		double rgrad[TT][NID][DD];
		uint64_t clock[TT][NID] = {{0}};
		float *params = calloc(np, sizeof(float)), *pstate = calloc(np * 2, sizeof(float));
		double *pgrad = calloc(np, sizeof(double));
		esd_model_dense_init(m, 1, params);
		esd_optim_state_init(&p, (unsigned)np, pstate);
		for (int t = 0; t < TT; t++)
			for (int r = 0; r < NID; r++) {
				esd_row_init(1, esd_key_make((uint32_t)t, (uint64_t)r), DD,
				             rows[t][r]);
				esd_optim_state_init(&p, DD, rstate[t][r]);
			}
		const float *rp[NS * TT];
		double *gp[NS * TT];
		for (int i = 0; i < NS; i++)
			for (int t = 0; t < TT; t++) {
				rp[i * TT + t] = rows[t][ids[i][t]];
				gp[i * TT + t] = rgrad[t][ids[i][t]];
			}
		struct esd_model_batch b = {
		    .m = NS, .rows = rp, .row_grads = gp, .labels = labels, .dense = dense};
		double first = 0, loss = 0;
		for (int it = 0; it < 300; it++) {
			memset(rgrad, 0, sizeof(rgrad));
			memset(pgrad, 0, np * sizeof(double));
			assert_int_equal(esd_model_step(m, params, &b, NS, &loss, pgrad, NULL), 0);
			if (!it)
				first = loss;
			for (int t = 0; t < TT; t++)
				for (int r = 0; r < NID; r++)
					esd_optim_apply_sum(&p, DD, rows[t][r],
					                    sf ? rstate[t][r] : NULL, rgrad[t][r],
					                    ++clock[t][r]);
			esd_optim_apply_sum(&p, (unsigned)np, params, sf ? pstate : NULL, pgrad,
			                    (uint64_t)it + 1);
		}
		print_message("%s: loss %.4f -> %.4f\n", esd_optim_name(p.opt), first, loss);
		assert_true(first > 0.6);
		assert_true(loss < 0.5 * first);
		free(params);
		free(pstate);
		free(pgrad);
	}
	esd_model_free(m);
}

/* Bags: sum pooling equals a single-ID batch of the pooled rows; every
 * member of a bag gets its feature's gradient (twice when it is in the
 * bag twice); an empty bag is zeros; the identity offsets are today's. */
static void test_bags(void **state)
{
	(void)state;
	struct fixture f;
	fixture_init(&f, 11);
	const float *r0 = f.rows[0], *r1 = f.rows[1], *r2 = f.rows[2];
	/* sample 0: {r0, r1}, {r2}; sample 1: {}, {r1, r1} */
	const float *bag_rows[] = {r0, r1, r2, r1, r1};
	const uint32_t bag_off[] = {0, 2, 3, 3, 5};
	float pooled[4][DIM];
	for (int c = 0; c < DIM; c++) {
		pooled[0][c] = 0.0f + r0[c] + r1[c];
		pooled[1][c] = r2[c];
		pooled[2][c] = 0.0f;
		pooled[3][c] = 0.0f + r1[c] + r1[c];
	}
	const float *prow[] = {pooled[0], pooled[1], pooled[2], pooled[3]};
	double pg[4][DIM] = {{0}}, bg[3][DIM] = {{0}};
	double *pgp[] = {pg[0], pg[1], pg[2], pg[3]};
	double *bgp[] = {bg[0], bg[1], bg[2], bg[1], bg[1]};
	float zp[2], zb[2];
	double lp, lb;
	struct esd_model_batch p = {.m = 2, .rows = prow, .row_grads = pgp, .labels = f.labels,
	                            .dense = f.dense};
	struct esd_model_batch b = p;
	b.rows = bag_rows;
	b.row_grads = bgp;
	b.bag_off = bag_off;
	assert_int_equal(esd_model_step(f.m, f.params, &p, K, &lp, NULL, zp), 0);
	assert_int_equal(esd_model_step(f.m, f.params, &b, K, &lb, NULL, zb), 0);
	assert_true(lp == lb && zp[0] == zb[0] && zp[1] == zb[1]);
	for (int c = 0; c < DIM; c++) {
		assert_true(bg[0][c] == pg[0][c]);
		assert_true(bg[2][c] == pg[1][c]);
		assert_true(fabs(bg[1][c] - (pg[0][c] + 2 * pg[3][c])) < 1e-12);
	}
	/* bags of one: bit for bit the batch without offsets */
	const uint32_t ident[] = {0, 1, 2, 3, 4, 5, 6};
	double la, li;
	float za[M], zi[M];
	struct esd_model_batch a = {.m = M, .rows = f.rowp, .labels = f.labels, .dense = f.dense};
	struct esd_model_batch i1 = a;
	i1.bag_off = ident;
	assert_int_equal(esd_model_step(f.m, f.params, &a, K, &la, NULL, za), 0);
	assert_int_equal(esd_model_step(f.m, f.params, &i1, K, &li, NULL, zi), 0);
	assert_true(la == li && memcmp(za, zi, sizeof(za)) == 0);
	/* offsets that go backwards, or do not start at 0 */
	const uint32_t back[] = {0, 2, 1, 3, 5}, late[] = {1, 2, 3, 3, 5};
	b.bag_off = back;
	assert_int_equal(esd_model_step(f.m, f.params, &b, K, NULL, NULL, NULL), -EINVAL);
	b.bag_off = late;
	assert_int_equal(esd_model_step(f.m, f.params, &b, K, NULL, NULL, NULL), -EINVAL);
	fixture_fini(&f);
}

/* Weighted bags: the input is sum(w * row), each member's gradient w
 * times its feature's; weights all 1 are the unweighted batch bit for bit. */
static void test_weighted_bags(void **state)
{
	(void)state;
	struct fixture f;
	fixture_init(&f, 13);
	const float *r0 = f.rows[0], *r1 = f.rows[1], *r2 = f.rows[2];
	/* sample 0: {0.5 r0, 2 r1}, {-1 r2}; sample 1: {}, {0.25 r1, 3 r1} */
	const float *bag_rows[] = {r0, r1, r2, r1, r1};
	const float w[] = {0.5f, 2.0f, -1.0f, 0.25f, 3.0f}, ones[] = {1, 1, 1, 1, 1};
	const uint32_t bag_off[] = {0, 2, 3, 3, 5};
	float pooled[4][DIM];
	for (int c = 0; c < DIM; c++) {
		pooled[0][c] = 0.0f + 0.5f * r0[c] + 2.0f * r1[c];
		pooled[1][c] = 0.0f + -1.0f * r2[c];
		pooled[2][c] = 0.0f;
		pooled[3][c] = 0.0f + 0.25f * r1[c] + 3.0f * r1[c];
	}
	const float *prow[] = {pooled[0], pooled[1], pooled[2], pooled[3]};
	double pg[4][DIM] = {{0}}, bg[3][DIM] = {{0}}, ug[3][DIM] = {{0}}, og[3][DIM] = {{0}};
	double *pgp[] = {pg[0], pg[1], pg[2], pg[3]};
	double *bgp[] = {bg[0], bg[1], bg[2], bg[1], bg[1]};
	float zp[2], zb[2], zu[2], zo[2];
	double lp, lb, lu, lo;
	struct esd_model_batch p = {.m = 2, .rows = prow, .row_grads = pgp, .labels = f.labels,
	                            .dense = f.dense};
	struct esd_model_batch b = p;
	b.rows = bag_rows;
	b.row_grads = bgp;
	b.bag_off = bag_off;
	b.weights = w;
	assert_int_equal(esd_model_step(f.m, f.params, &p, K, &lp, NULL, zp), 0);
	assert_int_equal(esd_model_step(f.m, f.params, &b, K, &lb, NULL, zb), 0);
	assert_true(lp == lb && zp[0] == zb[0] && zp[1] == zb[1]);
	for (int c = 0; c < DIM; c++) {
		assert_true(bg[0][c] == (double)(0.5f * (float)pg[0][c]));
		assert_true(bg[2][c] == (double)(-1.0f * (float)pg[1][c]));
		double want = (double)(2.0f * (float)pg[0][c]) + (double)(0.25f * (float)pg[3][c]) +
		              (double)(3.0f * (float)pg[3][c]);
		assert_true(fabs(bg[1][c] - want) < 1e-12);
	}
	/* weights all 1: the unweighted batch, bit for bit */
	double *ugp[] = {ug[0], ug[1], ug[2], ug[1], ug[1]};
	double *ogp[] = {og[0], og[1], og[2], og[1], og[1]};
	struct esd_model_batch u = b, o = b;
	u.weights = NULL;
	u.row_grads = ugp;
	o.weights = ones;
	o.row_grads = ogp;
	assert_int_equal(esd_model_step(f.m, f.params, &u, K, &lu, NULL, zu), 0);
	assert_int_equal(esd_model_step(f.m, f.params, &o, K, &lo, NULL, zo), 0);
	assert_true(lu == lo && memcmp(zu, zo, sizeof(zu)) == 0 &&
	            memcmp(ug, og, sizeof(ug)) == 0);
	fixture_fini(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_gradcheck),
	    cmocka_unit_test(test_sign_and_scale_by_hand),
	    cmocka_unit_test(test_split_and_determinism),
	    cmocka_unit_test(test_errors),
	    cmocka_unit_test(test_table_dims),
	    cmocka_unit_test(test_bags),
	    cmocka_unit_test(test_weighted_bags),
	    cmocka_unit_test(test_training_decreases_loss),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
