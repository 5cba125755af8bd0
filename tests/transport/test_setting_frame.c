/* The SETTING frame (esdctl set, announced by PS shard 0 after a barrier
 * ACK flagged ESD_FLAG_SETTING): round trip, the encoder's refusals, and
 * the decoder's strict checks of lengths, NUL bytes and padding. */
#include "testutil.h"

#include <esd/err.h>
#include <esd/proto.h>
#include <string.h>

static int decode(struct esd_buf *b, struct esd_msg *m, char *err)
{
	return esd_proto_decode(b->data, b->len, NULL, m, err, 160);
}

static void test_setting_roundtrip(void **state)
{
	(void)state;
	struct esd_buf b;
	struct esd_msg m;
	char err[160] = "";
	esd_buf_init(&b);
	assert_int_equal(esd_enc_setting(&b, 123, "dispatch.method", "opt"), 0);
	assert_int_equal(b.len % 4, 0);
	assert_int_equal(decode(&b, &m, err), 0);
	assert_int_equal(m.hdr.op, ESD_OP_SETTING);
	assert_string_equal(esd_op_name(ESD_OP_SETTING), "SETTING");
	assert_int_equal(m.u.setting.iteration, 123);
	assert_int_equal(m.u.setting.key_len, 15);
	assert_int_equal(m.u.setting.value_len, 3);
	assert_memory_equal(m.u.setting.key, "dispatch.method", 15);
	assert_memory_equal(m.u.setting.value, "opt", 3);
	/* longest strings */
	char k[ESD_PROTO_MAX_SETTING + 2];
	memset(k, 'k', sizeof(k));
	k[ESD_PROTO_MAX_SETTING] = 0;
	esd_buf_reset(&b);
	assert_int_equal(esd_enc_setting(&b, 1, k, k), 0);
	assert_int_equal(decode(&b, &m, err), 0);
	assert_int_equal(m.u.setting.value_len, ESD_PROTO_MAX_SETTING);
	esd_buf_free(&b);
}

static void test_setting_encoder_refuses(void **state)
{
	(void)state;
	struct esd_buf b;
	char k[ESD_PROTO_MAX_SETTING + 2];
	memset(k, 'k', sizeof(k));
	k[ESD_PROTO_MAX_SETTING + 1] = 0;
	esd_buf_init(&b);
	assert_int_equal(esd_enc_setting(&b, 1, "", "x"), -EINVAL);
	assert_int_equal(esd_enc_setting(&b, 1, "x", NULL), -EINVAL);
	assert_int_equal(esd_enc_setting(&b, 1, k, "x"), -EINVAL);
	assert_int_equal(b.len, 0);
	esd_buf_free(&b);
}

static void test_ack_setting_flag(void **state)
{
	(void)state;
	struct esd_buf b;
	struct esd_msg m;
	char err[160];
	esd_buf_init(&b);
	struct esd_ack a = {.iteration = 5, .op = ESD_OP_BARRIER, .setting = 1};
	assert_int_equal(esd_enc_ack(&b, &a), 0);
	assert_int_equal(decode(&b, &m, err), 0);
	assert_int_equal(m.u.ack.setting, 1);
	assert_int_equal(m.hdr.flags & ESD_FLAG_SETTING, ESD_FLAG_SETTING);
	esd_buf_reset(&b);
	a.setting = 0;
	assert_int_equal(esd_enc_ack(&b, &a), 0);
	assert_int_equal(decode(&b, &m, err), 0);
	assert_int_equal(m.u.ack.setting, 0);
	esd_buf_free(&b);
}

/* Patch the body of an encoded "ab"="cd" setting and expect a refusal. */
static void expect_bad(size_t off, uint8_t val, int want, const char *why)
{
	struct esd_buf b;
	struct esd_msg m;
	char err[160] = "";
	esd_buf_init(&b);
	assert_int_equal(esd_enc_setting(&b, 9, "ab", "cd"), 0);
	b.data[ESD_FRAME_HDR_SIZE + off] = val;
	assert_int_equal(decode(&b, &m, err), want);
	assert_non_null(strstr(err, why));
	esd_buf_free(&b);
}

static void test_setting_decoder_refuses(void **state)
{
	(void)state;
	/* body: u64 iteration, u16 key_len, u16 value_len, "abcd" = 16 bytes */
	expect_bad(8, 0, -EPROTO, "each must be 1..");  /* key_len 0 */
	expect_bad(10, 0, -EPROTO, "each must be 1.."); /* value_len 0 */
	expect_bad(9, 0x10, -E2BIG, "each must be 1.."); /* key 4098 bytes: too long */
	expect_bad(8, 3, -EPROTO, "body length 16, its fields need 20");
	expect_bad(10, 1, -EPROTO, "padding byte 0 is not 0"); /* 'd' becomes padding */
	expect_bad(13, 0, -EPROTO, "NUL byte at body offset 13");
	/* shorter than the fixed part */
	struct esd_buf b;
	struct esd_msg m;
	char err[160] = "";
	esd_buf_init(&b);
	assert_int_equal(esd_enc_setting(&b, 9, "ab", "cd"), 0);
	uint32_t len = 8;
	memcpy(b.data + 8, &len, 4);
	b.len = ESD_FRAME_HDR_SIZE + 8;
	assert_int_equal(decode(&b, &m, err), -EPROTO);
	assert_non_null(strstr(err, "below its 12-byte header"));
	esd_buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_setting_roundtrip),
	    cmocka_unit_test(test_setting_encoder_refuses),
	    cmocka_unit_test(test_ack_setting_flag),
	    cmocka_unit_test(test_setting_decoder_refuses),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
