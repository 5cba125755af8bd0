/* Row optimizers: values by hand for SGD, Adagrad, Adam; bit determinism
 * (vectorised vs one element at a time); row initialisation reproducible. */
#include "testutil.h"

#include <errno.h>
#include <esd/optim.h>
#include <math.h>
#include <string.h>

static void test_params(void **state)
{
	(void)state;
	struct esd_optim_params p;
	enum esd_optimizer o;
	for (int i = 0; i < 3; i++) {
		assert_int_equal(esd_optim_params_default(&p, (enum esd_optimizer)i), 0);
		assert_int_equal(esd_optim_params_check(&p), 0);
		assert_int_equal(esd_optim_parse(esd_optim_name(p.opt), &o), 0);
		assert_int_equal(o, i);
	}
	assert_int_equal(esd_optim_params_default(&p, (enum esd_optimizer)7), -EINVAL);
	assert_int_equal(esd_optim_params_check(&p), -EINVAL);
	assert_int_equal(esd_optim_params_check(NULL), -EINVAL);
	assert_int_equal(esd_optim_parse("ADAM", &o), 0);
	assert_int_equal(o, ESD_OPT_ADAM);
	assert_int_equal(esd_optim_parse("rmsprop", &o), -EINVAL);
	assert_string_equal(esd_optim_name((enum esd_optimizer)9), "unknown");

	esd_optim_params_default(&p, ESD_OPT_ADAM);
	p.beta1 = 1.0f;
	assert_int_equal(esd_optim_params_check(&p), -EINVAL);
	p.beta1 = NAN;
	assert_int_equal(esd_optim_params_check(&p), -EINVAL);
	esd_optim_params_default(&p, ESD_OPT_SGD);
	p.lr = 0;
	assert_int_equal(esd_optim_params_check(&p), -EINVAL);
	p.lr = INFINITY;
	assert_int_equal(esd_optim_params_check(&p), -EINVAL);
	esd_optim_params_default(&p, ESD_OPT_ADAGRAD);
	p.initial_accumulator = -1;
	assert_int_equal(esd_optim_params_check(&p), -EINVAL);
}

static void test_sgd_by_hand(void **state)
{
	(void)state;
	struct esd_optim_params p;
	esd_optim_params_default(&p, ESD_OPT_SGD);
	p.lr = 0.1f;
	float v[2] = {1.0f, -2.0f}, g[2] = {0.5f, -1.0f};
	esd_optim_apply(&p, 2, v, NULL, g, 1);
	assert_float_equal(v[0], 0.95f, 1e-7);
	assert_float_equal(v[1], -1.9f, 1e-7);
}

static void test_adagrad_by_hand(void **state)
{
	(void)state;
	struct esd_optim_params p;
	esd_optim_params_default(&p, ESD_OPT_ADAGRAD);
	p.lr = 0.1f;
	p.eps = 0.0f;
	p.initial_accumulator = 0.0f;
	float v[1] = {1.0f}, acc[1], g[1] = {2.0f};
	esd_optim_state_init(&p, 1, acc);
	assert_true(acc[0] == 0.0f);
	/* acc = 4, v = 1 - 0.1 * 2 / 2 = 0.9 */
	esd_optim_apply(&p, 1, v, acc, g, 1);
	assert_float_equal(acc[0], 4.0f, 0);
	assert_float_equal(v[0], 0.9f, 1e-7);
	/* acc = 8, v = 0.9 - 0.2 / sqrt(8) = 0.82928932 */
	esd_optim_apply(&p, 1, v, acc, g, 2);
	assert_float_equal(acc[0], 8.0f, 0);
	assert_float_equal(v[0], 0.82928932f, 1e-6);

	/* initial accumulator 0.1 (TensorFlow's default), eps 1e-10 */
	p.initial_accumulator = 0.1f;
	p.eps = 1e-10f;
	v[0] = 0.0f;
	g[0] = -0.3f;
	esd_optim_state_init(&p, 1, acc);
	assert_float_equal(acc[0], 0.1f, 0);
	esd_optim_apply(&p, 1, v, acc, g, 1);
	/* acc = 0.19, v = 0.03 / sqrt(0.19) = 0.068824720 */
	assert_float_equal(acc[0], 0.19f, 1e-7);
	assert_float_equal(v[0], 0.068824720f, 1e-6);
}

static void test_adam_by_hand(void **state)
{
	(void)state;
	struct esd_optim_params p;
	esd_optim_params_default(&p, ESD_OPT_ADAM); /* lr 1e-3, 0.9, 0.999, 1e-8 */
	float v[1] = {1.0f}, s[2], g[1] = {0.5f};
	esd_optim_state_init(&p, 1, s);
	assert_true(s[0] == 0.0f && s[1] == 0.0f);
	/* t=1: m = 0.05, v = 0.00025, step = 1e-3/0.1 = 0.01,
	 * sqrt(v)/sqrt(1-0.999) = 0.5 -> value -= 0.01 * 0.05 / 0.5 = 0.001 */
	esd_optim_apply(&p, 1, v, s, g, 1);
	assert_float_equal(s[0], 0.05f, 1e-7);
	assert_float_equal(s[1], 0.00025f, 1e-8);
	assert_float_equal(v[0], 0.999f, 1e-6);
	/* t=2, g = -1: m = 0.045 - 0.1 = -0.055, v = 0.00024975 + 0.001 = 0.00124975,
	 * step = 1e-3 / 0.19, bc2 = sqrt(0.001999),
	 * delta = step * m / (sqrt(v)/bc2 + eps)
	 *       = 0.0052631579 * -0.055 / (0.035351096 / 0.044710178) = -0.00036611 */
	g[0] = -1.0f;
	esd_optim_apply(&p, 1, v, s, g, 2);
	assert_float_equal(s[0], -0.055f, 1e-7);
	assert_float_equal(s[1], 0.00124975f, 5e-8);
	double delta = (1e-3 / 0.19) * -0.055 / (sqrt(0.00124975) / sqrt(0.001999) + 1e-8);
	assert_float_equal(v[0], 0.999 - delta, 1e-6);
	/* t == 0 is treated as t == 1 */
	float a[1] = {1.0f}, sa[2] = {0, 0}, b[1] = {1.0f}, sb[2] = {0, 0};
	g[0] = 0.25f;
	esd_optim_apply(&p, 1, a, sa, g, 0);
	esd_optim_apply(&p, 1, b, sb, g, 1);
	assert_memory_equal(a, b, sizeof(a));
	assert_memory_equal(sa, sb, sizeof(sa));
}

/* A row updated as a whole (the loop may be vectorised) equals the same
 * row updated one element at a time (scalar path), bit for bit, over many
 * steps and every optimizer; and two identical runs are identical. */
static void test_bit_determinism(void **state)
{
	(void)state;
	enum { DIM = 37, STEPS = 50 };
	uint64_t rng = 42;
	for (int o = 0; o < 3; o++) {
		struct esd_optim_params p;
		esd_optim_params_default(&p, (enum esd_optimizer)o);
		p.initial_accumulator = 0.05f;
		float va[DIM], vb[DIM], sa[2 * DIM], sb[2 * DIM], g[DIM];
		esd_row_init(7, 1234, DIM, va);
		memcpy(vb, va, sizeof(va));
		esd_optim_state_init(&p, DIM, sa);
		esd_optim_state_init(&p, DIM, sb);
		unsigned sf = esd_optimizer_state_floats(p.opt);
		for (uint64_t t = 1; t <= STEPS; t++) {
			for (int i = 0; i < DIM; i++)
				g[i] =
				    (float)((int64_t)(esd_test_rand(&rng) % 2001) - 1000) / 997.0f;
			esd_optim_apply(&p, DIM, va, sa, g, t);
			for (int i = 0; i < DIM; i++) {
				float st[2] = {sb[i], sf == 2 ? sb[DIM + i] : 0.0f};
				esd_optim_apply(&p, 1, &vb[i], st, &g[i], t);
				sb[i] = st[0];
				if (sf == 2)
					sb[DIM + i] = st[1];
			}
		}
		assert_memory_equal(va, vb, sizeof(va));
		assert_memory_equal(sa, sb, sizeof(float) * sf * DIM);
		for (int i = 0; i < DIM; i++)
			assert_true(isfinite(va[i]));
	}
}

static void test_grad_add(void **state)
{
	(void)state;
	double acc[3] = {1, 2, 3}, g[3] = {0.5, -2, 1e-8};
	esd_optim_grad_add(3, acc, g);
	assert_true(acc[0] == 1.5 && acc[1] == 0.0 && acc[2] == 3.00000001);
}

/* apply_sum == round to float, then apply; across the 256-element chunks */
static void test_apply_sum(void **state)
{
	(void)state;
	enum { DIM = 600 };
	uint64_t rng = 3;
	for (int o = 0; o < 3; o++) {
		struct esd_optim_params p;
		esd_optim_params_default(&p, (enum esd_optimizer)o);
		static float va[DIM], vb[DIM], sa[2 * DIM], sb[2 * DIM], gf[DIM];
		static double gd[DIM];
		esd_row_init(1, 2, DIM, va);
		memcpy(vb, va, sizeof(va));
		esd_optim_state_init(&p, DIM, sa);
		esd_optim_state_init(&p, DIM, sb);
		for (uint64_t t = 1; t <= 5; t++) {
			for (int i = 0; i < DIM; i++) {
				gd[i] = ((double)(esd_test_rand(&rng) % 100001) - 50000.0) / 3e6;
				gf[i] = (float)gd[i];
			}
			esd_optim_apply_sum(&p, DIM, va, sa, gd, t);
			esd_optim_apply(&p, DIM, vb, sb, gf, t);
		}
		assert_memory_equal(va, vb, sizeof(va));
		assert_memory_equal(sa, sb, sizeof(float) * esd_optim_state_len(p.opt, DIM));
	}
}

static void test_row_init(void **state)
{
	(void)state;
	enum { DIM = 64 };
	float a[DIM], b[DIM], c[DIM], d[DIM];
	esd_row_init(1, esd_key_make(3, 99), DIM, a);
	esd_row_init(1, esd_key_make(3, 99), DIM, b);
	assert_memory_equal(a, b, sizeof(a));
	esd_row_init(2, esd_key_make(3, 99), DIM, c);
	assert_memory_not_equal(a, c, sizeof(a));
	esd_row_init(1, esd_key_make(4, 99), DIM, d);
	assert_memory_not_equal(a, d, sizeof(a));
	/* within [-a, a), a = 1/sqrt(64) = 0.125; not degenerate */
	double sum = 0;
	int distinct = 0;
	for (int i = 0; i < DIM; i++) {
		assert_true(a[i] >= -0.125f && a[i] < 0.125f);
		sum += a[i];
		distinct += i && a[i] != a[i - 1];
	}
	assert_true(distinct > DIM / 2);
	assert_true(fabs(sum / DIM) < 0.05);
	/* A shorter row is a prefix of the stream (scaled differently), and
	 * the stream is pinned: checkpoints of older runs restore the same
	 * fresh rows. Values of (seed 1, key 0, dim 4). */
	float e[4];
	esd_row_init(1, 0, 4, e);
	float u[4];
	esd_uniform_fill(1, 0, 0, 0.5f, 4, u);
	assert_memory_equal(e, u, sizeof(e));
	const uint32_t pinned[4] = {0x3e462808, 0x3ef18b6c, 0xbd966318, 0x3e9cc734};
	assert_memory_equal(e, pinned, sizeof(e));
	/* a large sample is roughly uniform: mean ~0, variance ~a^2/3 */
	enum { N = 100000 };
	static float big[N];
	esd_uniform_fill(9, 5, 0, 1.0f, N, big);
	double m = 0, m2 = 0;
	for (int i = 0; i < N; i++) {
		assert_true(big[i] >= -1.0f && big[i] < 1.0f);
		m += big[i];
		m2 += (double)big[i] * big[i];
	}
	m /= N;
	m2 /= N;
	assert_true(fabs(m) < 0.01);
	assert_true(fabs(m2 - 1.0 / 3.0) < 0.01);
	/* draws are addressable: starting at 1000 gives the same as the tail */
	float part[10];
	esd_uniform_fill(9, 5, 1000, 1.0f, 10, part);
	assert_memory_equal(part, big + 1000, sizeof(part));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_params),          cmocka_unit_test(test_sgd_by_hand),
	    cmocka_unit_test(test_adagrad_by_hand), cmocka_unit_test(test_adam_by_hand),
	    cmocka_unit_test(test_bit_determinism), cmocka_unit_test(test_grad_add),
	    cmocka_unit_test(test_apply_sum),       cmocka_unit_test(test_row_init),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
