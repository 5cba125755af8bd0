/*
 * The runtime's pull, as esdd makes it, against a real esd-ps: a client
 * that joins the job as worker 0 (the job's key, token and stream digest,
 * as runtime/node/links.c does) and times
 *   - batch pulls: PULL of --rows keys, until every row of the answer
 *     arrived, back to back for --seconds: rows per second;
 *   - one-row pulls: the round trip of a PULL of one key, --pings times:
 *     median and 99th percentile.
 * Prints one line of figures (key = value) for bench/runtime/bench_pull.py,
 * which starts the shards (tcp and dpdk memif) and prints them side by side.
 *
 * Usage: bench_pull --config JOB.ini --addr ADDR [--rows N] [--seconds S]
 *                   [--pings N]
 */
#include <esd/auth.h>
#include <esd/clock.h>
#include <esd/config.h>
#include <esd/dataset.h>
#include <esd/err.h>
#include <esd/job.h>
#include <esd/job_link.h>
#include <esd/log.h>
#include <esd/optim.h>
#include <esd/transport.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct args {
	const char *config, *addr;
	uint32_t rows, pings;
	double seconds;
};

static int parse(int argc, char **argv, struct args *a)
{
	*a = (struct args){.rows = 1024, .pings = 2000, .seconds = 3};
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--config"))
			a->config = argv[i + 1];
		else if (!strcmp(argv[i], "--addr"))
			a->addr = argv[i + 1];
		else if (!strcmp(argv[i], "--rows"))
			a->rows = (uint32_t)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--pings"))
			a->pings = (uint32_t)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--seconds"))
			a->seconds = atof(argv[i + 1]);
		else
			return -1;
	}
	return a->config && a->addr && a->rows && a->pings ? 0 : -1;
}

/* The job as esdd loads it: settings, the stream's digest, the key. */
static int load_job(const char *path, struct esd_job *job, struct esd_key *key)
{
	struct esd_config *cfg;
	struct esd_ds_reader *dr;
	uint64_t digest;
	if (esd_config_create(&cfg) || esd_config_load(cfg, path) ||
	    esd_job_from_config(cfg, job))
		return -1;
	esd_config_free(cfg);
	if (esd_ds_open(job->stream, &dr) || esd_ds_digest(dr, &digest)) {
		fprintf(stderr, "bench_pull: stream %s: %s\n", job->stream, esd_ds_last_error());
		return -1;
	}
	esd_ds_close(dr);
	esd_job_bind_stream(job, digest);
	return job->key_file[0] && esd_key_load(job->key_file, key) ? -1 : 0;
}

static int join(const struct esd_job *job, const struct esd_key *key, const char *addr,
		struct esd_link **l)
{
	struct esd_link_opts o;
	struct esd_buf b;
	struct esd_msg m;
	esd_link_opts_init(&o);
	esd_job_link_opts(job, 0, &o); /* the job's port, MTU and rings */
	if (!o.addr) /* set for af_packet and PCI ports only */
		o.addr = addr;
	o.key = job->key_file[0] ? key : NULL;
	o.timeout_ns = 10 * ESD_NS_PER_S;
	int rc = esd_link_connect(&o, l);
	if (rc)
		return rc;
	struct esd_hello h = {
	    .proto_version = ESD_PROTO_VERSION, .worker = 0, .job_token = job->derived.token,
	    .dim = job->dim,
	    .state_dim = (uint32_t)esd_optim_state_len(job->optim.opt, job->dim),
	    .nworkers = job->n, .stream_digest = job->derived.stream_digest};
	esd_buf_init(&b);
	if (!(rc = esd_enc_hello(&b, &h, 0)))
		rc = esd_link_send(*l, b.data, b.len);
	for (int want = 2; !rc && want > 0; want--) /* HELLO reply, then ACK */
		if (!(rc = esd_link_recv(*l, &m, 10 * ESD_NS_PER_S)) && m.hdr.op != ESD_OP_HELLO &&
		    m.hdr.op != ESD_OP_ACK)
			rc = -EPROTO;
	esd_buf_free(&b);
	return rc;
}

/* One PULL of n keys (from first) and its whole answer. */
static int pull(struct esd_link *l, struct esd_buf *b, const esd_key_t *keys, uint32_t n,
		uint64_t req)
{
	struct esd_msg m;
	esd_buf_reset(b);
	int rc = esd_enc_pull(b, 0, req, 0, keys, n); /* iteration 0: released at once */
	if (!rc)
		rc = esd_link_send(l, b->data, b->len);
	for (uint32_t got = 0; !rc && got < n; got += m.u.rows.count) {
		if ((rc = esd_link_recv(l, &m, 10 * ESD_NS_PER_S)))
			break;
		if (m.hdr.op == ESD_OP_ERROR)
			fprintf(stderr, "bench_pull: the shard says: %.*s\n", (int)m.u.error.len,
				m.u.error.text);
		if (m.hdr.op != ESD_OP_PULL_RESP) {
			fprintf(stderr, "bench_pull: %s where PULL_RESP was due\n",
				esd_op_name(m.hdr.op));
			rc = -EPROTO;
		}
	}
	return rc;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	struct args a;
	struct esd_job job;
	struct esd_key key;
	struct esd_link *l;
	struct esd_buf b;
	esd_log_init("bench_pull");
	if (parse(argc, argv, &a)) {
		fprintf(stderr, "usage: bench_pull --config JOB.ini --addr ADDR [--rows N] "
				"[--seconds S] [--pings N]\n");
		return 2;
	}
	if (load_job(a.config, &job, &key))
		return 2;
	int rc = join(&job, &key, a.addr, &l);
	if (rc) {
		fprintf(stderr, "bench_pull: joining %s: %s\n", a.addr, esd_strerror(rc));
		return 1;
	}
	esd_key_t *keys = calloc(a.rows, sizeof(*keys));
	int64_t *rtt = calloc(a.pings, sizeof(*rtt));
	for (uint32_t i = 0; i < a.rows; i++)
		keys[i] = esd_key_make(0, i);
	esd_buf_init(&b);
	uint64_t req = 0, rows = 0, batches;
	int64_t t0 = esd_now_ns(), end = t0 + (int64_t)(a.seconds * 1e9);
	while (!rc && esd_now_ns() < end) {
		rc = pull(l, &b, keys, a.rows, ++req);
		rows += a.rows;
	}
	double secs = (double)(esd_now_ns() - t0) / 1e9;
	batches = req;
	for (uint32_t i = 0; !rc && i < a.pings; i++) {
		int64_t s = esd_now_ns();
		rc = pull(l, &b, keys + i % a.rows, 1, ++req);
		rtt[i] = esd_now_ns() - s;
	}
	if (rc) {
		fprintf(stderr, "bench_pull: %s: %s\n", a.addr, esd_strerror(rc));
		return 1;
	}
	qsort(rtt, a.pings, sizeof(*rtt), cmp_i64);
	struct esd_link_stats st;
	esd_link_stats(l, &st);
	printf("backend=%s keyed=%d rows_per_s=%.0f batch_ms=%.3f rtt_us_p50=%.1f "
	       "rtt_us_p99=%.1f retx=%llu\n",
	       job.backend, job.key_file[0] != 0, (double)rows / secs, secs * 1e3 / (double)batches,
	       (double)rtt[a.pings / 2] / 1e3, (double)rtt[a.pings * 99 / 100] / 1e3,
	       (unsigned long long)st.retx_frames);
	esd_link_close(l);
	esd_buf_free(&b);
	free(keys);
	free(rtt);
	return 0;
}
