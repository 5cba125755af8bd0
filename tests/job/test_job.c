/* Job settings: defaults, per-worker lists, errors, digest, row cost. */
#include "testutil.h"

#include <esd/job.h>
#include <esd/job_settings.h>
#include <esd/err.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static struct esd_config *cfg_of(const char *const *sets)
{
	struct esd_config *c;
	assert_int_equal(esd_config_create(&c), 0);
	for (; *sets; sets++)
		assert_int_equal(esd_config_set(c, *sets), 0);
	return c;
}

static void test_defaults_and_lists(void **state)
{
	(void)state;
	static const char *const sets[] = {"workers.n=4", "workers.batch=192,64,192,64",
					   "workers.rates=5G,0.5G,5G,500M", "model.dim=512",
					   "dispatch.sync=het", "dispatch.staleness=2", NULL};
	struct esd_config *c = cfg_of(sets);
	struct esd_job j;
	assert_int_equal(esd_config_check_keys(c, esd_job_keys), 0);
	assert_int_equal(esd_job_from_config(c, &j), 0);
	assert_int_equal(j.n, 4);
	assert_int_equal(j.batch[0], 192);
	assert_int_equal(j.batch[3], 64);
	assert_int_equal(j.derived.global_batch, 512);
	assert_int_equal(j.rate_bps[1], 500000000ull);
	assert_int_equal(j.rate_bps[3], 500000000ull);
	assert_int_equal(j.sync, ESD_SYNC_FULL_SET);
	assert_true(j.het);
	assert_string_equal(esd_job_sync_name(&j), "het");
	assert_int_equal(j.optim.opt, ESD_OPT_ADAGRAD);
	/* no dispatch.method: the project's method; a batch list is pinned */
	assert_string_equal(j.method, ESD_JOB_DEFAULT_METHOD);
	assert_int_equal(j.matrix, ESD_MATRIX_SHARED);
	assert_int_equal(j.local_search, ESD_JOB_DEFAULT_SWAPS);
	assert_false(j.derived.split_fit);
	assert_false(j.derived.split_link_aware);
	assert_true(j.gpu_min_rows == ESD_JOB_GPU_MEASURE);
	/* 512 floats + Adagrad state + key/clock: 16 + 4096 bytes */
	assert_int_equal(esd_job_row_bytes(&j), 16 + 512 * 4 * 2);
	/* 4112 bytes at 5 Gbit/s = 6579.2 ns -> 6580 */
	assert_int_equal(esd_job_row_cost_ns(&j, 0, esd_job_row_bytes(&j)), 6580);
	assert_int_equal(esd_job_row_cost_ns(&j, 1, esd_job_row_bytes(&j)), 65792);
	esd_config_free(c);
}

/* The default method fits its sizes online; a method named runs as
 * published; a size model is parsed strictly. */
static void test_default_method_fits_sizes(void **state)
{
	(void)state;
	static const char *const def[] = {"workers.n=4", "workers.batch=64",
					  "workers.rates=5G,0.5G,5G,0.5G", NULL};
	struct esd_config *c = cfg_of(def);
	struct esd_job j;
	assert_int_equal(esd_job_from_config(c, &j), 0);
	assert_true(j.derived.split_fit && j.derived.split_link_aware);
	for (uint32_t w = 0; w < 4; w++) /* equal until the process applies the prior */
		assert_int_equal(j.batch[w], 64);
	assert_true(j.refit_threshold == 0.02);
	assert_int_equal(j.derived.ls_ref_keys, ESD_JOB_LS_REF_KEYS); /* swaps scaled on wide samples */
	/* the cold prior: 2 rows per key of one sample, growing as
	 * samples^(11/16); compute 0: the slow links (10x the row cost) train one
	 * sample each, within max_batch */
	assert_int_equal(esd_job_fit_prior(&j, 0), -EINVAL);
	assert_int_equal(esd_job_fit_prior(&j, 26), 0);
	assert_true(j.derived.size_prior && j.derived.size_fixed_rows > 0 &&
		    j.derived.size_rows_per_sample > 0);
	assert_int_equal(j.batch[0] + j.batch[1] + j.batch[2] + j.batch[3], 256);
	assert_true(j.batch[0] == j.batch[2] && j.batch[1] == j.batch[3]);
	assert_int_equal(j.batch[1], 1);
	const double a = j.derived.size_fixed_rows;
	assert_int_equal(esd_job_fit_prior(&j, 13), 0); /* once */
	assert_true(j.derived.size_fixed_rows == a);
	esd_config_free(c);
	static const char *const capped[] = {"workers.n=4", "workers.batch=64",
					     "workers.rates=5G,0.5G,5G,0.5G", NULL};
	c = cfg_of(capped);
	assert_int_equal(esd_job_from_config(c, &j), 0);
	j.derived.max_batch = 100;
	assert_int_equal(esd_job_fit_prior(&j, 26), 0);
	assert_int_equal(j.batch[0], 100);
	assert_int_equal(j.batch[1], 28);
	esd_config_free(c);
	static const char *const given[] = {"workers.n=4", "workers.batch=64",
					    "workers.rates=5G,0.5G,5G,0.5G", "workers.size_model=0,0",
					    NULL};
	c = cfg_of(given); /* a model given is the start: no prior */
	assert_int_equal(esd_job_from_config(c, &j), 0);
	assert_int_equal(esd_job_fit_prior(&j, 26), 0);
	assert_false(j.derived.size_prior);
	for (uint32_t w = 0; w < 4; w++)
		assert_int_equal(j.batch[w], 64);
	esd_config_free(c);
	static const char *const fixed[] = {"workers.n=4", "dispatch.local_search=1000", NULL};
	c = cfg_of(fixed); /* a budget given is kept whatever the samples */
	assert_int_equal(esd_job_from_config(c, &j), 0);
	assert_int_equal(j.local_search, 1000);
	assert_int_equal(j.derived.ls_ref_keys, 0);
	esd_config_free(c);
	static const char *const named[] = {"workers.n=4", "workers.batch=64",
					    "workers.rates=5G,0.5G,5G,0.5G", "dispatch.method=laia",
					    NULL};
	c = cfg_of(named);
	assert_int_equal(esd_job_from_config(c, &j), 0);
	assert_string_equal(j.method, "laia");
	assert_int_equal(j.matrix, ESD_MATRIX_PAPER);
	assert_int_equal(j.local_search, 0);
	assert_int_equal(j.derived.ls_ref_keys, 0);
	assert_false(j.derived.split_link_aware);
	esd_config_free(c);
	/* many workers: laia with fewer swaps, the exact solve being too slow */
	static const char *const wide[] = {"workers.n=64", "workers.batch=128", NULL};
	c = cfg_of(wide);
	assert_int_equal(esd_job_from_config(c, &j), 0);
	assert_string_equal(j.method, ESD_JOB_WIDE_METHOD);
	assert_int_equal(j.local_search, ESD_JOB_WIDE_SWAPS / 64);
	assert_true(j.derived.split_fit);
	esd_config_free(c);
	static const char *const pinned[] = {"workers.n=4", "workers.batch=64",
					     "workers.split=equal", NULL};
	c = cfg_of(pinned);
	assert_int_equal(esd_job_from_config(c, &j), 0);
	assert_false(j.derived.split_link_aware);
	assert_string_equal(j.method, ESD_JOB_DEFAULT_METHOD);
	esd_config_free(c);
	static const char *const bad[] = {"workers.split=sometimes", NULL};
	c = cfg_of(bad);
	assert_int_equal(esd_job_from_config(c, &j), -EINVAL);
	esd_config_free(c);
	double v[3];
	assert_int_equal(esd_job_parse_size_model("12.5,3,50000", v), 0);
	assert_true(v[0] == 12.5 && v[1] == 3 && v[2] == 50000);
	assert_int_equal(esd_job_parse_size_model("1,2", v), -EINVAL);
	assert_int_equal(esd_job_parse_size_model("1,2,-3", v), -EINVAL);
	assert_int_equal(esd_job_parse_size_model("1,2,nan", v), -EINVAL);
	assert_int_equal(esd_job_parse_size_model("1,2,3,4", v), -EINVAL);
}

/* "X*N" in a list: N copies of X. */
static void test_repeated_items(void **state)
{
	(void)state;
	static const char *const sets[] = {"workers.n=64", "workers.rates=5G*48, 0.5G*16",
					   "workers.batch=128*32,64*32", NULL};
	struct esd_config *c = cfg_of(sets);
	struct esd_job j;
	assert_int_equal(esd_job_from_config(c, &j), 0);
	assert_int_equal(j.rate_bps[47], 5000000000ull);
	assert_int_equal(j.rate_bps[48], 500000000ull);
	assert_int_equal(j.rate_bps[63], 500000000ull);
	assert_int_equal(j.batch[31], 128);
	assert_int_equal(j.derived.global_batch, 128 * 32 + 64 * 32);
	esd_config_free(c);
	static const char *const bad[] = {"workers.n=4", "workers.rates=5G*5", NULL};
	c = cfg_of(bad);
	assert_int_equal(esd_job_from_config(c, &j), -EINVAL);
	esd_config_free(c);
	static const char *const bad2[] = {"workers.n=4", "workers.rates=5G*x", NULL};
	c = cfg_of(bad2);
	assert_int_equal(esd_job_from_config(c, &j), -EINVAL);
	esd_config_free(c);
}

static void test_single_value_applies_to_all(void **state)
{
	(void)state;
	static const char *const sets[] = {"workers.n=3", "workers.batch=10", "workers.rates=1G",
					   NULL};
	struct esd_config *c = cfg_of(sets);
	struct esd_job j;
	assert_int_equal(esd_job_from_config(c, &j), 0);
	assert_int_equal(j.derived.global_batch, 30);
	assert_int_equal(j.rate_bps[2], 1000000000ull);
	esd_config_free(c);
	static const char *const g[] = {"dispatch.gpu_min_rows=4096", "dispatch.gpu_blocks=16", NULL};
	c = cfg_of(g);
	assert_int_equal(esd_config_check_keys(c, esd_job_keys), 0);
	assert_int_equal(esd_job_from_config(c, &j), 0);
	assert_int_equal(j.gpu_min_rows, 4096);
	assert_int_equal(j.gpu_blocks, 16);
	esd_config_free(c);
}

static void test_errors(void **state)
{
	(void)state;
	static const char *const bad[][3] = {
		{"workers.n=2", "workers.batch=1,2,3", NULL},
		{"workers.n=2", "workers.rates=fast", NULL},
		{"model.optimizer=lion", NULL, NULL},
		{"dispatch.sync=sometimes", NULL, NULL},
		{"cache.policy=random", NULL, NULL},
		{"workers.n=0", NULL, NULL},
		{"ps.shards=2", "ps.addrs=a:1", NULL},
		{"dispatch.gpu_min_rows=some", NULL, NULL},
		{"dispatch.gpu_min_rows=-5", NULL, NULL},
		{"dispatch.gpu_min_rows=12x", NULL, NULL},
		{"dispatch.gpu_min_rows=999999999", NULL, NULL},
		{"dispatch.gpu_blocks=5000", NULL, NULL},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct esd_config *c = cfg_of(bad[i]);
		struct esd_job j;
		assert_int_equal(esd_job_from_config(c, &j), -EINVAL);
		esd_config_free(c);
	}
	static const char *const typo[] = {"workers.nn=3", NULL};
	struct esd_config *c = cfg_of(typo);
	assert_int_equal(esd_config_check_keys(c, esd_job_keys), -EINVAL);
	esd_config_free(c);
}

/* Load sets with stderr captured into log; returns esd_job_from_config's
 * result. */
static int load_logged(const char *const *sets, struct esd_job *j, char *log, size_t len)
{
	struct esd_config *c = cfg_of(sets);
	assert_int_equal(esd_config_check_keys(c, esd_job_keys), 0);
	FILE *f = tmpfile();
	assert_non_null(f);
	fflush(stderr);
	int saved = dup(2);
	dup2(fileno(f), 2);
	int rc = esd_job_from_config(c, j);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	size_t n = (size_t)pread(fileno(f), log, len - 1, 0);
	log[n < len ? n : 0] = '\0';
	fclose(f);
	esd_config_free(c);
	return rc;
}

static void test_backend_keys(void **state)
{
	(void)state;
	struct esd_job j;
	char log[4096];
	static const char *const none[] = {NULL};
	assert_int_equal(load_logged(none, &j, log, sizeof(log)), 0);
	assert_string_equal(j.backend, "tcp");
	assert_int_equal(j.dpdk_port, ESD_JOB_PORT_MEMIF);
	assert_string_equal(j.dpdk_eal, "");
	assert_int_equal(j.dpdk_mtu, 0);
	assert_int_equal(j.dpdk_queue, 0);
	assert_false(j.have_shard_macs || j.have_worker_macs);
	assert_string_equal(j.rdma_device, "");
	assert_int_equal(j.rdma_port, 1);
	assert_int_equal(j.rdma_gid_index, 0);

	static const char *const afp[] = {
		"workers.n=2", "ps.backend=dpdk", "ps.dpdk_port=af_packet:veth0", "ps.dpdk_mtu=1400",
		"ps.dpdk_queue=512", "ps.dpdk_shard_macs=02:00:00:00:00:1A",
		"ps.dpdk_worker_macs=02:00:00:00:00:01, 02:00:00:00:00:02", NULL};
	assert_int_equal(load_logged(afp, &j, log, sizeof(log)), 0);
	assert_int_equal(j.dpdk_port, ESD_JOB_PORT_AF_PACKET);
	assert_string_equal(j.dpdk_dev, "veth0");
	assert_int_equal(j.dpdk_mtu, 1400);
	assert_int_equal(j.dpdk_queue, 512);
	assert_true(j.have_shard_macs && j.have_worker_macs);
	assert_int_equal(j.shard_macs[0][5], 0x1a);
	assert_int_equal(j.worker_macs[1][5], 2);

	/* a PCI port: the default EAL arguments see only that device */
	static const char *const pci[] = {"ps.backend=dpdk", "ps.dpdk_port=0000:3b:00.1", NULL};
	assert_int_equal(load_logged(pci, &j, log, sizeof(log)), 0);
	assert_int_equal(j.dpdk_port, ESD_JOB_PORT_PCI);
	assert_string_equal(j.dpdk_dev, "0000:3b:00.1");
	assert_non_null(strstr(j.dpdk_eal, "-a 0000:3b:00.1"));
	assert_null(strstr(j.dpdk_eal, "--no-pci"));
	static const char *const pci_eal[] = {"ps.dpdk_port=0000:AF:1f.7",
					      "ps.dpdk_eal=-l 2-3 -a 0000:af:1f.7", NULL};
	assert_int_equal(load_logged(pci_eal, &j, log, sizeof(log)), 0);
	assert_string_equal(j.dpdk_eal, "-l 2-3 -a 0000:af:1f.7");

	static const char *const rdma[] = {"ps.backend=rdma", "ps.rdma_device=mlx5_0",
					   "ps.rdma_port=2", "ps.rdma_gid_index=-1", NULL};
	assert_int_equal(load_logged(rdma, &j, log, sizeof(log)), 0);
	assert_string_equal(j.rdma_device, "mlx5_0");
	assert_int_equal(j.rdma_port, 2);
	assert_int_equal(j.rdma_gid_index, -1);
}

/* A wrong transport value is refused at load, the error naming the key
 * and the value (and why). */
static void test_backend_key_errors(void **state)
{
	(void)state;
	static const struct {
		const char *sets[3];
		const char *says; /* the log holds this */
		const char *why;  /* and this */
	} bad[] = {
		{{"ps.backend=infiniband"}, "ps.backend = 'infiniband'", "tcp, dpdk or rdma"},
		{{"ps.dpdk_port=0000:3b:00"}, "ps.dpdk_port = '0000:3b:00'", "DDDD:BB:DD.F"},
		{{"ps.dpdk_port=3b:00.0"}, "ps.dpdk_port = '3b:00.0'", "DDDD:BB:DD.F"},
		{{"ps.dpdk_port=0000:3b:20.0"}, "ps.dpdk_port = '0000:3b:20.0'", "device <= 1f"},
		{{"ps.dpdk_port=0000:3g:00.0"}, "ps.dpdk_port = '0000:3g:00.0'", "DDDD:BB:DD.F"},
		{{"ps.dpdk_port=eth0"}, "ps.dpdk_port = 'eth0'", "memif, af_packet:IFACE"},
		{{"ps.dpdk_port=af_packet:"}, "ps.dpdk_port = 'af_packet:'", "Linux interface"},
		{{"ps.dpdk_port=af_packet:eth0,x=1"}, "ps.dpdk_port = 'af_packet:eth0,x=1'", "no blank"},
		{{"ps.dpdk_port=0000:3b:00.0", "ps.dpdk_eal=--no-pci --no-huge"},
		 "ps.dpdk_eal = '--no-pci --no-huge'", "remove --no-pci"},
		{{"ps.dpdk_mtu=100"}, "ps.dpdk_mtu = '100'", "at least 256"},
		{{"ps.dpdk_mtu=70000"}, "ps.dpdk_mtu = '70000'", "out of range"},
		{{"ps.dpdk_queue=1000"}, "ps.dpdk_queue = '1000'", "power of two"},
		{{"ps.dpdk_queue=8192"}, "ps.dpdk_queue = '8192'", "out of range"},
		{{"workers.n=2", "ps.dpdk_worker_macs=02:00:00:00:00:01"},
		 "ps.dpdk_worker_macs = '02:00:00:00:00:01'", "1 MAC addresses for 2 workers"},
		{{"ps.shards=2", "ps.dpdk_shard_macs=02:00:00:00:00:01,02:00:00:00:00:0g"},
		 "ps.dpdk_shard_macs = '02:00:00:00:00:01,02:00:00:00:00:0g'",
		 "'02:00:00:00:00:0g' is not a unicast MAC"},
		{{"ps.dpdk_shard_macs=01:00:5e:00:00:01"}, "ps.dpdk_shard_macs = '01:00:5e:00:00:01'",
		 "not a unicast MAC"},
		{{"ps.dpdk_shard_macs=0200:0000:0001"}, "ps.dpdk_shard_macs = '0200:0000:0001'",
		 "not a unicast MAC"},
		{{"ps.rdma_device=mlx5 0"}, "ps.rdma_device = 'mlx5 0'", "ibv_devices"},
		{{"ps.rdma_port=0"}, "ps.rdma_port = '0'", "out of range"},
		{{"ps.rdma_gid_index=256"}, "ps.rdma_gid_index = '256'", "out of range"},
		{{"ps.rdma_gid_index=-2"}, "ps.rdma_gid_index = '-2'", "out of range"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct esd_job j;
		char log[4096];
		int rc = load_logged(bad[i].sets, &j, log, sizeof(log));
		if (rc != -EINVAL || !strstr(log, bad[i].says) || !strstr(log, bad[i].why))
			print_error("%s: rc %d, log: %s\n", bad[i].sets[0], rc, log);
		assert_int_equal(rc, -EINVAL);
		assert_non_null(strstr(log, bad[i].says));
		assert_non_null(strstr(log, bad[i].why));
	}
}

/* One row of docs/configuration.md's tables: its keys and default. */
struct doc_row {
	char keys[4][64];
	int nkeys;
	char def[256];
};

/* The `section.key` names of the first column of a table row, and the
 * second column without its backticks; 0 when line is no key row. */
static int doc_row_parse(char *line, struct doc_row *r)
{
	char *col2 = strchr(line + 1, '|'), *col3;
	if (line[0] != '|' || !col2 || !(col3 = strchr(col2 + 1, '|')))
		return 0;
	*col2 = *col3 = '\0';
	r->nkeys = 0;
	for (char *p = line; (p = strchr(p, '`')) != NULL;) {
		char *q = strchr(p + 1, '`');
		if (!q)
			break;
		size_t len = (size_t)(q - p - 1);
		if (len > 0 && len < sizeof(r->keys[0]) && memchr(p + 1, '.', len) &&
		    !memchr(p + 1, ' ', len) && !memchr(p + 1, '=', len) && r->nkeys < 4) {
			memcpy(r->keys[r->nkeys], p + 1, len);
			r->keys[r->nkeys++][len] = '\0';
		}
		p = q + 1;
	}
	size_t n = 0;
	for (const char *p = col2 + 1; *p && n + 1 < sizeof(r->def); p++)
		if (*p != '`' && (n || *p != ' '))
			r->def[n++] = *p;
	while (n && r->def[n - 1] == ' ')
		n--;
	r->def[n] = '\0';
	return r->nkeys > 0;
}

/* docs/configuration.md documents exactly the settings of the table
 * (runtime/job/settings.def), each with the table's default: every
 * `section.key` in the first column of its tables is a setting whose
 * default is the second column, and every setting is there. */
static void test_settings_documented(void **state)
{
	(void)state;
	char *path = esd_test_src("docs/configuration.md");
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	static bool seen[256];
	assert_true(esd_job_nsettings < 256);
	int bad = 0, ndoc = 0;
	char line[4096];
	struct doc_row r;
	while (fgets(line, sizeof(line), f)) {
		if (!doc_row_parse(line, &r))
			continue;
		for (int k = 0; k < r.nkeys; k++, ndoc++) {
			const struct esd_setting *s = esd_job_setting(r.keys[k]);
			char def[256];
			if (!s) {
				print_error("docs/configuration.md documents %s, which is no "
					    "setting (runtime/job/settings.def)\n", r.keys[k]);
				bad++;
				continue;
			}
			seen[s - esd_job_settings] = true;
			esd_setting_default_text(s, def, sizeof(def));
			if (strcmp(def, r.def)) {
				print_error("docs/configuration.md: %s defaults to '%s', the "
					    "table to '%s'\n", r.keys[k], r.def, def);
				bad++;
			}
		}
	}
	fclose(f);
	free(path);
	for (size_t i = 0; i < esd_job_nsettings; i++) {
		if (!seen[i]) {
			print_error("%s is a setting but missing from docs/configuration.md\n",
				    esd_job_settings[i].name);
			bad++;
		}
	}
	assert_int_equal(bad, 0);
	assert_true(ndoc > 30);
}

/* The table holds together: esd_job_keys is its names, each default is
 * within its bounds and is what a job without settings gets, each bound
 * fits its field. */
static void test_settings_table(void **state)
{
	(void)state;
	size_t n = 0;
	for (; esd_job_keys[n]; n++) {
		assert_true(n < esd_job_nsettings);
		assert_string_equal(esd_job_keys[n], esd_job_settings[n].name);
	}
	assert_int_equal(n, esd_job_nsettings);
	static const char *const none[] = {NULL};
	struct esd_config *c = cfg_of(none);
	struct esd_job j;
	assert_int_equal(esd_job_from_config(c, &j), 0);
	esd_config_free(c);
	for (size_t i = 0; i < esd_job_nsettings; i++) {
		const struct esd_setting *s = &esd_job_settings[i];
		const void *field = (const char *)&j + s->offset;
		char name[64];
		snprintf(name, sizeof(name), "%s.%s", s->section, s->key);
		assert_string_equal(name, s->name);
		assert_non_null(s->doc);
		if (!s->size || s->def_text)
			continue;
		switch (s->type) {
		case ESD_SETTING_UINT:
			assert_true(s->min.u <= s->def.u && s->def.u <= s->max.u);
			if (s->size == 4) {
				assert_true(s->max.u <= UINT32_MAX);
				assert_int_equal(*(const uint32_t *)field, s->def.u);
			} else {
				assert_int_equal(s->size, 8);
				assert_int_equal(*(const uint64_t *)field, s->def.u);
			}
			break;
		case ESD_SETTING_INT:
			assert_true(s->min.i <= s->def.i && s->def.i <= s->max.i);
			assert_true(s->size == 4 ? *(const int32_t *)field == s->def.i
						 : *(const int64_t *)field == s->def.i);
			break;
		case ESD_SETTING_DOUBLE:
			assert_true(s->min.d <= s->def.d && s->def.d <= s->max.d);
			assert_true(s->size == 8 && *(const double *)field == s->def.d);
			break;
		case ESD_SETTING_BOOL:
			assert_int_equal(s->size, sizeof(bool));
			assert_int_equal(*(const bool *)field, s->def.b);
			break;
		default:
			assert_string_equal((const char *)field, s->def.s);
			break;
		}
	}
	/* what esd-info --settings prints */
	char text[256];
	esd_setting_bounds_text(esd_job_setting("workers.n"), text, sizeof(text));
	assert_string_equal(text, "[1, 64]");
	esd_setting_bounds_text(esd_job_setting("job.iterations"), text, sizeof(text));
	assert_string_equal(text, "[1, 2^63-1]");
	esd_setting_default_text(esd_job_setting("cache.ratio"), text, sizeof(text));
	assert_string_equal(text, "0.08");
	esd_setting_default_text(esd_job_setting("job.key"), text, sizeof(text));
	assert_string_equal(text, "(none)");
}

/* An enum's error names the key, the value, where it was set and what
 * a value must be. */
static void test_setting_error_names_where(void **state)
{
	(void)state;
	static const char *const sets[] = {"cache.policy=random", NULL};
	struct esd_job j;
	char log[4096];
	assert_int_equal(load_logged(sets, &j, log, sizeof(log)), -EINVAL);
	assert_non_null(strstr(log, "cache.policy = 'random' (command line): expected lru, lfu, "
				    "emark or lookahead"));
	static const char *const big[] = {"workers.n=65", NULL};
	assert_int_equal(load_logged(big, &j, log, sizeof(log)), -EINVAL);
	assert_non_null(strstr(log, "workers.n = '65' (command line): out of range [1, 64]"));
	static const char *const meth[] = {"dispatch.method=greedy", NULL};
	assert_int_equal(load_logged(meth, &j, log, sizeof(log)), -EINVAL);
	assert_non_null(strstr(log, "dispatch.method = 'greedy' (command line): expected vanilla, "
				    "laia, heu, opt, hungarian or hybrid"));
}

static void test_digest(void **state)
{
	(void)state;
	static const char *const a[] = {"workers.n=2", NULL};
	static const char *const b[] = {"workers.n=2", "dispatch.alpha=0.5", NULL};
	static const char *const c2[] = {"workers.n=2", "job.iterations=999", NULL};
	struct esd_config *ca = cfg_of(a), *cb = cfg_of(b), *cc = cfg_of(c2);
	struct esd_job ja, jb, jc;
	assert_int_equal(esd_job_from_config(ca, &ja), 0);
	assert_int_equal(esd_job_from_config(cb, &jb), 0);
	assert_int_equal(esd_job_from_config(cc, &jc), 0);
	assert_true(esd_job_digest(&ja) != esd_job_digest(&jb));
	/* the run length does not change decisions */
	assert_true(esd_job_digest(&ja) == esd_job_digest(&jc));
	esd_config_free(ca);
	esd_config_free(cb);
	esd_config_free(cc);
}

/* model.dims: one dim per table, the largest becoming model.dim; the
 * digest changes only when it is set; bad lists are refused by name. */
static void test_table_dims(void **state)
{
	(void)state;
	char log[1024];
	struct esd_job j, plain;
	static const char *const none[] = {"model.dim=8", NULL};
	assert_int_equal(load_logged(none, &plain, log, sizeof(log)), 0);
	assert_int_equal(plain.ntable_dims, 0);
	assert_int_equal(esd_job_table_dim(&plain, 5), 8);
	assert_int_equal(esd_job_check_tables(&plain, 26, "test"), 0);
	static const char *const ok[] = {"model.dims=4,8*2,16", NULL};
	assert_int_equal(load_logged(ok, &j, log, sizeof(log)), 0);
	assert_int_equal(j.ntable_dims, 4);
	assert_int_equal(j.dim, 16);
	assert_int_equal(esd_job_table_dim(&j, 0), 4);
	assert_int_equal(esd_job_table_dim(&j, 2), 8);
	assert_int_equal(esd_job_table_dim(&j, 3), 16);
	assert_int_equal(esd_job_check_tables(&j, 4, "test"), 0);
	assert_int_equal(esd_job_check_tables(&j, 5, "test"), -EINVAL);
	static const char *const same[] = {"model.dim=16", "model.dims=4,8,8,16", NULL};
	struct esd_job j2;
	assert_int_equal(load_logged(same, &j2, log, sizeof(log)), 0);
	assert_true(esd_job_digest(&j) == esd_job_digest(&j2));
	static const char *const equal[] = {"model.dims=8", NULL};
	assert_int_equal(load_logged(equal, &j2, log, sizeof(log)), 0);
	assert_true(esd_job_digest(&j2) != esd_job_digest(&plain)); /* the table count */
	static const char *const conflict[] = {"model.dim=32", "model.dims=4,16", NULL};
	assert_int_equal(load_logged(conflict, &j2, log, sizeof(log)), -EINVAL);
	assert_non_null(strstr(log, "model.dims"));
	static const char *const bad[][2] = {{"model.dims=4,0", NULL}, {"model.dims=4,x", NULL},
					     {"model.dims=70000", NULL}, {"model.dims=4,,8", NULL}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(load_logged(bad[i], &j2, log, sizeof(log)), -EINVAL);
		assert_non_null(strstr(log, "model.dims"));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults_and_lists),
		cmocka_unit_test(test_repeated_items),
		cmocka_unit_test(test_default_method_fits_sizes),
		cmocka_unit_test(test_single_value_applies_to_all),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_digest),
		cmocka_unit_test(test_table_dims),
		cmocka_unit_test(test_settings_documented),
		cmocka_unit_test(test_settings_table),
		cmocka_unit_test(test_setting_error_names_where),
		cmocka_unit_test(test_backend_keys),
		cmocka_unit_test(test_backend_key_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
