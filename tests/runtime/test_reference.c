/* The single-process reference trainer: deterministic (bit-identical
 * reruns, library and tool), it learns, and an in-process emulation of
 * the distributed iteration (workers' micro-batches, local updates of
 * rows one worker trained, partial sums added in worker-rank order for
 * shared rows) ends within 1e-5 relative of it: the runtime's bar. */
#include "testutil.h"

#include <errno.h>
#include <esd/ckpt.h>
#include <esd/dataset.h>
#include <esd/model.h>
#include <esd/optim.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "reftrain.h"

static char *dir;

static char *path_in(const char *name)
{
	char *p;
	assert_true(asprintf(&p, "%s/%s", dir, name) > 0);
	return p;
}

/* The problem size; -D overrides give a bigger run by hand, e.g.
 * -DTABLES=26 -DROWS=2000 -DDIM=16 -DK=512 -DNW=8. */
#ifndef TABLES
#define TABLES 4
#define DENSE  3
#define ROWS   40
#define DIM    8
#define K      64
#define NW     4
#endif
#define ITERS 50

static void base_config(struct esd_ref_config *cfg, struct esd_ref_gen *gen, enum esd_optimizer opt)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->seed = 17;
	cfg->dim = DIM;
	cfg->hidden = 16;
	cfg->batch = K;
	cfg->iterations = ITERS;
	esd_optim_params_default(&cfg->optim, opt);
	cfg->optim.lr = opt == ESD_OPT_SGD ? 0.5f : opt == ESD_OPT_ADAGRAD ? 0.05f : 0.01f;
	*gen = (struct esd_ref_gen){
	    .seed = 5, .tables = TABLES, .dense = DENSE, .rows = ROWS, .skew = 2.0};
}

static void test_deterministic_and_learns(void **state)
{
	(void)state;
	char *a = path_in("det-a.ckpt"), *b = path_in("det-b.ckpt");
	struct esd_ref_config cfg;
	struct esd_ref_gen gen;
	struct esd_ref_source src;
	struct esd_ref_stats st;
	for (int o = 0; o < 3; o++) {
		base_config(&cfg, &gen, (enum esd_optimizer)o);
		cfg.iterations = 100;
		assert_int_equal(esd_ref_gen_source(&gen, &src), 0);
		assert_int_equal(esd_ref_train(&cfg, &src, a, &st), 0);
		print_message("%s: %llu rows, loss %.4f -> %.4f\n", esd_optim_name(cfg.optim.opt),
		              (unsigned long long)st.rows, st.first_loss, st.last_loss);
		assert_true(st.rows > 0 && st.rows <= TABLES * ROWS);
		assert_true(st.last_loss < 0.8 * st.first_loss);
		assert_int_equal(esd_ref_train(&cfg, &src, b, NULL), 0);
		const char *pa[1] = {a}, *pb[1] = {b};
		const struct esd_ckpt_cmp_opts exact = {
		    .exact = true, .state = true, .clocks = true};
		struct esd_ckpt_cmp_result res;
		assert_int_equal(esd_ckpt_compare(pa, 1, pb, 1, &exact, &res, NULL), 0);
		assert_true(res.equal);

		struct esd_ckpt_reader *r;
		assert_int_equal(esd_ckpt_open(a, &r, NULL), 0);
		const struct esd_ckpt_info *in = esd_ckpt_info(r);
		assert_int_equal(in->meta.iteration, 100);
		assert_int_equal(in->meta.data_cursor, 100 * K);
		assert_int_equal(in->meta.dense_clock, 100);
		assert_int_equal(in->meta.optimizer, o);
		assert_int_equal(in->row_count, st.rows);
		assert_true(in->sorted);
		esd_ckpt_close(r);
	}
	/* another seed gives another model */
	cfg.seed = 18;
	assert_int_equal(esd_ref_train(&cfg, &src, b, NULL), 0);
	const char *pa[1] = {a}, *pb[1] = {b};
	struct esd_ckpt_cmp_result res;
	assert_int_equal(esd_ckpt_compare(pa, 1, pb, 1, NULL, &res, NULL), 0);
	assert_false(res.equal);
	/* errors */
	cfg.batch = 0;
	assert_int_equal(esd_ref_train(&cfg, &src, b, NULL), -EINVAL);
	cfg.batch = K;
	cfg.optim.lr = -1;
	assert_int_equal(esd_ref_train(&cfg, &src, b, NULL), -EINVAL);
	gen.skew = 0.5;
	assert_int_equal(esd_ref_gen_source(&gen, &src), -EINVAL);
	free(a);
	free(b);
}

/* A checkpoint holds the whole training state: resuming from iteration 15
 * and training to 40 gives the bits of training to 40 in one go. */
static void test_resume_is_exact(void **state)
{
	(void)state;
	char *full = path_in("full.ckpt"), *half = path_in("half.ckpt"), *res = path_in("res.ckpt");
	for (int o = 0; o < 3; o++) {
		struct esd_ref_config cfg;
		struct esd_ref_gen gen;
		struct esd_ref_source src;
		base_config(&cfg, &gen, (enum esd_optimizer)o);
		assert_int_equal(esd_ref_gen_source(&gen, &src), 0);
		cfg.iterations = 40;
		assert_int_equal(esd_ref_train(&cfg, &src, full, NULL), 0);
		cfg.iterations = 15;
		assert_int_equal(esd_ref_train(&cfg, &src, half, NULL), 0);
		cfg.iterations = 40;
		cfg.resume = half;
		assert_int_equal(esd_ref_train(&cfg, &src, res, NULL), 0);
		const char *pa[1] = {full}, *pb[1] = {res};
		const struct esd_ckpt_cmp_opts exact = {
		    .exact = true, .state = true, .clocks = true};
		struct esd_ckpt_cmp_result r;
		assert_int_equal(esd_ckpt_compare(pa, 1, pb, 1, &exact, &r, NULL), 0);
		assert_true(r.equal);
		/* a checkpoint of another configuration is refused */
		cfg.seed++;
		assert_int_equal(esd_ref_train(&cfg, &src, res, NULL), -EINVAL);
		cfg.seed--;
		cfg.iterations = 10; /* behind the checkpoint */
		assert_int_equal(esd_ref_train(&cfg, &src, res, NULL), -EINVAL);
	}
	free(full);
	free(half);
	free(res);
}

static int64_t short_source(void *arg, uint64_t cursor, uint32_t k, esd_key_t *keys,
                            uint32_t *bag_off, float *labels, float *dense)
{
	(void)arg;
	(void)bag_off;
	if (cursor >= 3 * (uint64_t)k)
		return 0;
	for (uint32_t i = 0; i < k; i++) {
		keys[i] = esd_key_make(0, (cursor + i) % 7);
		labels[i] = (float)((cursor + i) & 1);
	}
	(void)dense;
	return k;
}

static void test_source_ends(void **state)
{
	(void)state;
	char *p = path_in("short.ckpt");
	struct esd_ref_config cfg;
	struct esd_ref_gen gen;
	base_config(&cfg, &gen, ESD_OPT_SGD);
	struct esd_ref_source src = {.tables = 1, .dense = 0, .next = short_source};
	cfg.iterations = 3;
	assert_int_equal(esd_ref_train(&cfg, &src, p, NULL), 0);
	cfg.iterations = 4;
	assert_int_equal(esd_ref_train(&cfg, &src, p, NULL), -ENODATA);
	free(p);
}

/* A dataset stream as the source: the batches are the file's samples in
 * order, the same as an in-memory source of the same samples; past the
 * end it wraps around to the first sample, mid-batch too, as the node
 * daemons read it. */
enum { NS = 256, ST = 3, SD = 2 };
static esd_key_t mem_keys[NS * ST];
static float mem_labels[NS], mem_dense[NS * SD];

static int64_t mem_source(void *arg, uint64_t cursor, uint32_t k, esd_key_t *keys,
                          uint32_t *bag_off, float *labels, float *dense)
{
	(void)arg;
	(void)bag_off;
	for (uint32_t i = 0; i < k; i++) {
		uint64_t at = (cursor + i) % NS;
		memcpy(keys + (size_t)i * ST, mem_keys + at * ST, sizeof(esd_key_t) * ST);
		labels[i] = mem_labels[at];
		memcpy(dense + (size_t)i * SD, mem_dense + at * SD, sizeof(float) * SD);
	}
	return k;
}

static void test_stream_source(void **state)
{
	(void)state;
	char *ds = path_in("s.esd"), *a = path_in("s-a.ckpt"), *b = path_in("s-b.ckpt");
	struct esd_ds_info info = {.shape = "test", .ntables = ST, .ndense = SD};
	for (int t = 0; t < ST; t++)
		info.rows[t] = 10 + (uint64_t)t;
	struct esd_ds_writer *w;
	assert_int_equal(esd_ds_writer_open(ds, &info, &w), 0);
	uint64_t rng = 8;
	for (int i = 0; i < NS; i++) {
		uint64_t ids[ST];
		for (int t = 0; t < ST; t++) {
			ids[t] = esd_test_rand(&rng) % info.rows[t];
			mem_keys[i * ST + t] = esd_key_make((uint32_t)t, ids[t]);
		}
		for (int j = 0; j < SD; j++)
			mem_dense[i * SD + j] = (float)(esd_test_rand(&rng) % 100) / 10.0f;
		mem_labels[i] = (float)(ids[0] < 5);
		assert_int_equal(
		    esd_ds_writer_append(w, (uint8_t)mem_labels[i], mem_dense + i * SD, ids), 0);
	}
	assert_int_equal(esd_ds_writer_close(w), 0);

	struct esd_ref_config cfg;
	struct esd_ref_gen gen;
	base_config(&cfg, &gen, ESD_OPT_ADAGRAD);
	cfg.iterations = 3;
	cfg.cursor = 32; /* resume-style start inside the stream */
	struct esd_ref_source src, mem = {.tables = ST, .dense = SD, .next = mem_source};
	assert_int_equal(esd_ref_stream_source(ds, &src), 0);
	assert_int_equal(src.tables, ST);
	assert_int_equal(src.dense, SD);
	assert_int_equal(esd_ref_train(&cfg, &src, a, NULL), 0);
	assert_int_equal(esd_ref_train(&cfg, &mem, b, NULL), 0);
	const char *pa[1] = {a}, *pb[1] = {b};
	const struct esd_ckpt_cmp_opts exact = {.exact = true, .state = true, .clocks = true};
	struct esd_ckpt_cmp_result res;
	assert_int_equal(esd_ckpt_compare(pa, 1, pb, 1, &exact, &res, NULL), 0);
	assert_true(res.equal);
	cfg.iterations = 10; /* 32 + 10 * 64 = 2.6 passes over 256, wrapping mid-batch */
	assert_int_equal(esd_ref_train(&cfg, &src, a, NULL), 0);
	assert_int_equal(esd_ref_train(&cfg, &mem, b, NULL), 0);
	assert_int_equal(esd_ckpt_compare(pa, 1, pb, 1, &exact, &res, NULL), 0);
	assert_true(res.equal);
	esd_ref_stream_close(&src);
	esd_ref_stream_close(&src); /* twice is harmless */
	char *missing = path_in("missing.esd");
	assert_int_equal(esd_ref_stream_source(missing, &src), -ENOENT);
	free(missing);
	free(ds);
	free(a);
	free(b);
}

/* ---- the distributed iteration, emulated in one process ---------------- */

struct emu {
	const struct esd_optim_params *p;
	unsigned sf;
	float val[TABLES * ROWS][DIM];
	float st[TABLES * ROWS][2 * DIM];
	uint64_t clock[TABLES * ROWS];
	int used[TABLES * ROWS];
	double grad[NW][TABLES * ROWS][DIM];
	int trained[NW][TABLES * ROWS];
};

static size_t slot_of(esd_key_t key)
{
	return esd_key_table(key) * ROWS + esd_key_id(key);
}

static uint32_t by_key_keys[TABLES * ROWS];

static int cmp_slot(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	(void)by_key_keys;
	return x < y ? -1 : x > y; /* slot order == key order here */
}

static void emulate(const struct esd_ref_config *cfg, const struct esd_ref_gen *gen_in,
                    int shuffle_within, const char *out)
{
	struct esd_ref_gen gen = *gen_in;
	struct esd_ref_source src;
	struct esd_model *model;
	struct esd_model_shape shape = {
	    .tables = TABLES, .dim = DIM, .dense = DENSE, .hidden = cfg->hidden};
	struct emu *e = calloc(1, sizeof(*e));
	assert_int_equal(esd_ref_gen_source(&gen, &src), 0);
	assert_int_equal(esd_model_create(&shape, &model), 0);
	const size_t dl = esd_model_dense_len(model);
	unsigned sf = esd_optimizer_state_floats(cfg->optim.opt);
	float *dense = malloc(dl * sizeof(float)), *dstate = calloc(dl * 2 + 1, sizeof(float));
	double *dacc = malloc(dl * sizeof(double)), *dg[NW];
	for (int w = 0; w < NW; w++)
		dg[w] = malloc(dl * sizeof(double));
	esd_model_dense_init(model, cfg->seed, dense);
	esd_optim_state_init(&cfg->optim, (unsigned)dl, dstate);
	esd_key_t keys[K * TABLES];
	float labels[K], dfeat[K * DENSE];
	uint64_t rng = 99;
	for (uint64_t it = 0; it < cfg->iterations; it++) {
		assert_int_equal(src.next(src.arg, it * K, K, keys, NULL, labels, dfeat), K);
		/* a dispatch decision: a seeded random split into NW x K/NW */
		uint32_t perm[K];
		for (uint32_t i = 0; i < K; i++)
			perm[i] = i;
		for (uint32_t i = K - 1; i > 0; i--) {
			uint32_t j = (uint32_t)(esd_test_rand(&rng) % (i + 1));
			uint32_t t = perm[i];
			perm[i] = perm[j];
			perm[j] = t;
		}
		memset(e->grad, 0, sizeof(e->grad));
		memset(e->trained, 0, sizeof(e->trained));
		for (int w = 0; w < NW; w++) {
			uint32_t *mine = perm + w * (K / NW);
			if (!shuffle_within)
				qsort(mine, K / NW, sizeof(*mine), cmp_slot);
			/* the micro-batch, as the daemon publishes it */
			const float *rows[K / NW * TABLES];
			double *grads[K / NW * TABLES];
			float ml[K / NW], md[K / NW * DENSE];
			for (int i = 0; i < K / NW; i++) {
				uint32_t s = mine[i];
				ml[i] = labels[s];
				memcpy(md + i * DENSE, dfeat + s * DENSE, sizeof(float) * DENSE);
				for (int t = 0; t < TABLES; t++) {
					size_t r = slot_of(keys[s * TABLES + t]);
					if (!e->used[r]) { /* the PS creates it on first pull */
						e->used[r] = 1;
						esd_row_init(cfg->seed, keys[s * TABLES + t], DIM,
						             e->val[r]);
						esd_optim_state_init(&cfg->optim, DIM, e->st[r]);
					}
					e->trained[w][r] = 1;
					rows[i * TABLES + t] = e->val[r];
					grads[i * TABLES + t] = e->grad[w][r];
				}
			}
			struct esd_model_batch b = {.m = K / NW,
			                            .rows = rows,
			                            .row_grads = grads,
			                            .labels = ml,
			                            .dense = md};
			memset(dg[w], 0, dl * sizeof(double));
			assert_int_equal(esd_model_step(model, dense, &b, K, NULL, dg[w], NULL), 0);
		}
		/* end of iteration: local update or sum at the PS in rank order */
		for (size_t r = 0; r < TABLES * ROWS; r++) {
			int n = 0, last = -1;
			for (int w = 0; w < NW; w++)
				if (e->trained[w][r]) {
					n++;
					last = w;
				}
			if (!n)
				continue;
			double acc[DIM];
			if (n == 1) {
				memcpy(acc, e->grad[last][r], sizeof(acc));
			} else {
				memset(acc, 0, sizeof(acc));
				for (int w = 0; w < NW; w++)
					if (e->trained[w][r])
						esd_optim_grad_add(DIM, acc, e->grad[w][r]);
			}
			esd_optim_apply_sum(&cfg->optim, DIM, e->val[r], e->st[r], acc,
			                    ++e->clock[r]);
		}
		memset(dacc, 0, dl * sizeof(double));
		for (int w = 0; w < NW; w++)
			esd_optim_grad_add((unsigned)dl, dacc, dg[w]);
		esd_optim_apply_sum(&cfg->optim, (unsigned)dl, dense, dstate, dacc, it + 1);
	}
	/* the PS's checkpoint, as two shards by key parity */
	for (uint32_t shard = 0; shard < 2; shard++) {
		char *p;
		assert_true(asprintf(&p, "%s.%u", out, shard) > 0);
		struct esd_ckpt_meta m = {.seed = cfg->seed,
		                          .iteration = cfg->iterations,
		                          .data_cursor = cfg->iterations * K,
		                          .dim = DIM,
		                          .optimizer = cfg->optim.opt,
		                          .shard = shard,
		                          .nshards = 2,
		                          .dense_len = shard ? 0 : dl,
		                          .dense_clock = cfg->iterations};
		struct esd_ckpt_writer *w;
		assert_int_equal(esd_ckpt_writer_open(p, &m, &w), 0);
		for (size_t r = 0; r < TABLES * ROWS; r++) {
			esd_key_t key = esd_key_make((uint32_t)(r / ROWS), r % ROWS);
			if (e->used[r] && (key & 1) == shard)
				assert_int_equal(esd_ckpt_write_row(w, key, e->clock[r], e->val[r],
				                                    sf ? e->st[r] : NULL),
				                 0);
		}
		if (!shard)
			assert_int_equal(esd_ckpt_write_dense(w, dense, sf ? dstate : NULL), 0);
		assert_int_equal(esd_ckpt_writer_commit(w), 0);
		free(p);
	}
	for (int w = 0; w < NW; w++)
		free(dg[w]);
	free(dense);
	free(dstate);
	free(dacc);
	free(e);
	esd_model_free(model);
}

static void test_distributed_equals_reference(void **state)
{
	(void)state;
	char *ref = path_in("ref.ckpt"), *dist = path_in("dist.ckpt");
	char *s0, *s1;
	assert_true(asprintf(&s0, "%s.0", dist) > 0 && asprintf(&s1, "%s.1", dist) > 0);
	for (int o = 0; o < 3; o++) {
		for (int shuffle = 0; shuffle < 2; shuffle++) {
			struct esd_ref_config cfg;
			struct esd_ref_gen gen;
			struct esd_ref_source src;
			base_config(&cfg, &gen, (enum esd_optimizer)o);
			assert_int_equal(esd_ref_gen_source(&gen, &src), 0);
			assert_int_equal(esd_ref_train(&cfg, &src, ref, NULL), 0);
			emulate(&cfg, &gen, shuffle, dist);
			const char *pa[2] = {s0, s1}, *pb[1] = {ref};
			struct esd_ckpt_cmp_result res;
			struct esd_ckpt_error err;
			assert_int_equal(esd_ckpt_compare(pa, 2, pb, 1, NULL, &res, &err), 0);
			print_message("%s%s: %llu rows, max abs %.3g, max rel %.3g%s%s\n",
			              esd_optim_name(cfg.optim.opt),
			              shuffle ? " (shuffled micro-batches)" : "",
			              (unsigned long long)res.rows_a, res.max_abs, res.max_rel,
			              res.equal ? "" : ", differs: ", res.first_what);
			assert_true(res.equal);
			/* double accumulators: in practice the same bits (reftrain.h) */
			assert_true(res.max_abs == 0.0);
			assert_int_equal(res.rows_a, res.rows_b);
		}
	}
	free(s0);
	free(s1);
	free(ref);
	free(dist);
}

/* The tool: two runs are bit-identical files; bad arguments exit 2. */
static void test_tool(void **state)
{
	(void)state;
	char *bin = esd_test_bin("esd-ref"), *a = path_in("tool-a.ckpt"),
	     *b = path_in("tool-b.ckpt");
	char *cmd;
	const char *args = "--iters 5 --batch 32 --tables 3 --rows 50 --dim 4 --opt adam";
	assert_true(asprintf(&cmd,
	                     "%s %s --out %s >/dev/null && %s %s --out %s >/dev/null && "
	                     "cmp -s %s %s",
	                     bin, args, a, bin, args, b, a, b) > 0);
	assert_int_equal(system(cmd), 0);
	free(cmd);
	assert_true(asprintf(&cmd, "%s --out %s --opt rmsprop 2>/dev/null", bin, a) > 0);
	int st = system(cmd);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 2);
	free(cmd);
	assert_true(asprintf(&cmd, "%s --iters -3 --out %s 2>/dev/null", bin, a) > 0);
	st = system(cmd);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 2);
	free(cmd);
	/* the checkpoint subcommands: info, compare (exit 0 equal, 1 not, 3 refused) */
	char *c = path_in("tool-c.ckpt");
	assert_true(asprintf(&cmd, "%s %s --seed 9 --out %s >/dev/null", bin, args, c) > 0);
	assert_int_equal(system(cmd), 0);
	free(cmd);
	struct {
		const char *x, *y, *opts;
		int status;
	} cases[] = {
	    {a, b, "--exact", 0}, {a, c, "", 1},         {a, "/nonexistent.ckpt", "--rtol 0.1", 3},
	    {a, "", "", 2},       {a, b, "--rtol x", 2},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_true(asprintf(&cmd, "%s compare %s %s %s >/dev/null 2>&1", bin,
		                     cases[i].opts, cases[i].x, cases[i].y) > 0);
		st = system(cmd);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != cases[i].status)
			fail_msg("'%s' exited %d, expected %d", cmd, WEXITSTATUS(st),
			         cases[i].status);
		free(cmd);
	}
	assert_true(asprintf(&cmd, "%s info %s %s >/dev/null", bin, a, c) > 0);
	assert_int_equal(system(cmd), 0);
	free(cmd);
	free(c);
	assert_int_equal(truncate(b, 10), 0);
	assert_true(asprintf(&cmd, "%s info %s 2>/dev/null", bin, b) > 0);
	st = system(cmd);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 3);
	free(cmd);
	free(bin);
	free(a);
	free(b);
}

static int setup(void **state)
{
	(void)state;
	dir = esd_test_mkdtemp("esd-ref");
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
	    cmocka_unit_test(test_deterministic_and_learns),
	    cmocka_unit_test(test_source_ends),
	    cmocka_unit_test(test_resume_is_exact),
	    cmocka_unit_test(test_stream_source),
	    cmocka_unit_test(test_distributed_equals_reference),
	    cmocka_unit_test(test_tool),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
