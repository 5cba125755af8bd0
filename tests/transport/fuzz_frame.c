/*
 * libFuzzer target for the frame decoder: any bytes are parsed as a frame
 * header and decoded as a whole frame with small limits, and every view a
 * successful decode returns is read end to end (so an out-of-bounds view
 * shows under ASan). Built as a fuzzer with -DESD_FUZZ=ON and clang; the
 * committed corpus (tests/transport/corpus/) replays through the same entry
 * point as the test test_fuzz_frame_corpus in every build.
 */
#include <esd/proto.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile float sink;

/* A decoded frame's views read end to end. */
static float read_views(const struct esd_msg *m);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* model.dims of three tables: the frames flagged TABLE_DIMS decode
	 * under these limits, the others under lim */
	static const uint32_t dims[3] = {1, 4, 128};
	const struct esd_proto_limits lim = {.max_body = 1u << 16, .max_rows = 512, .max_dim = 128};
	const struct esd_proto_limits tlim = {.max_body = 1u << 16, .max_rows = 512, .max_dim = 128,
					      .table_dims = dims, .ntables = 3};
	struct esd_frame_hdr h;
	struct esd_msg m;
	char err[160];
	float acc = 0;
	(void)esd_frame_hdr_parse(data, size, &lim, &h, err, sizeof(err));
	/* Copy to an aligned buffer, as the transport hands frames over. */
	static _Alignas(16) uint8_t buf[(1u << 16) + 64];
	if (size > sizeof(buf))
		return 0;
	memcpy(buf, data, size);
	int decoded = 0;
	if (!esd_proto_decode(buf, size, &lim, &m, err, sizeof(err))) {
		acc += read_views(&m);
		decoded = 1;
	}
	if (!esd_proto_decode(buf, size, &tlim, &m, err, sizeof(err))) {
		acc += read_views(&m);
		decoded = 1;
	}
	if (decoded) {
		enum esd_xfer_kind k;
		uint32_t rows;
		esd_proto_classify(buf, size, &k, &rows);
		acc += (float)rows;
	}
	sink = acc;
	return 0;
}

static float read_views(const struct esd_msg *mp)
{
	const struct esd_msg m = *mp;
	float acc = 0;
	switch (m.hdr.op) {
	case ESD_OP_PULL:
		for (uint32_t i = 0; i < m.u.pull.count; i++)
			acc += (float)(esd_msg_key(&m, i) & 1);
		break;
	case ESD_OP_PULL_RESP:
	case ESD_OP_PUSH_VALUE:
	case ESD_OP_PUSH_GRAD:
	{
		const uint8_t *at = m.u.rows.data;
		for (uint32_t i = 0; i < m.u.rows.count; i++) {
			struct esd_row_view v;
			at = esd_rows_next(&m.u.rows, at, &v);
			for (uint32_t j = 0; j < v.dim; j++)
				acc += v.value[j];
			for (uint32_t j = 0; j < v.state_len; j++)
				acc += v.state[j];
		}
		break;
	}
	case ESD_OP_ERROR:
		for (uint32_t i = 0; i < m.u.error.len; i++)
			acc += (float)m.u.error.text[i];
		break;
	case ESD_OP_STATS:
		for (uint32_t i = 0; i < m.u.stats.count; i++) {
			struct esd_stats_entry e;
			esd_stats_get(&m.u.stats, i, &e);
			acc += (float)e.tx_rows;
		}
		break;
	default:
		break;
	}
	return acc;
}
