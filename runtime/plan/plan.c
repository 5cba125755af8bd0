/*
 * The memory plan of a job (esd/plan.h): each PS shard, node daemon and
 * trainer from the job and the stream's header, the runtime's own layout
 * functions where they exist; and the start check each process makes.
 */
#include <esd/plan.h>

#include <esd/err.h>
#include <esd/log.h>
#include <esd/model.h>
#include <esd/optim.h>

#include "xchg.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Order ring of esdd's dispatcher (runtime/node/node.h ORDER_RING). */
#define PLAN_ORDER_RING 3
/* PS store: rows per arena chunk, index entry (u64 key + u32 record). */
#define PLAN_PS_CHUNK_ROWS  4096u
#define PLAN_PS_INDEX_ENTRY 12u
#define PLAN_PS_ROW_HDR     16u

static uint64_t align64(uint64_t x)
{
	return (x + 63) & ~UINT64_C(63);
}

static double gib(uint64_t b)
{
	return (double)b / (1u << 30);
}

void esd_plan_meminfo(uint64_t *mem_available, uint64_t *huge_free)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	uint64_t hp_free = 0, hp_size = 0;
	*mem_available = *huge_free = 0;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long v;
		if (sscanf(line, "MemAvailable: %llu kB", &v) == 1)
			*mem_available = v * 1024;
		else if (sscanf(line, "HugePages_Free: %llu", &v) == 1)
			hp_free = v;
		else if (sscanf(line, "Hugepagesize: %llu kB", &v) == 1)
			hp_size = v * 1024;
	}
	fclose(f);
	*huge_free = hp_free * hp_size;
}

void esd_plan_fit(uint64_t needed, uint64_t region, struct esd_plan_fit *f)
{
	memset(f, 0, sizeof(*f));
	f->needed = needed;
	f->region = region;
	esd_plan_meminfo(&f->mem_available, &f->huge_free);
	f->regions_in_huge_pages = region <= f->huge_free;
	f->from_available = f->regions_in_huge_pages ? needed - region : needed;
	f->fits = f->mem_available && f->from_available <= f->mem_available;
}

/* The PS store's record classes: a class per distinct table dim, its
 * rows summed over its tables (runtime/ps/store.c). */
static void plan_store_classes(const struct esd_job *job, const struct esd_ds_info *di,
			       struct esd_plan *p)
{
	p->store_classes = 0;
	for (uint32_t t = 0; t < p->tables; t++) {
		const uint32_t d = esd_job_table_dim(job, t);
		uint32_t c = 0;
		while (c < p->store_classes && p->class_dim[c] != d)
			c++;
		if (c == p->store_classes) {
			p->class_dim[c] = d;
			p->class_rows[c] = 0;
			p->class_rec[c] = align64(PLAN_PS_ROW_HDR +
						  (uint64_t)d * (1 + p->state_floats) * 4);
			p->store_classes++;
		}
		p->class_rows[c] += di->rows[t];
	}
}

/* The stream's shape, the cache rows as esdd resolves them, the model and
 * the runtime's layouts. 0 or -EINVAL with err. */
static int plan_shape(const struct esd_job *job, const struct esd_ds_info *di,
		      struct esd_plan *p, char *err, size_t errlen)
{
	p->tables = di->ntables;
	if (job->ntable_dims && job->ntable_dims != p->tables) {
		snprintf(err, errlen, "model.dims lists %u dims but the stream has %u tables",
			 job->ntable_dims, p->tables);
		return -EINVAL;
	}
	p->width = esd_ds_keys_per_sample(di);
	p->bags = esd_ds_has_bags(di);
	p->weighted = di->weighted != 0;
	p->dense = di->ndense;
	p->workers = job->n;
	p->shards = job->shards;
	p->dim = job->dim;
	for (uint32_t t = 0; t < p->tables; t++)
		p->emb_floats += esd_job_table_dim(job, t);
	p->global_batch = job->derived.global_batch;
	for (uint32_t t = 0; t < p->tables; t++)
		p->total_rows += di->rows[t];
	uint64_t maxb = 0;
	for (uint32_t w = 0; w < p->workers; w++)
		maxb = job->batch[w] > maxb ? job->batch[w] : maxb;
	p->cache_rows = job->cache_rows;
	if (!p->cache_rows)
		p->cache_rows = (uint64_t)(job->cache_ratio * (double)p->total_rows);
	if (p->cache_rows < maxb * p->width)
		p->cache_rows = maxb * p->width;
	struct esd_model_shape sh = {.tables = p->tables, .dim = p->dim, .dense = p->dense,
				     .hidden = job->hidden,
				     .dims = job->ntable_dims ? job->table_dims : NULL};
	struct esd_model *mdl;
	if (esd_model_create(&sh, &mdl)) {
		snprintf(err, errlen, "model shape %u tables x %u floats + %u dense is invalid",
			 p->tables, p->dim, p->dense);
		return -EINVAL;
	}
	p->dense_len = esd_model_dense_len(mdl);
	p->hidden = esd_model_shape(mdl)->hidden;
	esd_model_free(mdl);
	p->state_floats = esd_optimizer_state_floats(job->optim.opt);
	struct esd_cache_config cc = {.rows = (uint32_t)p->cache_rows,
				      .dim = p->dim,
				      .optimizer = job->optim.opt,
				      .ntables = p->tables,
				      .policy = job->policy,
				      .pages = ESD_CACHE_PAGES_AUTO};
	if (p->cache_rows > (UINT64_C(1) << 30) || esd_cache_size(&cc, &p->cache_sizes)) {
		snprintf(err, errlen,
			 "a cache of %" PRIu64 " rows x %u floats cannot be laid out (at most "
			 "2^30 rows)",
			 p->cache_rows, p->dim);
		return -EINVAL;
	}
	p->row_bytes = align64(PLAN_PS_ROW_HDR + (uint64_t)(p->dim + p->state_floats * p->dim) * 4);
	plan_store_classes(job, di, p);
	return 0;
}

/* Each PS shard: row records (in RAM, or on disk with ps.store_ram of them
 * resident), index, staging, pull answers, dense table. */
static void plan_ps(const struct esd_job *job, struct esd_plan *p)
{
	const uint32_t S = p->shards;
	const uint64_t kt = p->global_batch * p->width;
	const uint64_t wire_row = 16 + 4ull * p->dim * (1 + p->state_floats);
	for (uint32_t s = 0; s < S; s++) {
		struct esd_plan_ps *o = &p->ps[s];
		o->rows = (p->total_rows + S - 1) / S;
		uint64_t icap = 1024;
		while ((o->rows + 1) * 2 > icap)
			icap *= 2;
		o->records = 0; /* each class's records in whole chunks */
		for (uint32_t c = 0; c < p->store_classes; c++) {
			uint64_t rows = (p->class_rows[c] + S - 1) / S;
			uint64_t chunks = (rows + PLAN_PS_CHUNK_ROWS - 1) / PLAN_PS_CHUNK_ROWS;
			o->records += chunks * PLAN_PS_CHUNK_ROWS * p->class_rec[c];
		}
		if (job->store_dir[0]) { /* a row cache of 3/4 store_ram, the rest mapped pages */
			uint64_t ram = job->store_ram_mb << 20, cache = ram / 4 * 3;
			o->disk = o->records;
			o->records = (cache < o->disk ? cache : o->disk) +
				     (ram - cache < o->disk ? ram - cache : o->disk);
		}
		o->index = icap * PLAN_PS_INDEX_ENTRY + (o->rows + 63) / 64 * 8;
		o->staging = (kt + S - 1) / S * (16 + 4ull * p->dim);
		o->pull = (kt + S - 1) / S * wire_row;
		o->dense = s == 0 ? p->dense_len * 4 * (1 + p->state_floats + p->workers) : 0;
		o->total = o->records + o->index + o->staging + o->pull + o->dense;
		p->ps_total += o->total;
	}
}

/* Each node (the cache region, snapshots, exchange area, queues and
 * dispatcher) and its trainer. */
static void plan_nodes(const struct esd_job *job, struct esd_plan *p)
{
	const uint64_t T = p->tables, D = p->dense, W = p->width, k = p->global_batch;
	const uint64_t kt = k * W;
	uint64_t maxb = 0;
	for (uint32_t w = 0; w < p->workers; w++)
		maxb = job->batch[w] > maxb ? job->batch[w] : maxb;
	struct esd_xchg_hdr xh;
	esd_xchg_layout_w(&xh, (uint32_t)maxb, p->tables, p->bags ? (uint32_t)(maxb * W) : 0,
			  p->dense, (uint32_t)p->dense_len, p->weighted);
	if (job->ntable_dims)
		esd_xchg_add_dims(&xh);
	/* dispatcher: two global batches, offsets, assignment, cost matrix,
	 * key table and consequence (per key: key, occupancy, per-worker
	 * state) */
	uint64_t disp = 2 * k * (4 + 4 * D + 8 * W + 4 * T) + 2 * (k + 1) * 4 + k * 4 +
			k * p->workers * 8 + kt * (24 + 8ull * p->workers) +
			(p->weighted ? 2 * kt * 4 : 0); /* the keys' weights */
	uint64_t snap = esd_cmeta_bytes((uint32_t)p->cache_rows);
	for (uint32_t w = 0; w < p->workers; w++) {
		uint64_t m = job->batch[w];
		uint64_t order = m * (4 + 4 * D + 8 * W + 4 * T) + m * W * (8 + 1 + 8 + 8 + 8) +
				 kt * 8 * 2 + (p->weighted ? m * W * 4 : 0);
		struct esd_plan_node *o = &p->node[w];
		o->region = p->cache_sizes.total;
		o->snapshots = snap * p->workers;
		o->exchange = xh.total_size;
		o->queues = order * PLAN_ORDER_RING;
		o->dispatcher = disp;
		o->total = o->region + o->snapshots + o->exchange + o->queues + o->dispatcher;
		p->node_total += o->total;
		p->region_total += o->region;

		struct esd_plan_trainer *t = &p->trainer[w];
		t->model = p->dense_len * 4 * 2;
		t->activations = m * (p->emb_floats + D + p->hidden) * 4 * 2;
		t->total = t->model + t->activations;
		p->trainer_total += t->total;
	}
}

int esd_plan_compute(const struct esd_job *job, const struct esd_ds_info *di,
		     struct esd_plan *p, char *err, size_t errlen)
{
	memset(p, 0, sizeof(*p));
	int rc = plan_shape(job, di, p, err, errlen);
	if (rc)
		return rc;
	plan_ps(job, p);
	plan_nodes(job, p);
	p->total = p->ps_total + p->node_total + p->trainer_total;
	return 0;
}

/* The refusal (or, forced, the warning) of one process's part. */
static void log_verdict(const struct esd_job *job, const char *tag, const char *part,
			const char *figures, const struct esd_plan_fit *f)
{
	char fig[640];
	snprintf(fig, sizeof(fig),
		 "%s needs %.2f GiB (%s)%s; this machine's MemAvailable is %.2f GiB, huge "
		 "pages free %.2f GiB: esdctl plan says DOES NOT FIT",
		 part, gib(f->from_available), figures,
		 f->region && f->regions_in_huge_pages ? ", its cache region in huge pages" : "",
		 gib(f->mem_available), gib(f->huge_free));
	if (job->force_plan)
		ESD_WARN(tag, "%s; starting anyway (job.force_plan = true)", fig);
	else
		ESD_ERR(tag, "%s; refusing to start (lower model.dim or cache.rows, add "
			"ps.shards, or set job.force_plan = true to start anyway; esdctl plan "
			"JOB.ini gives the whole job's figures)", fig);
}

int esd_plan_start_check(const struct esd_job *job, const struct esd_ds_info *di, int shard,
			 int rank, const char *tag)
{
	struct esd_plan p;
	char err[256], part[64], fig[384];
	struct esd_plan_fit f;
	if (esd_plan_compute(job, di, &p, err, sizeof(err))) {
		ESD_ERR(tag, "memory plan: %s", err);
		return -EINVAL;
	}
	if (shard >= 0) {
		const struct esd_plan_ps *o = &p.ps[shard];
		esd_plan_fit(o->total, 0, &f);
		snprintf(part, sizeof(part), "PS shard %d", shard);
		snprintf(fig, sizeof(fig),
			 "%" PRIu64 " rows of %" PRIu64 " bytes: records %.2f GiB%s, index %.2f "
			 "GiB, staging %.2f GiB, pull answers %.2f GiB, dense %.2f GiB",
			 o->rows, p.row_bytes, gib(o->records), o->disk ? " resident" : "",
			 gib(o->index), gib(o->staging), gib(o->pull), gib(o->dense));
	} else {
		const struct esd_plan_node *o = &p.node[rank];
		const struct esd_plan_trainer *t = &p.trainer[rank];
		esd_plan_fit(o->total + t->total, o->region, &f);
		snprintf(part, sizeof(part), "node %d", rank);
		snprintf(fig, sizeof(fig),
			 "cache region %.2f GiB (%" PRIu64 " rows of %u floats), snapshots %.2f "
			 "GiB, exchange %.2f GiB, dispatcher %.2f GiB, trainer %.2f GiB",
			 gib(o->region), p.cache_rows, p.dim, gib(o->snapshots), gib(o->exchange),
			 gib(o->queues + o->dispatcher), gib(t->total));
	}
	if (f.fits || !f.mem_available) /* unknown: nothing to refuse on */
		return 0;
	log_verdict(job, tag, part, fig, &f);
	return job->force_plan ? 0 : -ENOMEM;
}

void esd_plan_log_passes(const struct esd_job *job, uint64_t nsamples, const char *tag)
{
	uint64_t need = job->iterations * job->derived.global_batch;
	if (!nsamples || need <= nsamples)
		return;
	ESD_INFO(tag, "the stream holds %" PRIu64 " samples; %" PRIu64 " iterations x %" PRIu64
		 " = %" PRIu64 " samples: %.1f passes, wrapping around",
		 nsamples, job->iterations, job->derived.global_batch, need,
		 (double)need / (double)nsamples);
}

int esd_plan_check_dir(const char *dir, const char *setting, const char *tag)
{
	struct stat st;
	char probe[1200];
	int rc;
	if (stat(dir, &st)) {
		rc = -errno;
		ESD_ERR(tag, "%s %s: %s; create it (mkdir -p %s) on this host before starting "
			"the job", setting, dir, strerror(-rc), dir);
		return rc;
	}
	if (!S_ISDIR(st.st_mode)) {
		ESD_ERR(tag, "%s %s is not a directory", setting, dir);
		return -ENOTDIR;
	}
	snprintf(probe, sizeof(probe), "%s/.esd-probe-%ld", dir, (long)getpid());
	int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 && errno == EEXIST) { /* left by a process of the same pid */
		unlink(probe);
		fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	}
	if (fd < 0) {
		rc = -errno;
		ESD_ERR(tag, "%s %s is not writable by this process (uid %u): creating a file "
			"in it failed: %s", setting, dir, (unsigned)geteuid(), strerror(-rc));
		return rc;
	}
	close(fd);
	unlink(probe);
	return 0;
}
