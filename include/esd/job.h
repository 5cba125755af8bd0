/*
 * esd/job.h - the settings of one training job, shared by every process.
 *
 * A job is described by one INI file that every process of the job reads
 * (esd-ps, each esdd, the testbed, esd-replay), plus per-process overrides
 * on the command line (--set node.rank=3). Everything that must be equal
 * on all nodes for their dispatchers to agree lives here; a digest of it
 * (esd_job_digest) is exchanged in HELLO so a node started with different
 * settings is refused at once instead of diverging later.
 *
 *   [job]      seed, iterations, warmup, key (the job key file, esd/auth.h)
 *   [workers]  n, batch (m per worker, or a list m_0,m_1,..), rates
 *              (per-worker link rates, a list, "5G,5G,0.5G,.." or one value
 *              for all), compute_ns_per_sample (emulated compute), split
 *              (equal, link-aware: the sum of batch re-split by
 *              esd_batch_sizes_link_aware with size_model = FIXED,PER_SAMPLE,
 *              or fit: the model fitted online), refit_threshold,
 *              link_rates (the links' shaping when not the model's rates),
 *              estimate_rates, estimate_tolerance (rates measured by the nodes)
 *   [model]    dim, optimizer, lr, eps, beta1, beta2, hidden, dense (dense
 *              features per sample)
 *   [cache]    ratio (fraction of all rows) or rows (absolute), policy
 *   [dispatch] method, alpha, sync (on-demand, full-set, het), staleness,
 *              matrix (paper or shared: esd/dispatch_quality.h),
 *              local_search (candidate swaps per step on the true cost),
 *              replicate (hot-row file: rows every worker holds, FAE),
 *              gpu (exact part on the GPU), gpu_deadline_us
 *   [data]     stream (path of the dataset stream)
 *   [ps]       shards, addrs (list, one per shard), backend, checkpoint_dir,
 *              checkpoint_every; the backend's own keys: dpdk_eal, dpdk_port,
 *              dpdk_mtu, dpdk_queue, dpdk_shard_macs, dpdk_worker_macs
 *              (ps.backend = dpdk), rdma_device, rdma_port, rdma_gid_index
 *              (ps.backend = rdma). They may differ from host to host (each
 *              host's NIC) and are not in the token.
 * Every key, with its type, default and bounds, is a line of
 * runtime/job/settings.def (esd/job_settings.h, `esd-info --settings`);
 * docs/configuration.md says what each does.
 */
#ifndef ESD_JOB_H
#define ESD_JOB_H

#include <stdbool.h>
#include <stdint.h>
#include <esd/config.h>
#include <esd/dispatch.h>
#include <esd/dispatch_quality.h>
#include <esd/optim.h>
#include <esd/policy.h>
#include <esd/types.h>

#ifdef __cplusplus
extern "C" {
#endif


/* A job that names no dispatch.method runs the project's method: opt on
 * the shared-charge matrix with ESD_JOB_DEFAULT_SWAPS local-search swaps
 * per step up to ESD_JOB_EXACT_MAX_WORKERS workers; above, where the
 * exact solve alone takes several times the step's budget, laia with
 * ESD_JOB_WIDE_SWAPS / n swaps; and, with one workers.batch value, sizes
 * fitted online (workers.split = fit). The swaps are meant for samples of
 * ESD_JOB_LS_REF_KEYS keys (Criteo's 26 features); on a batch whose
 * samples carry more (bags) the step scales them down in proportion, as
 * each swap's evaluation grows with its samples' keys. A method named
 * runs as published: paper matrix, no local search, equal sizes, unless
 * those keys say otherwise (docs/quality.md). */
#define ESD_JOB_DEFAULT_METHOD    "opt"
#define ESD_JOB_DEFAULT_SWAPS     2048
#define ESD_JOB_EXACT_MAX_WORKERS 16
#define ESD_JOB_WIDE_METHOD       "laia"
#define ESD_JOB_WIDE_SWAPS        32768
#define ESD_JOB_LS_REF_KEYS       26

/* dispatch.gpu_min_rows = measure */
#define ESD_JOB_GPU_MEASURE UINT64_MAX
#define ESD_JOB_MAX_SHARDS 16
/* most tables model.dims may list */
#define ESD_JOB_MAX_DIMS   1024
#define ESD_JOB_ADDR_LEN   128

/* ps.dpdk_port: what a dpdk link runs on */
enum esd_job_port {
	ESD_JOB_PORT_MEMIF,     /* net_memif: processes of one host (the default) */
	ESD_JOB_PORT_AF_PACKET, /* net_af_packet on a Linux interface (dpdk_dev) */
	ESD_JOB_PORT_PCI,       /* a NIC bound to a DPDK driver (dpdk_dev: DDDD:BB:DD.F) */
};

/* The values derived from a job's settings (esd_job_from_config computes
 * them after reading the settings), or set later by the process. */
struct esd_job_derived {
	/* k: the sum of batch[] */
	uint64_t global_batch;
	/* a live workers.rates change reshapes the links too (neither
	 * workers.link_rates nor workers.estimate_rates set) */
	bool shape_follows_model;
	/* node 0 decides for every node and shard 0 relays each node its
	 * part (ORDER frames): more than one worker, dispatch.every_node off
	 * and no shard restarts (a rollback would need orders in flight
	 * recalled) */
	bool one_decider;
	/* workers.split is link-aware or fit: batch[] is re-split from the
	 * rates; split_fit: fit */
	bool split_link_aware, split_fit;
	/* the split's model: workers.size_model, then what the fit measured;
	 * its compute time per sample starts at compute_ns_per_sample */
	double size_fixed_rows, size_rows_per_sample, size_compute_ns;
	/* workers.split = fit with no workers.size_model: the model to start
	 * from is the prior of esd_job_fit_prior (size_prior: applied) */
	bool size_prior_due, size_prior;
	/* the most samples one cache holds beside the hot rows (0: no limit):
	 * set by each process once it has resolved the cache size (the same
	 * way everywhere), so that a live re-split (esd_job_resplit) never
	 * gives a worker more keys than its cache takes */
	uint32_t max_batch;
	/* the default method's swaps are scaled to samples of this many keys
	 * (ESD_JOB_LS_REF_KEYS); 0: a fixed budget */
	uint32_t ls_ref_keys;
	/* esd_job_digest as loaded, before a process resolves its cache's
	 * size, with the stream's digest folded in by esd_job_bind_stream:
	 * what HELLO carries */
	uint64_t token;
	/* esd_ds_digest of data.stream, 0 until bound */
	uint64_t stream_digest;
};

/* The settings of a job (the fields named after their keys: the table
 * is runtime/job/settings.def, esd/job_settings.h), then what is derived
 * from them. */
struct esd_job {
	/* [job] */
	uint64_t seed;
	uint64_t iterations;
	uint64_t warmup;
	/* job.key: the job key file (esd/auth.h); "": links unauthenticated.
	 * Not in the token: each host may keep it where it likes. */
	char key_file[1024];
	/* job.insecure: the job runs without a key, said in so many words;
	 * a shard or daemon without job.key refuses to start unless it is
	 * set, and every process of such a job warns at start */
	bool insecure;
	/* [workers] */
	uint32_t n;
	/* workers.batch: m_j, as set or as the split made them (esd_job_resplit) */
	uint32_t batch[ESD_MAX_WORKERS];
	uint64_t rate_bps[ESD_MAX_WORKERS]; /* the cost model's link rates */
	/* workers.link_rates: the rates the links are shaped at (node sends
	 * and the PS's replies), when they are not the model's (an emulated
	 * link whose real rate the model does not know); = rate_bps when
	 * unset. */
	uint64_t link_bps[ESD_MAX_WORKERS];
	/* workers.estimate_rates: every node estimates its link's rate from
	 * its timed pull phases (esd_rate_est) and reports it to shard 0 when
	 * it is off the model's by more than workers.estimate_tolerance */
	bool estimate_rates;
	double estimate_tolerance;
	/* workers.split: equal; link-aware, with workers.size_model =
	 * FIXED,PER_SAMPLE (size_model[]): batch[] is re-split from the
	 * rates (esd_job_resplit); fit (the default of the default method): a
	 * link-aware split whose model shard 0 fits online from what the
	 * nodes measure (esd_size_fit), switched in when the predicted
	 * iteration shortens by more than workers.refit_threshold */
	enum esd_job_split {
		ESD_JOB_SPLIT_EQUAL,
		ESD_JOB_SPLIT_LINK_AWARE,
		ESD_JOB_SPLIT_FIT
	} split;
	double size_model[2];
	double refit_threshold;
	uint64_t compute_ns_per_sample;
	/* workers.trainers: training processes per node (one per GPU, say),
	 * each given a share of the node's micro-batch */
	uint32_t trainers;
	/* [model] */
	uint32_t dim; /* model.dim, or the largest of model.dims: a row's floats */
	/* model.dims: each table's dim (a row of table t uses its first
	 * table_dims[t] of dim floats, the rest zero; docs/design.md §6);
	 * ntable_dims 0 when unset (every table has dim): esd_job_table_dim */
	uint32_t ntable_dims;
	uint32_t table_dims[ESD_JOB_MAX_DIMS];
	uint32_t hidden;
	uint32_t dense; /* dense features per sample */
	struct esd_optim_params optim;
	/* [cache] */
	double cache_ratio;
	/* cache.rows as set; a process that resolves the cache's size from
	 * the ratio writes what it resolved here */
	uint64_t cache_rows;
	enum esd_policy policy;
	/* [dispatch] */
	char method[32];
	double alpha;
	enum esd_sync sync; /* on-demand, or full-set (also for het) */
	bool het;           /* "het": full-set with a staleness bound */
	uint32_t staleness;
	bool compare; /* also solve heu and opt every step (heu-vs-opt gap) */
	bool every_node; /* dispatch.every_node: every node decides (else one decider) */
	enum esd_matrix matrix; /* dispatch.matrix: paper (default) or shared */
	uint64_t local_search;  /* dispatch.local_search: swaps per step, 0: off */
	/* dispatch.replicate: a hot-row file (esd-data hot) whose rows every
	 * worker holds and all-reduces each iteration (FAE); "" for none */
	char replicate[1024];
	/* dispatch.gpu: the exact part (opt, hybrid) on the persistent CUDA
	 * solver (esd/gpu.h), CPU when there is no device or it is late;
	 * dispatch.gpu_deadline_us: the longest wait per solve (50000);
	 * dispatch.gpu_min_rows: the cross-over, the fewest rows the GPU gets
	 * ("measure": esd_gpu_calibrate at start, the default; a number: that,
	 * 0 sends every size) -> gpu_min_rows, ESD_JOB_GPU_MEASURE for measure */
	bool gpu;
	uint64_t gpu_deadline_us;
	uint64_t gpu_min_rows;
	uint64_t gpu_blocks; /* dispatch.gpu_blocks: resident solver blocks, 0: one per SM */
	/* [data] */
	char stream[1024];
	/* [ps] */
	uint32_t shards;
	char addrs[ESD_JOB_MAX_SHARDS][ESD_JOB_ADDR_LEN];
	char backend[16];
	/* ps.backend = dpdk. dpdk_eal: the EAL arguments ("": the transport's
	 * default for memif and af_packet; for a PCI port, when unset,
	 * "--in-memory -a <dpdk_dev> ..."). dpdk_mtu: frame bytes per packet,
	 * dpdk_queue: descriptors per ring (0: the transport's defaults).
	 * shard_macs / worker_macs: the peers' MAC addresses of an af_packet
	 * or PCI port (ps.dpdk_shard_macs, ps.dpdk_worker_macs), each list
	 * all or nothing; without them the links learn them (docs/configuration.md). */
	char dpdk_eal[512];
	enum esd_job_port dpdk_port;
	char dpdk_dev[ESD_JOB_ADDR_LEN];
	uint32_t dpdk_mtu;
	uint32_t dpdk_queue;
	bool have_shard_macs, have_worker_macs;
	uint8_t shard_macs[ESD_JOB_MAX_SHARDS][6];
	uint8_t worker_macs[ESD_MAX_WORKERS][6];
	/* ps.backend = rdma: the device ("": the first), its port (1..) and
	 * the GID index (-1: none, InfiniBand LID routing) */
	char rdma_device[64];
	uint32_t rdma_port;
	int32_t rdma_gid_index;
	/* ps.zero_copy: a node sends its cache's rows from the cache's pages
	 * (esd_link_sendv) instead of copying them into frames: auto (rdma
	 * only), on (every backend that can), off */
	enum esd_job_zero_copy { ESD_JOB_ZC_AUTO, ESD_JOB_ZC_ON, ESD_JOB_ZC_OFF } zero_copy;
	char checkpoint_dir[1024];
	uint64_t checkpoint_every;
	/* ps.warm_start: an export (tools/esd-export) a fresh job's shards
	 * load their rows from; "": rows from esd_row_init */
	char warm_start[1024];
	/* ps.resume_from: a checkpoint directory written by a job of this
	 * model with any shard and worker count; a job without its own
	 * checkpoint resumes from it (rows rehashed, node caches cold) */
	char resume_from[1024];
	/* ps.store_dir: a shard keeps its rows in a file there and at most
	 * ps.store_ram MiB of them mapped (hot); "": all in RAM */
	char store_dir[1024];
	uint64_t store_ram_mb;
	/* workers.checkpoint_dir: where each node writes its part of a
	 * checkpoint (its dispatcher's state); "": its node directory */
	char node_ckpt_dir[1024];
	/* ps.barrier_timeout: seconds a shard waits for a worker's barrier
	 * (a trainer that never comes back, a host gone) before it fails the
	 * job naming the missing workers */
	uint64_t barrier_timeout_s;
	/* Who replaces a process that dies (docs/runtime.md, "Failures").
	 * job.restart_trainers: something restarts a dead trainer (torchrun
	 * --max-restarts; esd-launch sets it); job.restart_shards: something
	 * restarts a dead shard from its checkpoint (esd-launch). Without it a
	 * death fails the job at once; with it the wait for the replacement
	 * is bounded by job.restart_wait seconds and logged with its end. */
	bool restart_trainers, restart_shards;
	uint64_t restart_wait_s;
	/* job.force_plan: start even where this process's part of the job's
	 * memory plan (esd/plan.h) does not fit the machine */
	bool force_plan;
	/* job.heartbeat_ms: a silent link or attach socket sends a heartbeat
	 * this often; job.peer_timeout_ms: a peer heard from not at all for
	 * this long is dead (a stopped process, a host gone). */
	uint64_t heartbeat_ms, peer_timeout_ms;
	/* What follows the settings: derived. */
	struct esd_job_derived derived;
};

/* Fill job from cfg (defaults for unset keys; every error logged naming
 * key and where it was set). Returns 0 or -EINVAL. Unknown keys in the
 * job sections are errors. */
int esd_job_from_config(const struct esd_config *cfg, struct esd_job *job);

/* Keys esd_job_from_config understands, NULL-terminated, for
 * esd_config_check_keys (programs append their own). */
extern const char *const esd_job_keys[];

/* Per-row transfer cost T_j in ns over worker j's link for a row of
 * 'bytes' bytes: ceil(bytes * 8 * 1e9 / rate); rate 0 (unshaped) costs 1. */
uint64_t esd_job_row_cost_ns(const struct esd_job *job, uint32_t worker, uint64_t bytes);

/* Bytes of one row on the wire when pulled or value-pushed (key, clock,
 * value and optimizer state). */
uint64_t esd_job_row_bytes(const struct esd_job *job);

/* Bytes of a row of table t on the wire (key, clock, its table's dim of
 * value and of each optimizer state block): esd_job_row_bytes() without
 * model.dims. */
uint64_t esd_job_table_row_bytes(const struct esd_job *job, uint32_t t);
/* The dispatcher's row sizes (esd_dispatcher_config.row_bytes): bytes[t]
 * = esd_job_table_row_bytes for each of model.dims' tables; returns their
 * count, 0 without model.dims (every row esd_job_row_bytes). */
uint32_t esd_job_dispatch_row_bytes(const struct esd_job *job, uint32_t *bytes);

/* Floats of table t's rows (model.dims, else model.dim): a row of the
 * table uses its first esd_job_table_dim of job->dim floats. */
static inline uint32_t esd_job_table_dim(const struct esd_job *job, uint32_t t)
{
	return job->ntable_dims && t < job->ntable_dims ? job->table_dims[t] : job->dim;
}

/* Check model.dims against the stream's table count (who: the process, for
 * the message). Returns 0 or -EINVAL, logged. */
int esd_job_check_tables(const struct esd_job *job, uint32_t tables, const char *who);

/* PS shard of a key among nshards: the fixed hash every process uses. */
uint32_t esd_shard_of(esd_key_t key, uint32_t nshards);

/* 64-bit digest of every setting that must agree across the job. */
uint64_t esd_job_digest(const struct esd_job *job);

/* The data every process trains on is part of the job: record the digest
 * of data.stream (esd_ds_digest) and fold it into the token. Every
 * process that opens the stream calls it once, before HELLO. */
void esd_job_bind_stream(struct esd_job *job, uint64_t stream_digest);

/* Whether a process (who: "esd-ps shard 0", "esdd rank 1") may start
 * with the job's key settings: a job without job.key must say
 * job.insecure = yes (then a warning is logged, naming what a keyless
 * job exposes). Returns 0, or -EPERM with the refusal logged naming
 * job.key and job.insecure. */
int esd_job_key_check(const struct esd_job *job, const char *who);

/* Sizes m[n] as "m0,m1,..." into buf (len bytes, truncated to fit), for
 * logs. */
void esd_job_sizes_text(const uint32_t *m, uint32_t n, char *buf, size_t len);

/* A live workers.size_model value "FIXED_ROWS,ROWS_PER_SAMPLE,COMPUTE_NS"
 * (what shard 0 fits with workers.split = fit) into v[3]. Returns 0 or
 * -EINVAL (not three finite numbers >= 0). */
int esd_job_parse_size_model(const char *s, double v[3]);

/* workers.split = link-aware: batch[] again from rate_bps[] (same global
 * batch), as at load; a no-op for equal splits. Returns 0 or -EINVAL. */
int esd_job_resplit(struct esd_job *job);

/* workers.split = fit without a workers.size_model: the model to start
 * from, before anything was measured. Every key of a sample is taken as a
 * row pulled and a gradient pushed (cold caches: keys_per_sample x 2 rows
 * per sample, none fixed), with the job's compute_ns_per_sample; batch[]
 * is re-split from it within max_batch. Each process calls it once it
 * knows the stream's keys per sample and its cache's max_batch, before
 * the first iteration; a no-op for other splits. Returns 0, -EINVAL (no
 * keys per sample) or esd_job_resplit's error. */
int esd_job_fit_prior(struct esd_job *job, uint32_t keys_per_sample);
/* max_batch for a resolved cache: the samples whose keys fit beside the hot
 * rows (at least 1). Every process derives it the same way. */
uint32_t esd_job_max_batch(uint64_t cache_rows, uint64_t hot_rows, uint32_t tables);

/* One bit rate per worker ("5G,0.5G,..."; one value for all) into out[n],
 * as workers.rates. Returns 0 or -EINVAL. */
int esd_job_parse_rates(const char *s, uint32_t n, uint64_t *out);

/* "on-demand", "full-set" or "het" for the job's sync setting. */
const char *esd_job_sync_name(const struct esd_job *job);

#ifdef __cplusplus
}
#endif
#endif /* ESD_JOB_H */
