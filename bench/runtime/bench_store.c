/*
 * A PS shard's row store in RAM against the same store on disk
 * (ps.store_dir, ps.store_ram a quarter of the table), side by side in one
 * run: --rows rows are created first (not timed, in a shuffled order, so
 * hot rows are scattered over the file), then each round serves
 * --iters iterations of --batch keys drawn from a Zipf(--zipf) stream over
 * them: a pull (the row read, as the shard encodes it), a gradient staged
 * per key and the barrier's apply. Prints rows/s of each round and the
 * medians, and the ratio disk / RAM.
 *
 * --limit-mb L runs the disk store in a child process inside a memory
 * cgroup of its own (v2 memory.max or v1 memory.limit_in_bytes) limited to
 * L MiB (0: a quarter of the table), the RAM store in this process outside
 * it; rounds still alternate (the child runs its round while this process
 * waits). Exits 77 when no memory cgroup can be made.
 *
 * Usage: bench_store [--rows N] [--dim D] [--batch B] [--iters I]
 *                    [--rounds R] [--zipf S] [--dir DIR] [--ram-mb M]
 *                    [--limit-mb L]
 */
#include "../../runtime/ps/store.h"
#include "zipf_keys.h"

#include <esd/clock.h>
#include <esd/job.h>
#include <esd/optim.h>
#include <esd/types.h>

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

struct args {
	uint64_t rows, ram_mb;
	long long limit_mb; /* -1: no cgroup */
	unsigned dim, batch, iters, rounds;
	double zipf;
	const char *dir;
};

static int parse(int argc, char **argv, struct args *a)
{
	*a = (struct args){.rows = 2000000, .dim = 16, .batch = 4096, .iters = 100,
			   .rounds = 5, .zipf = 1.2, .dir = "/var/tmp", .limit_mb = -1};
	for (int i = 1; i + 1 < argc; i += 2) {
		const char *k = argv[i], *v = argv[i + 1];
		if (!strcmp(k, "--rows"))
			a->rows = strtoull(v, NULL, 10);
		else if (!strcmp(k, "--dim"))
			a->dim = (unsigned)atoi(v);
		else if (!strcmp(k, "--batch"))
			a->batch = (unsigned)atoi(v);
		else if (!strcmp(k, "--iters"))
			a->iters = (unsigned)atoi(v);
		else if (!strcmp(k, "--rounds"))
			a->rounds = (unsigned)atoi(v);
		else if (!strcmp(k, "--zipf"))
			a->zipf = atof(v);
		else if (!strcmp(k, "--dir"))
			a->dir = v;
		else if (!strcmp(k, "--ram-mb"))
			a->ram_mb = strtoull(v, NULL, 10);
		else if (!strcmp(k, "--limit-mb"))
			a->limit_mb = atoll(v);
		else
			return -1;
	}
	return a->rows && a->dim && a->batch && a->iters && a->rounds && a->zipf > 0 ? 0 : -1;
}

/* The Zipf stream: rank r (0 hottest) with probability ~ 1 / (r + 1)^s,
 * drawn by binary search in the cumulative table. */
/* Every row, created in a shuffled rank order. */
static int fill(struct ps_store *st, uint64_t n)
{
	uint64_t *perm = malloc(n * sizeof(*perm)), rng = 99;
	if (!perm)
		return -1;
	for (uint64_t i = 0; i < n; i++)
		perm[i] = i;
	for (uint64_t i = n - 1; i > 0; i--) {
		uint64_t j = esd_splitmix64(++rng) % (i + 1), t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	for (uint64_t i = 0; i < n; i++)
		if (!ps_store_get(st, key_of(perm[i]))) {
			free(perm);
			return -1;
		}
	free(perm);
	return 0;
}

/* One round: rows per second of pull + stage + apply. */
static double round_rate(struct ps_store *st, const struct args *a, const double *cdf,
			 uint64_t seed)
{
	float *out = malloc((size_t)a->dim * 4 * sizeof(float)), *g = calloc(a->dim, sizeof(float));
	uint64_t rng = seed, done = 0;
	double sink = 0;
	for (unsigned d = 0; d < a->dim; d++)
		g[d] = 0.01f;
	int64_t t0 = esd_now_ns();
	for (unsigned it = 0; it < a->iters; it++) {
		for (unsigned b = 0; b < a->batch; b++) {
			uint64_t key = key_of(zipf_draw(cdf, a->rows, &rng));
			struct ps_row *r = ps_store_get(st, key);
			memcpy(out, r->data, a->dim * sizeof(float));
			sink += out[0];
			ps_store_stage_grad(st, b, key, g); /* worker b: no duplicate refusal */
			done++;
		}
		ps_store_apply_staged(st);
	}
	double secs = (double)(esd_now_ns() - t0) / 1e9;
	free(out);
	free(g);
	return sink == 12345.678 ? 0 : (double)done / secs;
}

static int cmp_d(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return (a > b) - (a < b);
}

static double median(double *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- the disk store in a memory cgroup ---------------------------------- */

static int put_file(const char *dir, const char *f, const char *v)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/%s", dir, f);
	FILE *fp = fopen(p, "w");
	if (!fp)
		return -errno;
	int ok = fputs(v, fp) >= 0;
	return fclose(fp) == 0 && ok ? 0 : -EIO;
}

/* A child memory cgroup limited to bytes, in path; -errno when none. */
static int make_cgroup(uint64_t bytes, char *path, size_t len)
{
	char lim[32], ctl[256] = "";
	FILE *fp = fopen("/sys/fs/cgroup/cgroup.controllers", "r");
	snprintf(lim, sizeof(lim), "%llu", (unsigned long long)bytes);
	if (fp) {
		if (!fgets(ctl, sizeof(ctl), fp))
			ctl[0] = 0;
		fclose(fp);
		if (!strstr(ctl, "memory"))
			return -ENOTSUP;
		snprintf(path, len, "/sys/fs/cgroup/esd-bench-store-%d", (int)getpid());
		if (mkdir(path, 0755))
			return -errno;
		put_file(path, "memory.swap.max", "0");
		return put_file(path, "memory.max", lim);
	}
	snprintf(path, len, "/sys/fs/cgroup/memory/esd-bench-store-%d", (int)getpid());
	if (mkdir(path, 0755))
		return -errno;
	return put_file(path, "memory.limit_in_bytes", lim);
}

/* The peak bytes the cgroup was charged (-1 unknown). */
static long long cgroup_peak(const char *path)
{
	char p[512];
	long long v = -1;
	snprintf(p, sizeof(p), "%s/memory.peak", path);
	FILE *fp = fopen(p, "r");
	if (!fp) {
		snprintf(p, sizeof(p), "%s/memory.max_usage_in_bytes", path);
		fp = fopen(p, "r");
	}
	if (fp) {
		if (fscanf(fp, "%lld", &v) != 1)
			v = -1;
		fclose(fp);
	}
	return v;
}

/* The child: fill the disk store, then one round per byte read from in,
 * its rate written to out. */
static int disk_child(struct esd_job *job, const struct args *a, const double *cdf, int in,
		      int out)
{
	struct ps_store *disk;
	char c;
	if (ps_store_create_job(job, 0, &disk) || fill(disk, a->rows))
		return 1;
	double ready = 0;
	if (write(out, &ready, sizeof(ready)) != sizeof(ready))
		return 1;
	for (unsigned r = 0; read(in, &c, 1) == 1 && r < a->rounds; r++) {
		double rate = round_rate(disk, a, cdf, 1000 + r);
		if (write(out, &rate, sizeof(rate)) != sizeof(rate))
			return 1;
	}
	ps_store_free(disk);
	return 0;
}

struct child {
	pid_t pid;
	int to, from; /* pipe ends: go, rates */
	char cg[256];
};

static int end_child(struct child *ch)
{
	int status = 0;
	if (ch->to >= 0)
		close(ch->to);
	if (ch->from >= 0)
		close(ch->from);
	if (ch->pid > 0)
		waitpid(ch->pid, &status, 0);
	for (int i = 0; i < 50 && rmdir(ch->cg) && errno == EBUSY; i++)
		usleep(100000);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* A failed start: say what failed, stop the child if there is one and
 * remove the cgroup; 1. */
static int drop_child(struct child *ch, const char *what)
{
	fprintf(stderr, "bench_store: %s failed for the disk store's child%s%s\n", what,
		errno ? ": " : "", errno ? strerror(errno) : "");
	if (ch->pid > 0)
		kill(ch->pid, SIGKILL);
	end_child(ch);
	return 1;
}

/* Start the disk store's child inside a new memory cgroup of limit bytes;
 * 0, or 77 when no cgroup can be made, 1 on other failures. */
static int start_child(struct child *ch, struct esd_job *job, const struct args *a,
		       const double *cdf, uint64_t limit)
{
	int go[2], back[2];
	int rc = make_cgroup(limit, ch->cg, sizeof(ch->cg));
	if (rc) {
		printf("SKIP: cannot make a memory cgroup (%s): needs root and the memory "
		       "controller\n", strerror(-rc));
		rmdir(ch->cg);
		return 77;
	}
	ch->pid = -1;
	ch->to = ch->from = -1;
	if (pipe(go))
		return drop_child(ch, "pipe");
	if (pipe(back)) {
		close(go[0]);
		close(go[1]);
		return drop_child(ch, "pipe");
	}
	ch->pid = fork();
	if (ch->pid < 0) {
		close(go[0]);
		close(go[1]);
		close(back[0]);
		close(back[1]);
		return drop_child(ch, "fork");
	}
	if (ch->pid == 0) {
		char c;
		close(go[1]);
		close(back[0]);
		/* joined by the parent before the first byte comes */
		if (read(go[0], &c, 1) != 1)
			_exit(1);
		_exit(disk_child(job, a, cdf, go[0], back[1]));
	}
	close(go[0]);
	close(back[1]);
	ch->to = go[1];
	ch->from = back[0];
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", (int)ch->pid);
	double ready;
	if (put_file(ch->cg, "cgroup.procs", pid))
		return drop_child(ch, "joining the cgroup");
	errno = 0;
	if (write(ch->to, "g", 1) != 1 || read(ch->from, &ready, sizeof(ready)) != sizeof(ready))
		return drop_child(ch, "the start (out of memory in its cgroup?)");
	return 0;
}

/* The child's next round (-1 when it died: the cgroup's OOM killer). */
static double child_round(struct child *ch)
{
	double rate;
	if (write(ch->to, "r", 1) != 1 || read(ch->from, &rate, sizeof(rate)) != sizeof(rate))
		return -1;
	return rate;
}

/* Long: argument checks, the two stores (one maybe in a child), the
 * alternating rounds and the summary, in order. */
int main(int argc, char **argv)
{
	struct args a;
	if (parse(argc, argv, &a)) {
		fprintf(stderr, "usage: bench_store [--rows N] [--dim D] [--batch B] [--iters I] "
				"[--rounds R] [--zipf S] [--dir DIR] [--ram-mb M] [--limit-mb L]\n");
		return 2;
	}
	struct esd_job job;
	memset(&job, 0, sizeof(job));
	job.dim = a.dim;
	job.seed = 1;
	esd_optim_params_default(&job.optim, ESD_OPT_ADAGRAD);
	struct ps_store *ram, *disk = NULL;
	struct child ch = {0};
	if (ps_store_create_job(&job, 0, &ram))
		return 1;
	snprintf(job.store_dir, sizeof(job.store_dir), "%s", a.dir);
	size_t rec = 16 + (size_t)a.dim * 2 * sizeof(float);
	rec = (rec + 63) & ~(size_t)63;
	double table_mb = (double)a.rows * (double)rec / (1 << 20);
	uint64_t limit_mb = a.limit_mb > 0 ? (uint64_t)a.limit_mb : (uint64_t)(table_mb / 4);
	job.store_ram_mb = a.ram_mb ? a.ram_mb : (uint64_t)(table_mb / 4);
	double *cdf = zipf_cdf(a.rows, a.zipf);
	if (!cdf)
		return 1;
	if (a.limit_mb >= 0) {
		int rc = start_child(&ch, &job, &a, cdf, limit_mb << 20);
		if (rc)
			return rc;
	} else if (ps_store_create_job(&job, 0, &disk) || fill(disk, a.rows)) {
		return 1;
	}
	if (fill(ram, a.rows)) {
		if (a.limit_mb >= 0) {
			kill(ch.pid, SIGKILL);
			end_child(&ch);
		}
		return 1;
	}
	printf("bench_store: %llu rows of dim %u (adagrad), %.0f MiB; disk store in %s with "
	       "ps.store_ram = %llu MiB", (unsigned long long)a.rows, a.dim, table_mb, a.dir,
	       (unsigned long long)job.store_ram_mb);
	if (a.limit_mb >= 0)
		printf(" in a memory cgroup of %llu MiB", (unsigned long long)limit_mb);
	printf("; Zipf %.2f, %u iterations of %u keys a round\n", a.zipf, a.iters, a.batch);
	double *rr = calloc(a.rounds, sizeof(double)), *rd = calloc(a.rounds, sizeof(double));
	for (unsigned r = 0; r < a.rounds; r++) {
		rr[r] = round_rate(ram, &a, cdf, 1000 + r);
		rd[r] = disk ? round_rate(disk, &a, cdf, 1000 + r) : child_round(&ch);
		if (rd[r] < 0) {
			fprintf(stderr, "bench_store: the disk store's process died in round %u "
					"(out of memory in its cgroup?)\n", r);
			end_child(&ch);
			return 1;
		}
		printf("round %u: ram %.0f rows/s, disk %.0f rows/s\n", r, rr[r], rd[r]);
	}
	double mr = median(rr, a.rounds), md = median(rd, a.rounds);
	printf("median: ram %.0f rows/s, disk %.0f rows/s, disk/ram %.2f\n", mr, md, md / mr);
	if (!disk) {
		long long peak = cgroup_peak(ch.cg);
		int rc = end_child(&ch);
		printf("disk store's cgroup: limit %llu MiB, peak %.1f MiB, child exit %d\n",
		       (unsigned long long)limit_mb, peak < 0 ? -1.0 : (double)peak / (1 << 20), rc);
		if (rc)
			return 1;
	}
	ps_store_free(ram);
	ps_store_free(disk);
	free(cdf);
	free(rr);
	free(rd);
	return 0;
}
