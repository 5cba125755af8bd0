/*
 * Bytes of a PS shard's rows with per-table dims (model.dims) against the
 * same rows padded to the largest dim, side by side in one run: two row
 * stores, one of --dims and one of every table at the largest of them,
 * are filled with the same --rows rows (spread evenly over the tables,
 * created in one order); each is then written as a checkpoint to --dir.
 * Prints for both the store's resident bytes (ps_store_resident_bytes:
 * its record arenas), the process's resident memory that filling it
 * added (/proc/self/statm) and the checkpoint file's bytes, and the ratio
 * per-table / padded of each.
 *
 * Usage: bench_store_dims [--rows N] [--dims D,D*N,...] [--opt sgd|adagrad|adam]
 *                         [--dir DIR]
 */
#include "../../runtime/ps/store.h"

#include <esd/ckpt.h>
#include <esd/job.h>
#include <esd/optim.h>
#include <esd/types.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct args {
	uint64_t rows;
	const char *dims, *opt, *dir;
};

static int parse(int argc, char **argv, struct args *a)
{
	*a = (struct args){
	    .rows = 1000000, .dims = "8*13,64*13", .opt = "adagrad", .dir = "/var/tmp"};
	for (int i = 1; i + 1 < argc; i += 2) {
		const char *k = argv[i], *v = argv[i + 1];
		if (!strcmp(k, "--rows"))
			a->rows = strtoull(v, NULL, 10);
		else if (!strcmp(k, "--dims"))
			a->dims = v;
		else if (!strcmp(k, "--opt"))
			a->opt = v;
		else if (!strcmp(k, "--dir"))
			a->dir = v;
		else
			return -EINVAL;
	}
	return argc % 2 == 1 && a->rows ? 0 : -EINVAL;
}

/* --dims "D,D*N,..." into job (dim: the largest). 0 or -EINVAL. */
static int parse_dims(const char *text, struct esd_job *job)
{
	char *s = strdup(text), *save = NULL;
	uint32_t n = 0, dmax = 0;
	for (char *tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *star = strchr(tok, '*');
		unsigned d = (unsigned)atoi(tok), copies = star ? (unsigned)atoi(star + 1) : 1;
		for (unsigned c = 0; c < copies && n < ESD_JOB_MAX_DIMS && d; c++)
			job->table_dims[n++] = d;
		dmax = d > dmax ? d : dmax;
	}
	free(s);
	job->ntable_dims = n;
	job->dim = dmax;
	return n && dmax ? 0 : -EINVAL;
}

/* Resident bytes of this process. */
static uint64_t rss_bytes(void)
{
	unsigned long size = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (f) {
		if (fscanf(f, "%lu %lu", &size, &res) != 2)
			res = 0;
		fclose(f);
	}
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* rows rows spread over the tables (row i of table i % T). */
static int fill(struct ps_store *st, uint32_t tables, uint64_t rows)
{
	for (uint64_t i = 0; i < rows; i++)
		if (!ps_store_get(st, esd_key_make((uint32_t)(i % tables), i / tables)))
			return -ENOMEM;
	return 0;
}

/* st as the checkpoint a shard writes (each row at the store's dim for
 * it); the file's bytes, or 0. */
static uint64_t write_ckpt(struct ps_store *st, const struct esd_job *job, bool per_table,
                           const char *path)
{
	struct esd_ckpt_meta m = {.seed = job->seed,
	                          .dim = job->dim,
	                          .optimizer = job->optim.opt,
	                          .nshards = 1,
	                          .ntables = per_table ? job->ntable_dims : 0,
	                          .table_dims = job->table_dims};
	struct esd_ckpt_writer *w;
	if (esd_ckpt_writer_open(path, &m, &w))
		return 0;
	const size_t sd = ps_store_state_len(st);
	int rc = 0;
	for (size_t i = 0; i < ps_store_count(st) && !rc; i++) {
		struct ps_row *r = ps_store_at(st, i);
		const unsigned d = ps_store_key_dim(st, r->key);
		rc = esd_ckpt_write_row_packed(w, r->key, r->clock, r->data,
		                               sd ? r->data + d : NULL);
	}
	if (rc) {
		esd_ckpt_writer_abort(w);
		return 0;
	}
	struct stat sb;
	if (esd_ckpt_writer_commit(w) || stat(path, &sb))
		return 0;
	unlink(path);
	return (uint64_t)sb.st_size;
}

struct figures {
	uint64_t store, rss, ckpt;
};

/* One store of job (per_table: its model.dims; else every table at dim):
 * filled, measured, written, freed. */
static int measure(const struct esd_job *dims_job, bool per_table, const struct args *a,
                   struct figures *f)
{
	struct esd_job job = *dims_job;
	if (!per_table)
		job.ntable_dims = 0;
	struct ps_store *st;
	uint64_t before = rss_bytes();
	if (ps_store_create_job(&job, 0, &st) || fill(st, dims_job->ntable_dims, a->rows))
		return 1;
	f->rss = rss_bytes() - before;
	f->store = ps_store_resident_bytes(st);
	char path[1100];
	snprintf(path, sizeof(path), "%s/bench_store_dims.%d.ckpt", a->dir, (int)getpid());
	f->ckpt = write_ckpt(st, dims_job, per_table, path);
	ps_store_free(st);
	return f->ckpt ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct args a;
	struct esd_job job;
	memset(&job, 0, sizeof(job));
	if (parse(argc, argv, &a) || parse_dims(a.dims, &job)) {
		fprintf(stderr, "usage: bench_store_dims [--rows N] [--dims D,D*N,...] "
		                "[--opt sgd|adagrad|adam] [--dir DIR]\n");
		return 2;
	}
	job.seed = 1;
	enum esd_optimizer opt = !strcmp(a.opt, "sgd")    ? ESD_OPT_SGD
	                         : !strcmp(a.opt, "adam") ? ESD_OPT_ADAM
	                                                  : ESD_OPT_ADAGRAD;
	esd_optim_params_default(&job.optim, opt);
	struct figures pad, per;
	/* padded first: the per-table store then reuses none of its pages */
	if (measure(&job, false, &a, &pad) || measure(&job, true, &a, &per)) {
		fprintf(stderr, "bench_store_dims: a store or its checkpoint in %s failed\n",
		        a.dir);
		return 1;
	}
	printf("bench_store_dims: %llu rows over %u tables, model.dims %s (dim %u), %s\n",
	       (unsigned long long)a.rows, job.ntable_dims, a.dims, job.dim, esd_optim_name(opt));
	printf("%-10s %14s %14s %14s\n", "", "store bytes", "rss added", "checkpoint");
	printf("%-10s %14llu %14llu %14llu\n", "padded", (unsigned long long)pad.store,
	       (unsigned long long)pad.rss, (unsigned long long)pad.ckpt);
	printf("%-10s %14llu %14llu %14llu\n", "per-table", (unsigned long long)per.store,
	       (unsigned long long)per.rss, (unsigned long long)per.ckpt);
	printf("per-table / padded: store %.3f, rss %.3f, checkpoint %.3f\n",
	       (double)per.store / (double)pad.store, (double)per.rss / (double)pad.rss,
	       (double)per.ckpt / (double)pad.ckpt);
	return 0;
}
