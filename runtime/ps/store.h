/*
 * store.h - the rows of one PS shard (private to esd-ps).
 *
 * A row is created on first touch with esd_row_init(seed, key) and the
 * optimizer's initial state, clock 0. Rows live in arenas of fixed-size
 * records (key, clock, value[d], state[]) indexed by an open-addressing
 * table; nothing is ever freed while the shard runs (the model only grows).
 * With model.dims a row has its table's dim d and lives in the arena of
 * that dim (one a distinct dim: a class); rows are numbered class after
 * class (ps_store_at). Without, one arena of model.dim.
 *
 * Gradients of rows trained by several workers arrive as partial sums, one
 * per worker; they are staged per iteration and applied at the barrier in
 * key order, each key's partials summed in worker-rank order, then one
 * optimizer step. Staging the same (iteration, worker, key) twice is
 * refused (the transport's dedup makes this a protocol error).
 *
 * With ps.store_dir the records are in a file read and written with
 * pread / pwrite and only a cache of hot rows stays resident (store.c);
 * the index stays in RAM.
 */
#ifndef ESD_PS_STORE_H
#define ESD_PS_STORE_H

#include <esd/job.h>
#include <esd/optim.h>
#include <esd/types.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ps_row {
	uint64_t key;
	uint64_t clock;
	float data[]; /* value[dim], then state[state_len] */
};

struct ps_store;

int ps_store_create(unsigned dim, const struct esd_optim_params *opt, uint64_t seed,
		    struct ps_store **out);
/* The store job asks for: in RAM, or with ps.store_dir its rows in a file
 * there and at most ps.store_ram MiB of them resident. */
int ps_store_create_job(const struct esd_job *job, unsigned shard, struct ps_store **out);
void ps_store_free(struct ps_store *st);
/* Bytes of rows resident: on disk the row cache, the read window and the
 * file's dirty pages it allows; in RAM every chunk. */
size_t ps_store_resident_bytes(const struct ps_store *st);
/* Record i changed (created, updated or overwritten) since the last
 * ps_store_clear_changed: what an incremental checkpoint writes. */
bool ps_store_changed(const struct ps_store *st, size_t i);
void ps_store_clear_changed(struct ps_store *st);

/* The largest row's dim and its state floats (model.dim). */
unsigned ps_store_dim(const struct ps_store *st);
size_t ps_store_state_len(const struct ps_store *st);
size_t ps_store_count(const struct ps_store *st);
/* Value floats of key's row: its table's dim (model.dims), else dim. A
 * row's state, state floats per value float times that, follows its value
 * (struct ps_row). */
unsigned ps_store_key_dim(const struct ps_store *st, uint64_t key);

/* Row of key, created (initialised) if absent. NULL on -ENOMEM or (on
 * disk) an I/O error of the row file. The pointer is valid until the next
 * call into the store. */
struct ps_row *ps_store_get(struct ps_store *st, uint64_t key);
/* Row of key if it exists, else NULL (no creation). */
struct ps_row *ps_store_find(const struct ps_store *st, uint64_t key);
/* Row i in creation order (0 <= i < count), for checkpoints; NULL past the
 * end or on an I/O error of the row file. Valid until the next call. */
struct ps_row *ps_store_at(const struct ps_store *st, size_t i);

/* A row read from a checkpoint or an export against model.dims: its floats
 * past its table's dim must be zero (else the file is of other dims).
 * 0 or -EINVAL, logged naming the key and what (the file, for the log). */
int ps_store_check_padding(const struct ps_store *st, uint64_t key, const float *value,
			   const char *what);
/* Overwrite value + state + clock (PUSH_VALUE: an update or evict push),
 * the row at its dim (ps_store_key_dim: value[d], state[d * sf] in sf
 * blocks of d). Returns 0 or -ENOMEM. */
int ps_store_put_value(struct ps_store *st, uint64_t key, uint64_t clock, const float *value,
		       const float *state);
/* The same from a row at the store's dim (value[dim], state in blocks of
 * dim), as checkpoints and esd_row_view_unpack give it: the floats past
 * the row's dim are dropped (ps_store_check_padding checks the value's). */
int ps_store_put_padded(struct ps_store *st, uint64_t key, uint64_t clock, const float *value,
			const float *state);

/* Stage a partial gradient (ps_store_key_dim floats) of key from worker for the iteration being
 * collected. Returns 0, -EEXIST (same worker and key staged twice),
 * -ENOMEM. */
int ps_store_stage_grad(struct ps_store *st, uint32_t worker, uint64_t key, const float *grad);
/* Apply every staged gradient (keys ascending; partials summed in worker
 * order; one optimizer step per key; clock + 1) and clear the stage.
 * Returns the number of rows updated, or -ENOMEM. */
long ps_store_apply_staged(struct ps_store *st);
size_t ps_store_staged(const struct ps_store *st);

#endif
